//! Throw-away login roles: created per exchange, removed by the revocation worker.
//!
//! Creation is one statement — `CREATE ROLE … LOGIN PASSWORD '<SCRAM verifier>'
//! VALID UNTIL … CONNECTION LIMIT … IN ROLE <group>` — so a user either exists
//! with its membership or not at all. Removal is three steps per batch, in this
//! order, each one round trip whatever the batch size:
//!
//! 1. `ALTER ROLE … NOLOGIN` for every user that still exists (committed first,
//!    so a session cut in step 2 cannot log in again before step 3);
//! 2. `pg_terminate_backend` on every session of those users, then a short wait
//!    until they are gone from `pg_stat_activity` — `VALID UNTIL` only stops
//!    *new* logins, open sessions live on until someone ends them. (Not
//!    `pg_terminate_backend(pid, timeout)`: it waits per session in 100 ms steps,
//!    1.7 s for 20 sessions here; signalling all, then polling, takes milliseconds);
//! 3. `DROP ROLE IF EXISTS` of the whole batch in one statement.
//!
//! A user that is already gone, or was never created (a failed or crashed
//! exchange), is simply absent from step 1 and a no-op in step 3: removal is
//! idempotent, as the outbox requires. If the batch's `DROP ROLE` fails because
//! a user owns objects, every user of the batch is removed on its own (taking
//! membership in it, `DROP OWNED BY`, `DROP ROLE`), and only those that still
//! cannot be removed are reported ([`BackendError::Partial`]).

use super::quote::{ident, literal, Unquotable};
use crate::backends::database::is_user_name;
use crate::backends::BackendError;
use crate::clock::rfc3339;
use sqlx::PgPool;

/// Users per statement batch.
const BATCH: usize = 1000;
/// How long removal waits for signalled sessions to exit (they do in
/// milliseconds; a session stuck in uninterruptible work is dropped anyway).
const TERMINATE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// "role … cannot be dropped because some objects depend on it".
const DEPENDENT_OBJECTS: &str = "2BP01";

/// The one statement that creates a user. `verifier` is a SCRAM verifier, never
/// a password.
pub fn create_sql(
    user: &str,
    verifier: &str,
    valid_until: i64,
    connection_limit: u32,
    group: &str,
) -> Result<String, Unquotable> {
    Ok(format!(
        "CREATE ROLE {} LOGIN PASSWORD {} VALID UNTIL {} CONNECTION LIMIT {} IN ROLE {}",
        ident(user)?,
        literal(verifier)?,
        literal(&rfc3339(valid_until))?,
        connection_limit,
        ident(group)?
    ))
}

pub async fn create(pool: &PgPool, sql: &str) -> Result<(), BackendError> {
    sqlx::raw_sql(sql)
        .execute(pool)
        .await
        .map(|_| ())
        .map_err(super::classify)
}

/// Disables, disconnects and drops `users`. Names that are not broker user
/// names are ignored: nothing else is ever touched.
pub async fn drop_all(pool: &PgPool, users: &[String]) -> Result<(), BackendError> {
    let ours: Vec<String> = users.iter().filter(|u| is_user_name(u)).cloned().collect();
    if ours.len() < users.len() {
        tracing::warn!(
            ignored = users.len() - ours.len(),
            "revocation refs that are not broker user names were ignored"
        );
    }
    // Every batch is tried: users that cannot be removed are reported one
    // by one, and never hold back the others.
    let mut failed = vec![];
    for chunk in ours.chunks(BATCH) {
        match drop_batch(pool, chunk).await {
            Ok(()) => {}
            Err(BackendError::Partial { failed: some }) => failed.extend(some),
            Err(e) => return Err(e),
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(BackendError::Partial { failed })
    }
}

async fn drop_batch(pool: &PgPool, users: &[String]) -> Result<(), BackendError> {
    let started = std::time::Instant::now();
    let existing: Vec<String> =
        sqlx::query_scalar("SELECT rolname::text FROM pg_roles WHERE rolname = ANY($1)")
            .bind(users)
            .fetch_all(pool)
            .await
            .map_err(super::classify)?;
    if existing.is_empty() {
        return Ok(());
    }
    let quoted = existing
        .iter()
        .map(|u| ident(u))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| BackendError::Rejected(e.to_string()))?;
    let nologin: String = quoted
        .iter()
        .map(|u| format!("ALTER ROLE {u} NOLOGIN;"))
        .collect();
    sqlx::raw_sql(&nologin)
        .execute(pool)
        .await
        .map_err(super::classify)?;
    let disabled = started.elapsed();
    crate::failpoint::hit("revocation.mid_removal").await;
    terminate_sessions(pool, &existing).await?;
    let terminated = started.elapsed();
    crate::failpoint::hit("revocation.before_drop").await;
    let drop = format!("DROP ROLE IF EXISTS {}", quoted.join(", "));
    match sqlx::raw_sql(&drop).execute(pool).await {
        Ok(_) => {
            tracing::debug!(
                users = existing.len(),
                ?disabled,
                ?terminated,
                dropped = ?started.elapsed(),
                "postgres users removed"
            );
            Ok(())
        }
        Err(e) if super::grants::has_code(&e, &[DEPENDENT_OBJECTS]) => {
            // Some user owns something (a large object, a default-privileges
            // entry, …). One by one, every user: the broker takes membership
            // in the user (CREATEROLE allows it; DROP OWNED BY needs it), drops
            // what the user owns in this database, then the user. A failure
            // is reported for that user only.
            let mut failed = vec![];
            for (name, u) in existing.iter().zip(&quoted) {
                let one = format!("GRANT {u} TO CURRENT_USER; DROP OWNED BY {u}; DROP ROLE {u};");
                match sqlx::raw_sql(&one).execute(pool).await {
                    Ok(_) => {}
                    // Gone meanwhile.
                    Err(e) if super::grants::has_code(&e, &["42704"]) => {}
                    Err(e) => {
                        let why: String = e.to_string().chars().take(200).collect();
                        tracing::warn!(user = %name, error = %why, "postgres user could not be removed");
                        failed.push((name.clone(), why));
                    }
                }
            }
            tracing::debug!(users = existing.len(), failed = failed.len(), took = ?started.elapsed(), "postgres users removed one by one");
            if failed.is_empty() {
                Ok(())
            } else {
                Err(BackendError::Partial { failed })
            }
        }
        Err(e) => Err(super::classify(e)),
    }
}

/// Signals every session of `users`, then waits (bounded) until they are gone.
async fn terminate_sessions(pool: &PgPool, users: &[String]) -> Result<(), BackendError> {
    let signalled = sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE usename = ANY($1) AND pid <> pg_backend_pid()",
    )
    .bind(users)
    .fetch_all(pool)
    .await
    .map_err(super::classify)?;
    if signalled.is_empty() {
        return Ok(());
    }
    let deadline = std::time::Instant::now() + TERMINATE_WAIT;
    loop {
        let left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE usename = ANY($1)")
                .bind(users)
                .fetch_one(pool)
                .await
                .map_err(super::classify)?;
        if left == 0 || std::time::Instant::now() >= deadline {
            if left > 0 {
                tracing::warn!(sessions = left, "sessions still exiting after terminate");
            }
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_statement_is_quoted_and_carries_no_password() {
        let sql = create_sql(
            "tsr_u",
            "SCRAM-SHA-256$4096:c2FsdA==$a:b",
            1_800_000_000,
            2,
            "tsr_g_1",
        )
        .unwrap();
        assert_eq!(
            sql,
            "CREATE ROLE \"tsr_u\" LOGIN PASSWORD 'SCRAM-SHA-256$4096:c2FsdA==$a:b' \
             VALID UNTIL '2027-01-15T08:00:00Z' CONNECTION LIMIT 2 IN ROLE \"tsr_g_1\""
        );
    }
}
