//! Server defaults that let a throw-away user do more than its one grant, found
//! by asking the server, each with the exact SQL an operator runs to fix it.
//!
//! Why a check and not a workaround: these are PostgreSQL defaults for every
//! role (`PUBLIC`), so only the server's owner can change them, and changing
//! them may affect other applications; the broker says what is open and how to
//! close it (`tessera backends check NAME`, and a warning at start).
//!
//! - `connect_public`: every role may CONNECT to a database unless revoked
//!   from PUBLIC, so a throw-away user logs in to every database, not only the
//!   granted one (and can create objects there that no `DROP OWNED BY` in the
//!   broker's database removes). Throw-away users get CONNECT through the
//!   broker's database group, so revoking it from PUBLIC leaves them working.
//! - `large_objects_public`: `lo_create`, `lo_creat` and `lo_from_bytea` are
//!   executable by PUBLIC, so a SELECT-only user can store data in large
//!   objects and own objects that outlive it.
//! - `public_schema_create`: CREATE on schema `public` for PUBLIC (the default
//!   before PostgreSQL 15): a user can create tables of its own.
//! - `prepared_transactions`: with `max_prepared_transactions > 0` a user can
//!   leave a prepared transaction holding locks after it is dropped.

use super::quote::ident;
use crate::backends::Finding;
use sqlx::{PgConnection, Row};

/// Every finding on the server `conn` is connected to (its current database
/// for database-local checks). Reads only.
pub async fn unsafe_defaults(conn: &mut PgConnection) -> Result<Vec<Finding>, sqlx::Error> {
    let mut out = vec![];
    let open: Vec<String> = sqlx::query_scalar(
        "SELECT datname::text FROM pg_database \
         WHERE datallowconn AND has_database_privilege('public', oid, 'CONNECT') ORDER BY datname",
    )
    .fetch_all(&mut *conn)
    .await?;
    if !open.is_empty() {
        let names: Vec<String> = open.iter().filter_map(|d| ident(d).ok()).collect();
        out.push(Finding {
            id: "connect_public",
            what: format!(
                "every role may connect to {}: a throw-away user can log in to each",
                open.join(", ")
            ),
            fix: format!(
                "REVOKE CONNECT ON DATABASE {} FROM PUBLIC;",
                names.join(", ")
            ),
        });
    }
    let functions = [
        "lo_create(oid)",
        "lo_creat(integer)",
        "lo_from_bytea(oid, bytea)",
    ];
    let mut executable = vec![];
    for f in functions {
        let row = sqlx::query("SELECT has_function_privilege('public', $1, 'EXECUTE') AS ok")
            .bind(f)
            .fetch_one(&mut *conn)
            .await?;
        if row.try_get::<bool, _>("ok")? {
            executable.push(f);
        }
    }
    if !executable.is_empty() {
        out.push(Finding {
            id: "large_objects_public",
            what: format!(
                "{} executable by every role: a throw-away user can store data and own objects that outlive it",
                executable.join(", ")
            ),
            fix: format!("REVOKE EXECUTE ON FUNCTION {} FROM PUBLIC;", executable.join(", ")),
        });
    }
    let create: bool = sqlx::query_scalar(
        "SELECT COALESCE(bool_or(has_schema_privilege('public', n.oid, 'CREATE')), false) \
         FROM pg_namespace n WHERE n.nspname = 'public'",
    )
    .fetch_one(&mut *conn)
    .await?;
    if create {
        out.push(Finding {
            id: "public_schema_create",
            what: "every role may create tables in schema public of this database".into(),
            fix: "REVOKE CREATE ON SCHEMA public FROM PUBLIC;".into(),
        });
    }
    let prepared: String =
        sqlx::query_scalar("SELECT current_setting('max_prepared_transactions')")
            .fetch_one(&mut *conn)
            .await?;
    if prepared.trim() != "0" {
        out.push(Finding {
            id: "prepared_transactions",
            what: format!(
                "max_prepared_transactions = {prepared}: a user's prepared transaction outlives the user and keeps its locks"
            ),
            fix: "ALTER SYSTEM SET max_prepared_transactions = 0; -- then restart PostgreSQL".into(),
        });
    }
    Ok(out)
}
