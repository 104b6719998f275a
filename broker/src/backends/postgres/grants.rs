//! Broker-managed group roles: the one place table privileges are granted.
//!
//! Why groups: granting every throw-away user directly on a table appends one
//! entry per user to the table's ACL, and PostgreSQL refuses every GRANT on the
//! table once the ACL no longer fits in a row ("row is too big", after about
//! 2,400 live users here). So each (database, schema, table, privilege) gets one
//! NOLOGIN role, `tsr_g_<hash>`, that holds the grant; a user is only made a
//! member of it (`CREATE ROLE … IN ROLE`), which touches `pg_auth_members`, not
//! the table. 10,000 live users on one table cost one ACL entry.
//!
//! Groups are created on first use and never dropped (they hold nothing but the
//! grant). Creation tolerates a concurrent creator — another request or another
//! replica — and the GRANTs are idempotent, so "ensure" is safe to repeat.

use super::quote::{ident, Unquotable};
use crate::backends::database::{group_name, DbPath, Dialect, Privilege, Table};
use crate::backends::BackendError;
use sqlx::PgPool;
use std::collections::HashSet;
use tokio::sync::Mutex;

/// SQLSTATEs that mean "someone else created it first".
const DUPLICATE_OBJECT: &str = "42710";
const UNIQUE_VIOLATION: &str = "23505";
/// "tuple concurrently updated": two GRANTs on one object at once (replicas).
const INTERNAL_ERROR: &str = "XX000";

/// Groups known to exist, so the common case costs no statement.
#[derive(Default)]
pub struct Groups {
    known: Mutex<HashSet<String>>,
}

impl Groups {
    /// Returns the name of the group holding `privilege` on `path`, creating it
    /// and its grants if this process has not seen it yet.
    pub async fn ensure(
        &self,
        pool: &PgPool,
        path: &DbPath,
        privilege: Privilege,
    ) -> Result<String, BackendError> {
        let name = group_name(Dialect::Postgres, path, privilege);
        // Held across creation: first uses of a resource are rare, and serialising
        // them keeps two requests of this process from racing on one ACL.
        let mut known = self.known.lock().await;
        let created = known.contains(&name);
        // `ALL TABLES IN SCHEMA` covers the tables that exist when it runs: a
        // schema-wide group is granted again on every use, so tables created since
        // are included. A one-table group needs it once.
        if created && matches!(path.table, Table::Named(_)) {
            return Ok(name);
        }
        if !created {
            let create = format!("CREATE ROLE {} NOLOGIN", ident(&name).map_err(quote_error)?);
            match sqlx::raw_sql(&create).execute(pool).await {
                Ok(_) => {}
                Err(e) if has_code(&e, &[DUPLICATE_OBJECT, UNIQUE_VIOLATION]) => {}
                Err(e) => return Err(super::classify(e)),
            }
        }
        let grants = grant_sql(&name, path, privilege).map_err(quote_error)?;
        let mut attempt = 0;
        loop {
            match sqlx::raw_sql(&grants).execute(pool).await {
                Ok(_) => break,
                Err(e) if attempt < 5 && has_code(&e, &[INTERNAL_ERROR]) => {
                    attempt += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(20 * attempt)).await;
                }
                Err(e) => return Err(super::classify(e)),
            }
        }
        known.insert(name.clone());
        Ok(name)
    }
}

/// CONNECT on the database, USAGE on the schema, the privilege on the table.
fn grant_sql(group: &str, path: &DbPath, privilege: Privilege) -> Result<String, Unquotable> {
    let group = ident(group)?;
    let schema = ident(path.schema.as_deref().unwrap_or("public"))?;
    let target = match &path.table {
        Table::Named(t) => format!("TABLE {schema}.{}", ident(t)?),
        Table::All => format!("ALL TABLES IN SCHEMA {schema}"),
    };
    Ok(format!(
        "GRANT CONNECT ON DATABASE {db} TO {group}; \
         GRANT USAGE ON SCHEMA {schema} TO {group}; \
         GRANT {privilege} ON {target} TO {group};",
        db = ident(&path.database)?,
        privilege = privilege.sql(),
    ))
}

pub fn has_code(e: &sqlx::Error, codes: &[&str]) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().is_some_and(|c| codes.contains(&c.as_ref())))
}

fn quote_error(e: Unquotable) -> BackendError {
    BackendError::Rejected(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::database::parse_path;

    #[test]
    fn grants_are_quoted_and_exact() {
        let p = parse_path(Dialect::Postgres, "analytics.Public.orders", false).unwrap();
        let sql = grant_sql("tsr_g_abc", &p, Privilege::Select).unwrap();
        assert_eq!(
            sql,
            "GRANT CONNECT ON DATABASE \"analytics\" TO \"tsr_g_abc\"; \
             GRANT USAGE ON SCHEMA \"Public\" TO \"tsr_g_abc\"; \
             GRANT SELECT ON TABLE \"Public\".\"orders\" TO \"tsr_g_abc\";"
        );
    }
}
