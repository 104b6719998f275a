//! Server defaults that let a throw-away user do more than its one grant, found
//! by asking the server, each with the exact SQL an operator runs to fix it.
//!
//! Why a check and not a workaround: these are PostgreSQL defaults for every
//! role (`PUBLIC`), so only the server's owner can change them, and changing
//! them may affect other applications; the broker says what is open and how to
//! close it (`tessera backends check NAME`, and a warning at start).
//!
//! - `connect_public`: every role may CONNECT to a database unless revoked
//!   from PUBLIC, so a throw-away user logs in to every such database, not
//!   only the granted one (and can create objects there). The broker's own
//!   database is not reported: throw-away users are meant to connect there.
//! - `large_objects_public`: `lo_create`, `lo_creat` or `lo_from_bytea` (or
//!   the server-side `lo_import`) executable by PUBLIC, so a SELECT-only user
//!   can store data in large objects.
//! - `lo_compat_privileges`: on, every role may read and write every large
//!   object.
//! - `schema_create_public`: CREATE on a schema for PUBLIC (on `public`, the
//!   default before PostgreSQL 15): a user can create tables of its own.
//! - `database_create_public`: CREATE on the broker's database for PUBLIC: a
//!   user can create schemas of its own.
//!
//! Each of these lets a throw-away user own something; removal drops what it
//! owns anyway (in every database, docs/backends/databases.md), but until then
//! it is storage no grant gave it. Prepared transactions are not reported:
//! removal rolls back a user's own before dropping it.

use super::quote::ident;
use crate::backends::Finding;
use sqlx::{PgConnection, Row};

/// Every finding on the server `conn` is connected to (its current database
/// for database-local checks). Reads only.
pub async fn unsafe_defaults(conn: &mut PgConnection) -> Result<Vec<Finding>, sqlx::Error> {
    let mut out = vec![];
    let open: Vec<String> = sqlx::query_scalar(
        "SELECT datname::text FROM pg_database \
         WHERE datallowconn AND datname <> current_database() \
         AND has_database_privilege('public', oid, 'CONNECT') ORDER BY datname",
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
            strict: true,
        });
    }
    let functions = [
        "lo_create(oid)",
        "lo_creat(integer)",
        "lo_from_bytea(oid, bytea)",
        "lo_import(text)",
        "lo_import(text, oid)",
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
                "{} executable by every role: a throw-away user can store data of its own",
                executable.join(", ")
            ),
            fix: format!(
                "REVOKE EXECUTE ON FUNCTION {} FROM PUBLIC;",
                executable.join(", ")
            ),
            strict: true,
        });
    }
    let compat: String = sqlx::query_scalar("SELECT current_setting('lo_compat_privileges')")
        .fetch_one(&mut *conn)
        .await?;
    if compat == "on" {
        out.push(Finding {
            id: "lo_compat_privileges",
            what: "lo_compat_privileges = on: every role may read and write every large object"
                .into(),
            fix: "ALTER SYSTEM SET lo_compat_privileges = off; SELECT pg_reload_conf();".into(),
            strict: true,
        });
    }
    let schemas: Vec<String> = sqlx::query_scalar(
        "SELECT nspname::text FROM pg_namespace \
         WHERE has_schema_privilege('public', oid, 'CREATE') \
         AND nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema' ORDER BY nspname",
    )
    .fetch_all(&mut *conn)
    .await?;
    if !schemas.is_empty() {
        let names: Vec<String> = schemas.iter().filter_map(|d| ident(d).ok()).collect();
        out.push(Finding {
            id: "schema_create_public",
            what: format!(
                "every role may create tables in schema {} of this database",
                schemas.join(", ")
            ),
            fix: format!("REVOKE CREATE ON SCHEMA {} FROM PUBLIC;", names.join(", ")),
            strict: true,
        });
    }
    let create_db: bool =
        sqlx::query_scalar("SELECT has_database_privilege('public', current_database(), 'CREATE')")
            .fetch_one(&mut *conn)
            .await?;
    if create_db {
        let db: String = sqlx::query_scalar("SELECT current_database()::text")
            .fetch_one(&mut *conn)
            .await?;
        out.push(Finding {
            id: "database_create_public",
            what: "every role may create schemas in this database".into(),
            fix: format!(
                "REVOKE CREATE ON DATABASE {} FROM PUBLIC;",
                ident(&db).unwrap_or_default()
            ),
            strict: true,
        });
    }
    Ok(out)
}
