//! Throw-away MariaDB/MySQL accounts: `'tsr_…'@'<account_host>'`, created per
//! exchange. The revocation ref is `tsr_…@<account_host>`, so an account is
//! removed under the host it was created with even after the setting changes
//! (a bare name, from before the setting existed, means `%`).
//!
//! Created with the password's `mysql_native_password` hash (never the
//! plaintext) and a per-user connection limit, then granted the one privilege
//! on the one table (or `database.*`) directly.
//!
//! Why directly, not through a role as on PostgreSQL: MariaDB stores each table
//! grant as its own row in `mysql.tables_priv`, so there is no per-table ACL to
//! overflow (10,000 users granted on one table were created without error
//! here); and a role only applies once it is the user's default role, which
//! `SET DEFAULT ROLE … FOR` another user allows only with UPDATE on the `mysql`
//! schema — a privilege that lets its holder rewrite every account's rights.
//! Direct grants need no more than GRANT OPTION on the table.
//!
//! MariaDB has no account expiry: the broker's expiry reaper is what ends an
//! expired user. Removal, per batch: `ALTER USER … ACCOUNT LOCK` (no new
//! logins), `KILL CONNECTION` for each of their sessions found in
//! `information_schema.PROCESSLIST`, then one `DROP USER IF EXISTS` for all,
//! which removes their grants too. Every step tolerates users that are already
//! gone, so removal is idempotent.

use super::quote::{account, grant_database, ident, is_host_pattern, literal, Unquotable};
use crate::backends::database::{is_user_name, DbPath, Privilege, Table};
use crate::backends::BackendError;
use sqlx::{MySqlPool, Row};

const BATCH: usize = 1000;
/// ER_NO_SUCH_THREAD: the session ended on its own meanwhile.
const NO_SUCH_THREAD: u16 = 1094;

/// The statements that create one user with its one grant, in order.
pub fn create_sql(
    user: &str,
    host: &str,
    password_hash: &str,
    connection_limit: u32,
    path: &DbPath,
    privilege: Privilege,
) -> Result<[String; 2], Unquotable> {
    let acct = account(user, host)?;
    // A table-level grant names its database literally; a database-level one
    // matches it as a pattern, so its wildcards are escaped.
    let (database, table) = match &path.table {
        Table::Named(t) => (ident(&path.database)?, ident(t)?),
        Table::All => (grant_database(&path.database)?, "*".to_owned()),
    };
    Ok([
        format!(
            "CREATE USER {acct} IDENTIFIED BY PASSWORD {} WITH MAX_USER_CONNECTIONS {connection_limit}",
            literal(password_hash)?
        ),
        format!(
            "GRANT {} ON {database}.{table} TO {acct}",
            privilege.sql(),
        ),
    ])
}

pub async fn create(pool: &MySqlPool, statements: &[String]) -> Result<(), BackendError> {
    for sql in statements {
        sqlx::raw_sql(sql)
            .execute(pool)
            .await
            .map_err(super::classify)?;
    }
    Ok(())
}

/// Locks, disconnects and drops `users`; names that are not broker user names
/// are ignored.
pub async fn drop_all(pool: &MySqlPool, refs: &[String]) -> Result<(), BackendError> {
    let ours: Vec<(&str, &str)> = refs.iter().filter_map(|r| parse_ref(r)).collect();
    if ours.len() < refs.len() {
        tracing::warn!(
            ignored = refs.len() - ours.len(),
            "revocation refs that are not broker accounts were ignored"
        );
    }
    for chunk in ours.chunks(BATCH) {
        drop_batch(pool, chunk).await?;
    }
    Ok(())
}

/// The revocation ref of `user` created under `host`.
pub fn account_ref(user: &str, host: &str) -> String {
    format!("{user}@{host}")
}

/// `(user, host)` of a ref; `None` for anything that is not a broker account.
pub fn parse_ref(r: &str) -> Option<(&str, &str)> {
    let (user, host) = r.split_once('@').unwrap_or((r, "%"));
    (is_user_name(user) && is_host_pattern(host)).then_some((user, host))
}

async fn drop_batch(pool: &MySqlPool, users: &[(&str, &str)]) -> Result<(), BackendError> {
    let rejected = |e: Unquotable| BackendError::Rejected(e.to_string());
    let accounts = users
        .iter()
        .map(|(u, h)| account(u, h))
        .collect::<Result<Vec<_>, _>>()
        .map_err(rejected)?
        .join(", ");
    let names = users
        .iter()
        .map(|(u, _)| literal(u))
        .collect::<Result<Vec<_>, _>>()
        .map_err(rejected)?
        .join(", ");
    sqlx::raw_sql(&format!("ALTER USER IF EXISTS {accounts} ACCOUNT LOCK"))
        .execute(pool)
        .await
        .map_err(super::classify)?;
    crate::failpoint::hit("revocation.mid_removal").await;
    let sessions = sqlx::raw_sql(&format!(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE USER IN ({names})"
    ))
    .fetch_all(pool)
    .await
    .map_err(super::classify)?;
    for row in sessions {
        let id: i64 = row.try_get(0).map_err(super::classify)?;
        if let Err(e) = sqlx::raw_sql(&format!("KILL CONNECTION {id}"))
            .execute(pool)
            .await
        {
            if !super::has_number(&e, &[NO_SUCH_THREAD]) {
                return Err(super::classify(e));
            }
        }
    }
    crate::failpoint::hit("revocation.before_drop").await;
    sqlx::raw_sql(&format!("DROP USER IF EXISTS {accounts}"))
        .execute(pool)
        .await
        .map_err(super::classify)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_statements_carry_the_hash_not_the_password() {
        use crate::backends::database::{parse_path, DbKind};
        let path = parse_path(DbKind::Mysql, "shop.orders", true).unwrap();
        let [create, grant] =
            create_sql("tsr_u", "%", "*ABC", 2, &path, Privilege::Insert).unwrap();
        assert_eq!(
            create,
            "CREATE USER 'tsr_u'@'%' IDENTIFIED BY PASSWORD '*ABC' WITH MAX_USER_CONNECTIONS 2"
        );
        assert_eq!(grant, "GRANT INSERT ON `shop`.`orders` TO 'tsr_u'@'%'");
        let all = parse_path(DbKind::Mysql, "shop.*", true).unwrap();
        let [_, grant] = create_sql("tsr_u", "%", "*ABC", 2, &all, Privilege::Select).unwrap();
        assert_eq!(grant, "GRANT SELECT ON `shop`.* TO 'tsr_u'@'%'");
        let underscored = parse_path(DbKind::Mysql, "rt_my_main.*", true).unwrap();
        let [_, grant] =
            create_sql("tsr_u", "%", "*ABC", 2, &underscored, Privilege::Select).unwrap();
        assert_eq!(grant, "GRANT SELECT ON `rt\\_my\\_main`.* TO 'tsr_u'@'%'");
        let table = parse_path(DbKind::Mysql, "rt_my_main.t_1", true).unwrap();
        let [_, grant] = create_sql("tsr_u", "%", "*ABC", 2, &table, Privilege::Select).unwrap();
        assert_eq!(grant, "GRANT SELECT ON `rt_my_main`.`t_1` TO 'tsr_u'@'%'");
        let [create, _] =
            create_sql("tsr_u", "10.1.%", "*ABC", 2, &table, Privilege::Select).unwrap();
        assert!(
            create.starts_with("CREATE USER 'tsr_u'@'10.1.%' "),
            "{create}"
        );
    }

    #[test]
    fn refs_name_their_host_and_nothing_else_is_touched() {
        let user = crate::backends::database::user_name("8d4f0a4e-1c2b-4f7a-9e3d-5b6c7d8e9f01");
        assert_eq!(
            parse_ref(&account_ref(&user, "10.0.%")),
            Some((user.as_str(), "10.0.%"))
        );
        assert_eq!(
            parse_ref(&user),
            Some((user.as_str(), "%")),
            "refs from before account_host"
        );
        for bad in [
            "root@%".to_owned(),
            format!("{user}@a b"),
            format!("{user}@"),
            format!("{user}@x'y"),
            "tsr_g_abc@%".to_owned(),
        ] {
            assert_eq!(parse_ref(&bad), None, "{bad}");
        }
    }
}
