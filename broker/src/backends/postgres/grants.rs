//! The one place privileges are granted: broker-managed group roles on
//! PostgreSQL 16+, the user's own grants before ([`direct_sql`]).
//!
//! Why groups: granting every throw-away user directly on a table appends one
//! entry per user to the table's ACL, and PostgreSQL refuses every GRANT on the
//! table once the ACL no longer fits in a row ("row is too big", after about
//! 2,400 live users here). The same holds for a schema's USAGE and a database's
//! CONNECT. So privileges are held by NOLOGIN roles, three levels deep, and a
//! user is only made a member of the lowest (`GRANT … WITH INHERIT TRUE, SET
//! FALSE`: it uses the group's privileges but cannot act as the group), which
//! touches `pg_auth_members`, never an ACL:
//!
//! - `tsr_d_<hash>` per database: CONNECT on it;
//! - `tsr_s_<hash>` per schema: USAGE on it, and member of the database group;
//! - `tsr_g_<hash>` per (table, privilege): the privilege, and member of the
//!   schema group.
//!
//! Each ACL gains one entry per group, however many users are live. Groups are
//! created on first use and never dropped (they hold nothing but grants).
//! Creation tolerates a concurrent creator — another request or another
//! replica — and every GRANT is idempotent, so "ensure" is safe to repeat.

use super::quote::{ident, Unquotable};
use crate::backends::database::{
    database_group_name, group_name, schema_group_name, DbKind, DbPath, Privilege, Table,
};
use crate::backends::BackendError;
use sqlx::PgPool;
use std::collections::HashSet;
use tokio::sync::Mutex;

/// SQLSTATEs that mean "someone else created it first".
const DUPLICATE_OBJECT: &str = "42710";
const UNIQUE_VIOLATION: &str = "23505";
/// "tuple concurrently updated": two GRANTs on one object at once (replicas).
const INTERNAL_ERROR: &str = "XX000";

/// Groups known to exist (with their grants), so the common case costs no statement.
#[derive(Default)]
pub struct Groups {
    known: Mutex<HashSet<String>>,
}

impl Groups {
    /// Returns the name of the group holding `privilege` on `path`, creating it,
    /// its schema's and its database's groups, and their grants, if this
    /// process has not seen them yet.
    pub async fn ensure(
        &self,
        pool: &PgPool,
        path: &DbPath,
        privilege: Privilege,
    ) -> Result<String, BackendError> {
        let schema = path.schema.as_deref().unwrap_or("public");
        let db_group = database_group_name(&path.database);
        let schema_group = schema_group_name(&path.database, schema);
        let name = group_name(DbKind::Postgres, path, privilege);
        // Held across creation: first uses are rare, and serialising them keeps
        // two requests of this process from racing on one ACL.
        let mut known = self.known.lock().await;
        if !known.contains(&db_group) {
            create_role(pool, &db_group).await?;
            grant(
                pool,
                &format!(
                    "GRANT CONNECT ON DATABASE {} TO {}",
                    q(&path.database)?,
                    q(&db_group)?
                ),
            )
            .await?;
            known.insert(db_group.clone());
        }
        if !known.contains(&schema_group) {
            create_role(pool, &schema_group).await?;
            grant(
                pool,
                &format!(
                    "GRANT USAGE ON SCHEMA {s} TO {sg}; GRANT {dg} TO {sg};",
                    s = q(schema)?,
                    sg = q(&schema_group)?,
                    dg = q(&db_group)?
                ),
            )
            .await?;
            known.insert(schema_group.clone());
        }
        let created = known.contains(&name);
        // `ALL TABLES IN SCHEMA` covers the tables that exist when it runs: a
        // schema-wide group is granted again on every use, so tables created since
        // are included. A one-table group needs it once.
        if created && matches!(path.table, Table::Named(_)) {
            return Ok(name);
        }
        if !created {
            create_role(pool, &name).await?;
        }
        let sql = table_grant_sql(&name, &schema_group, path, privilege).map_err(quote_error)?;
        grant(pool, &sql).await?;
        if privilege == Privilege::Insert {
            grant_sequences(pool, &name, path).await?;
        }
        known.insert(name.clone());
        Ok(name)
    }
}

/// An insert must be able to use its columns' defaults: USAGE on the
/// sequences the table's own `serial`/identity columns own (for `*`, on every
/// sequence of the schema), and on nothing else.
async fn grant_sequences(pool: &PgPool, group: &str, path: &DbPath) -> Result<(), BackendError> {
    match sequences_target(pool, path).await? {
        Some(target) => grant(pool, &format!("GRANT USAGE ON {target} TO {}", q(group)?)).await,
        None => Ok(()),
    }
}

/// The GRANT target of [`grant_sequences`]: `None` when the table owns none.
async fn sequences_target(pool: &PgPool, path: &DbPath) -> Result<Option<String>, BackendError> {
    let schema = path.schema.as_deref().unwrap_or("public");
    match &path.table {
        Table::All => Ok(Some(format!("ALL SEQUENCES IN SCHEMA {}", q(schema)?))),
        Table::Named(table) => {
            // Sequences a column of this table owns (serial: auto, identity: internal).
            let owned: Vec<(String, String)> = sqlx::query_as(
                "SELECT sn.nspname::text, s.relname::text FROM pg_depend d \
                 JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S' \
                 JOIN pg_namespace sn ON sn.oid = s.relnamespace \
                 JOIN pg_class t ON t.oid = d.refobjid \
                 JOIN pg_namespace tn ON tn.oid = t.relnamespace \
                 WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass \
                 AND d.deptype IN ('a', 'i') AND tn.nspname = $1 AND t.relname = $2",
            )
            .bind(schema)
            .bind(table)
            .fetch_all(pool)
            .await
            .map_err(super::classify)?;
            if owned.is_empty() {
                return Ok(None);
            }
            let names = owned
                .iter()
                .map(|(n, s)| Ok(format!("{}.{}", q(n)?, q(s)?)))
                .collect::<Result<Vec<_>, BackendError>>()?;
            Ok(Some(format!("SEQUENCE {}", names.join(", "))))
        }
    }
}

/// PostgreSQL 15 and older: the GRANTs that give `user` itself the privilege
/// on `path` — CONNECT on the database and USAGE on the schema unless PUBLIC
/// has them, the table privilege, and (insert) the table's sequences — to run
/// in the transaction that creates the user.
///
/// Why not a group, as on 16+: before 16 every member of a role may `SET ROLE`
/// to it, and a user acting as a group shared with other runs can leave state
/// that outlives it and that the next run's users read (`ALTER ROLE
/// CURRENT_USER SET …`, default privileges, and whatever the server lets every
/// role create). A user holding its grants itself has nothing to act as. The
/// cost is one ACL entry per live user on the table (and on the schema and
/// database where PUBLIC lacks USAGE/CONNECT): about 2,400 live users per
/// object before PostgreSQL refuses further GRANTs (docs/backends/databases.md).
pub async fn direct_sql(
    pool: &PgPool,
    user: &str,
    path: &DbPath,
    privilege: Privilege,
) -> Result<String, BackendError> {
    let schema = path.schema.as_deref().unwrap_or("public");
    let (public_connect, public_usage): (bool, bool) = sqlx::query_as(
        "SELECT has_database_privilege('public', current_database(), 'CONNECT'), \
         COALESCE((SELECT has_schema_privilege('public', oid, 'USAGE') \
                   FROM pg_namespace WHERE nspname = $1), false)",
    )
    .bind(schema)
    .fetch_one(pool)
    .await
    .map_err(super::classify)?;
    let u = q(user)?;
    let mut sql = String::new();
    if !public_connect {
        sql += &format!("GRANT CONNECT ON DATABASE {} TO {u};", q(&path.database)?);
    }
    if !public_usage {
        sql += &format!("GRANT USAGE ON SCHEMA {} TO {u};", q(schema)?);
    }
    sql += &format!(
        "GRANT {} ON {} TO {u};",
        privilege.sql(),
        table_target(path).map_err(quote_error)?
    );
    if privilege == Privilege::Insert {
        if let Some(target) = sequences_target(pool, path).await? {
            sql += &format!("GRANT USAGE ON {target} TO {u};");
        }
    }
    Ok(sql)
}

/// `ident` as a backend error (the one quoting helper of this backend).
pub(super) fn q(name: &str) -> Result<String, BackendError> {
    ident(name).map_err(quote_error)
}

/// `CREATE ROLE … NOLOGIN`, tolerating a concurrent creator.
async fn create_role(pool: &PgPool, name: &str) -> Result<(), BackendError> {
    let create = format!("CREATE ROLE {} NOLOGIN", q(name)?);
    match sqlx::raw_sql(&create).execute(pool).await {
        Ok(_) => Ok(()),
        Err(e) if has_code(&e, &[DUPLICATE_OBJECT, UNIQUE_VIOLATION]) => Ok(()),
        Err(e) => Err(super::classify(e)),
    }
}

/// Runs statements that rewrite shared catalog rows (GRANTs, a creation with
/// direct grants, a removal's REVOKEs), retrying when another session updates
/// the same row at the same moment ("tuple concurrently updated"; the whole
/// transaction was rolled back, so running it again is safe).
pub(super) async fn grant(pool: &PgPool, sql: &str) -> Result<(), BackendError> {
    let mut attempt = 0;
    loop {
        match sqlx::raw_sql(sql).execute(pool).await {
            Ok(_) => return Ok(()),
            Err(e) if attempt < 5 && is_concurrent_update(&e) => {
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_millis(20 * attempt)).await;
            }
            Err(e) => return Err(super::classify(e)),
        }
    }
}

/// The table privilege, and membership in the schema's group.
fn table_grant_sql(
    group: &str,
    schema_group: &str,
    path: &DbPath,
    privilege: Privilege,
) -> Result<String, Unquotable> {
    let group = ident(group)?;
    let target = table_target(path)?;
    Ok(format!(
        "GRANT {privilege} ON {target} TO {group}; GRANT {} TO {group};",
        ident(schema_group)?,
        privilege = privilege.sql(),
    ))
}

/// `TABLE s.t` or `ALL TABLES IN SCHEMA s`.
fn table_target(path: &DbPath) -> Result<String, Unquotable> {
    let schema = ident(path.schema.as_deref().unwrap_or("public"))?;
    Ok(match &path.table {
        Table::Named(t) => format!("TABLE {schema}.{}", ident(t)?),
        Table::All => format!("ALL TABLES IN SCHEMA {schema}"),
    })
}

/// Whether `e` is "tuple concurrently updated": two sessions changed one
/// catalog row (an ACL) at once; the statement can be run again.
pub fn is_concurrent_update(e: &sqlx::Error) -> bool {
    has_code(e, &[INTERNAL_ERROR]) && e.to_string().contains("concurrently")
}

pub fn has_code(e: &sqlx::Error, codes: &[&str]) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().is_some_and(|c| codes.contains(&c.as_ref())))
}

pub(super) fn quote_error(e: Unquotable) -> BackendError {
    BackendError::Rejected(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::database::parse_path;

    #[test]
    fn grants_are_quoted_and_exact() {
        let p = parse_path(DbKind::Postgres, "analytics.Public.orders", false).unwrap();
        let sql = table_grant_sql("tsr_g_abc", "tsr_s_def", &p, Privilege::Select).unwrap();
        assert_eq!(
            sql,
            "GRANT SELECT ON TABLE \"Public\".\"orders\" TO \"tsr_g_abc\"; \
             GRANT \"tsr_s_def\" TO \"tsr_g_abc\";"
        );
        let all = parse_path(DbKind::Postgres, "analytics.s.*", true).unwrap();
        let sql = table_grant_sql("g", "s", &all, Privilege::Delete).unwrap();
        assert!(sql.starts_with("GRANT DELETE ON ALL TABLES IN SCHEMA \"s\" TO \"g\";"));
    }
}
