//! Throw-away login roles: created per exchange, removed by the revocation worker.
//!
//! Creation is one implicit transaction — `CREATE ROLE … LOGIN PASSWORD
//! '<SCRAM verifier>' VALID UNTIL … CONNECTION LIMIT …` and the user's access
//! ([`Access`]) — so a user either exists with its access or not at all.
//!
//! Removal, per batch, each step one round trip whatever the batch size:
//!
//! 1. `ALTER ROLE … NOLOGIN` for every user that still exists (committed first,
//!    so a session cut in step 2 cannot log in again before the drop);
//! 2. `pg_terminate_backend` on every session of those users, then a short wait
//!    until they are gone from `pg_stat_activity` — `VALID UNTIL` only stops
//!    *new* logins. (Not `pg_terminate_backend(pid, timeout)`: it waits per
//!    session in 100 ms steps, 1.7 s for 20 sessions here; signalling all, then
//!    polling, takes milliseconds);
//! 3. every prepared transaction a user left (`pg_prepared_xacts`) is rolled
//!    back, as that user, in its database: it would keep its locks forever;
//! 4. in every *other* database where a user owns something or holds a
//!    privilege (`pg_shdepend` is shared by the whole cluster), `DROP OWNED BY`;
//! 5. in the broker's database, one transaction: a `REVOKE` of each privilege
//!    the users hold, then `DROP ROLE` of the whole batch.
//!
//! Steps 3 and 4 need the broker to act as the user: it takes membership
//! (`GRANT … TO CURRENT_USER`; a CREATEROLE account may, on 16+ for roles it
//! created) for just those users. If step 4 or 5 fails — a user owns
//! something here (a large object, default privileges) or in a database the
//! broker cannot reach — every user of the batch is removed on its own, with
//! `DROP OWNED BY`, and only those that still cannot be removed are reported
//! ([`BackendError::Partial`]); the others never wait for them. A user that is already gone, or was never
//! created (a failed or crashed exchange), is absent from step 1 on: removal is
//! idempotent, as the outbox requires.

use super::grants::{q, quote_error};
use super::quote::{ident, literal, Unquotable};
use crate::backends::database::is_user_name;
use crate::backends::BackendError;
use crate::clock::rfc3339;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, Executor, PgConnection, PgPool};
use tokio::sync::Mutex;

/// Users per statement batch.
const BATCH: usize = 1000;
/// How long removal waits for signalled sessions to exit (they do in
/// milliseconds; a session stuck in uninterruptible work is dropped anyway).
const TERMINATE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// One `REVOKE` per privilege that a role of `$1` holds on a table, sequence
/// or schema of this database, or on this database.
const REVOKES: &str = "\
    SELECT format('REVOKE %s ON %s %s FROM %I;', a.privilege_type, \
                  CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, c.oid::regclass, r.rolname) \
      FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a JOIN pg_roles r ON r.oid = a.grantee \
     WHERE r.rolname = ANY($1) \
    UNION ALL \
    SELECT format('REVOKE %s ON SCHEMA %I FROM %I;', a.privilege_type, n.nspname, r.rolname) \
      FROM pg_namespace n CROSS JOIN LATERAL aclexplode(n.nspacl) a JOIN pg_roles r ON r.oid = a.grantee \
     WHERE r.rolname = ANY($1) \
    UNION ALL \
    SELECT format('REVOKE %s ON DATABASE %I FROM %I;', a.privilege_type, d.datname, r.rolname) \
      FROM pg_database d CROSS JOIN LATERAL aclexplode(d.datacl) a JOIN pg_roles r ON r.oid = a.grantee \
     WHERE r.rolname = ANY($1) AND d.datname = current_database()";

/// How a user gets its one privilege.
pub enum Access {
    /// PostgreSQL 16+: member of the broker's group for (table, privilege),
    /// with its privileges (`INHERIT TRUE`) but unable to act as it
    /// (`SET FALSE`), so nothing it does is owned by or stored on the group.
    Group(String),
    /// PostgreSQL 15 and older: these GRANTs to the user itself
    /// (`grants::direct_sql`).
    Direct(String),
}

/// The one statement that creates a user. `verifier` is a SCRAM verifier, never
/// a password.
pub fn create_sql(
    user: &str,
    verifier: &str,
    valid_until: i64,
    connection_limit: u32,
    access: &Access,
) -> Result<String, Unquotable> {
    let u = ident(user)?;
    let create = format!(
        "CREATE ROLE {u} LOGIN PASSWORD {} VALID UNTIL {} CONNECTION LIMIT {};",
        literal(verifier)?,
        literal(&rfc3339(valid_until))?,
        connection_limit,
    );
    Ok(match access {
        Access::Group(g) => format!(
            "{create} GRANT {} TO {u} WITH INHERIT TRUE, SET FALSE;",
            ident(g)?
        ),
        Access::Direct(grants) => format!("{create} {grants}"),
    })
}

/// Runs a creation. `acl` serialises statements that rewrite a shared ACL
/// (direct grants) within this process; another process doing the same at
/// the same moment makes PostgreSQL answer "tuple concurrently updated", and
/// the whole transaction is run again.
pub async fn create(pool: &PgPool, sql: &str, acl: Option<&Mutex<()>>) -> Result<(), BackendError> {
    let _serial = match acl {
        Some(m) => Some(m.lock().await),
        None => None,
    };
    super::grants::grant(pool, sql).await
}

/// What removal needs besides the names.
pub struct Remover<'a> {
    pub pool: &'a PgPool,
    /// The broker's connection, for other databases (`.database(name)`).
    pub options: &'a PgConnectOptions,
    /// `server_version_num`.
    pub version: u32,
    /// Held while dropping: DROP OWNED revokes direct grants (see [`create`]).
    pub acl: &'a Mutex<()>,
}

impl Remover<'_> {
    /// Disables, disconnects and drops `users`. Names that are not broker user
    /// names are ignored: nothing else is ever touched.
    pub async fn drop_all(&self, users: &[String]) -> Result<(), BackendError> {
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
            match self.drop_batch(chunk).await {
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

    async fn drop_batch(&self, users: &[String]) -> Result<(), BackendError> {
        let pool = self.pool;
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
        let quoted = quote_all(&existing)?;
        let nologin: String = quoted
            .iter()
            .map(|u| format!("ALTER ROLE {u} NOLOGIN;"))
            .collect();
        run(pool, &nologin).await?;
        let disabled = started.elapsed();
        crate::failpoint::hit("revocation.mid_removal").await;
        terminate_sessions(pool, &existing).await?;
        let terminated = started.elapsed();
        self.roll_back_prepared(&existing).await?;
        crate::failpoint::hit("revocation.before_drop").await;
        let here = match self.drop_owned_elsewhere(&existing).await {
            Ok(()) => self.drop_here(&existing, false).await,
            Err(e) => Err(e),
        };
        match here {
            Ok(()) => {
                tracing::debug!(
                    users = existing.len(),
                    ?disabled,
                    ?terminated,
                    dropped = ?started.elapsed(),
                    "postgres users removed"
                );
                Ok(())
            }
            Err(batch) => {
                tracing::debug!(error = %batch, "batch removal failed; removing one by one");
                let mut failed = vec![];
                for name in &existing {
                    let one = std::slice::from_ref(name);
                    let result = match self.drop_owned_elsewhere(one).await {
                        Ok(()) => self.drop_here(one, true).await,
                        Err(e) => Err(e),
                    };
                    if let Err(e) = result {
                        let why: String = e.to_string().chars().take(200).collect();
                        tracing::warn!(user = %name, error = %why, "postgres user could not be removed");
                        failed.push((name.clone(), why));
                    }
                }
                tracing::debug!(users = existing.len(), failed = failed.len(), took = ?started.elapsed(), "postgres users removed one by one");
                if failed.is_empty() {
                    Ok(())
                } else {
                    Err(BackendError::Partial { failed })
                }
            }
        }
    }

    /// In the broker's database, in one transaction: a `REVOKE` of each
    /// privilege the users hold, then (`owned`) `DROP OWNED BY`, then `DROP
    /// ROLE`.
    ///
    /// Why exact REVOKEs: they free a user of its grants without membership in
    /// it, so the common case (a user that owns nothing) needs no `GRANT … TO
    /// CURRENT_USER`, which on PostgreSQL 16+ costs seconds per thousand roles.
    /// And `DROP OWNED BY` revokes with `ALL`, which on a sequence also names
    /// its columns: PostgreSQL 15 refuses that to a broker holding only `USAGE
    /// … WITH GRANT OPTION` ("permission denied for column tableoid").
    /// `owned` is for a user that owns something (the batch's `DROP ROLE`
    /// failed): the broker takes membership in it first.
    async fn drop_here(&self, names: &[String], owned: bool) -> Result<(), BackendError> {
        let revokes: Vec<String> = sqlx::query_scalar(REVOKES)
            .bind(names)
            .fetch_all(self.pool)
            .await
            .map_err(super::classify)?;
        let list = quote_all(names)?.join(", ");
        if owned {
            self.take(names).await?;
        }
        let drop_owned = if owned {
            format!("DROP OWNED BY {list};")
        } else {
            String::new()
        };
        let sql = format!(
            "{} {drop_owned} DROP ROLE IF EXISTS {list};",
            revokes.concat()
        );
        create(self.pool, &sql, Some(self.acl)).await
    }

    /// Membership in `users` for the broker, which `DROP OWNED BY` and `SET
    /// ROLE` need: a CREATEROLE account may grant it itself (on 16+, for roles
    /// it created: it holds ADMIN OPTION on them).
    async fn take(&self, users: &[String]) -> Result<(), BackendError> {
        let list = quote_all(users)?.join(", ");
        let sql = if self.version >= super::MEMBERSHIP_OPTIONS {
            format!("GRANT {list} TO CURRENT_USER WITH INHERIT TRUE, SET TRUE")
        } else {
            format!("GRANT {list} TO CURRENT_USER")
        };
        run(self.pool, &sql).await
    }

    /// Rolls back, as its owner and in its database, every prepared
    /// transaction of `users`.
    async fn roll_back_prepared(&self, users: &[String]) -> Result<(), BackendError> {
        let prepared: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT database::text, gid, owner::text FROM pg_prepared_xacts WHERE owner = ANY($1)",
        )
        .bind(users)
        .fetch_all(self.pool)
        .await
        .map_err(super::classify)?;
        for (database, gid, owner) in prepared {
            self.take(std::slice::from_ref(&owner)).await?;
            let mut conn = self.connect(&database).await?;
            // One statement each: ROLLBACK PREPARED refuses to run in a
            // transaction block, and a multi-statement query is one.
            for sql in [
                format!("SET ROLE {}", q(&owner)?),
                format!("ROLLBACK PREPARED {}", literal(&gid).map_err(quote_error)?),
            ] {
                match conn.execute(sql.as_str()).await {
                    Ok(_) => {}
                    // Finished meanwhile.
                    Err(e) if super::grants::has_code(&e, &["42704"]) => {}
                    Err(e) => return Err(super::classify(e)),
                }
            }
            let _ = conn.close().await;
            tracing::info!(user = %owner, %database, "rolled back a prepared transaction of a removed user");
        }
        Ok(())
    }

    /// `DROP OWNED BY` in each other database where one of `users` owns an
    /// object or holds a privilege.
    async fn drop_owned_elsewhere(&self, users: &[String]) -> Result<(), BackendError> {
        let databases: Vec<(String, Vec<String>)> = sqlx::query_as(
            "SELECT d.datname::text, array_agg(DISTINCT r.rolname::text) \
             FROM pg_shdepend s JOIN pg_database d ON d.oid = s.dbid \
             JOIN pg_roles r ON r.oid = s.refobjid \
             WHERE s.refclassid = 'pg_authid'::regclass AND r.rolname = ANY($1) \
             AND d.datname <> current_database() GROUP BY d.datname",
        )
        .bind(users)
        .fetch_all(self.pool)
        .await
        .map_err(super::classify)?;
        for (database, owners) in databases {
            self.take(&owners).await?;
            let mut conn = self.connect(&database).await?;
            let sql = format!("DROP OWNED BY {}", quote_all(&owners)?.join(", "));
            let result = conn.execute(sql.as_str()).await;
            let _ = conn.close().await;
            result.map_err(super::classify)?;
            tracing::info!(users = owners.len(), %database, "dropped what removed users owned in another database");
        }
        Ok(())
    }

    async fn connect(&self, database: &str) -> Result<PgConnection, BackendError> {
        PgConnection::connect_with(&self.options.clone().database(database))
            .await
            .map_err(super::classify)
    }
}

async fn run(pool: &PgPool, sql: &str) -> Result<(), BackendError> {
    sqlx::raw_sql(sql)
        .execute(pool)
        .await
        .map(|_| ())
        .map_err(super::classify)
}

fn quote_all(names: &[String]) -> Result<Vec<String>, BackendError> {
    names.iter().map(|u| q(u)).collect()
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
            &Access::Group("tsr_g_1".into()),
        )
        .unwrap();
        assert_eq!(
            sql,
            "CREATE ROLE \"tsr_u\" LOGIN PASSWORD 'SCRAM-SHA-256$4096:c2FsdA==$a:b' \
             VALID UNTIL '2027-01-15T08:00:00Z' CONNECTION LIMIT 2; \
             GRANT \"tsr_g_1\" TO \"tsr_u\" WITH INHERIT TRUE, SET FALSE;"
        );
        let direct = create_sql(
            "tsr_u",
            "v",
            1_800_000_000,
            2,
            &Access::Direct("GRANT SELECT ON TABLE \"s\".\"t\" TO \"tsr_u\";".into()),
        )
        .unwrap();
        assert!(
            direct.ends_with("CONNECTION LIMIT 2; GRANT SELECT ON TABLE \"s\".\"t\" TO \"tsr_u\";"),
            "{direct}"
        );
    }
}
