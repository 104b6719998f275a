//! Broker-managed roles for MariaDB: one per (database, table, privilege).
//!
//! Same reasoning as PostgreSQL's group roles (`backends::postgres::grants`):
//! the table privilege is granted once, to a role, and each throw-away user is
//! granted the role and has it as its default role. Revoking a user then
//! removes one role grant, not a table privilege. `CREATE ROLE IF NOT EXISTS`
//! and GRANT are idempotent, so concurrent first uses (or replicas) are safe.

use super::quote::{ident, Unquotable};
use crate::backends::database::{group_name, DbPath, Dialect, Privilege, Table};
use crate::backends::BackendError;
use sqlx::MySqlPool;
use std::collections::HashSet;
use tokio::sync::Mutex;

#[derive(Default)]
pub struct Roles {
    known: Mutex<HashSet<String>>,
}

impl Roles {
    /// The role holding `privilege` on `path`, created with its grant on first use.
    pub async fn ensure(
        &self,
        pool: &MySqlPool,
        path: &DbPath,
        privilege: Privilege,
    ) -> Result<String, BackendError> {
        let name = group_name(Dialect::Mysql, path, privilege);
        let mut known = self.known.lock().await;
        if known.contains(&name) {
            return Ok(name);
        }
        for sql in role_sql(&name, path, privilege).map_err(quote_error)? {
            sqlx::raw_sql(&sql)
                .execute(pool)
                .await
                .map_err(super::classify)?;
        }
        known.insert(name.clone());
        Ok(name)
    }
}

fn role_sql(role: &str, path: &DbPath, privilege: Privilege) -> Result<[String; 2], Unquotable> {
    let role = ident(role)?;
    let table = match &path.table {
        Table::Named(t) => ident(t)?,
        Table::All => "*".to_owned(),
    };
    Ok([
        format!("CREATE ROLE IF NOT EXISTS {role}"),
        format!(
            "GRANT {} ON {}.{table} TO {role}",
            privilege.sql(),
            ident(&path.database)?
        ),
    ])
}

fn quote_error(e: Unquotable) -> BackendError {
    BackendError::Rejected(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::database::parse_path;

    #[test]
    fn role_statements_are_quoted() {
        let p = parse_path(Dialect::Mysql, "shop.Orders", false).unwrap();
        assert_eq!(
            role_sql("tsr_g_1", &p, Privilege::Insert).unwrap(),
            [
                "CREATE ROLE IF NOT EXISTS `tsr_g_1`".to_owned(),
                "GRANT INSERT ON `shop`.`Orders` TO `tsr_g_1`".to_owned()
            ]
        );
    }
}
