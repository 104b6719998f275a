//! What the two database kinds (`postgres`, `mysql`) share: the resource grammar,
//! the action vocabulary, and how throw-away users and their passwords are named.
//!
//! Why a strict grammar and not "anything, quoted": every name that reaches SQL is
//! quoted by the dialect's one quoting function anyway, but a grammar this narrow
//! (`[A-Za-z_][A-Za-z0-9_]{0,62}`) means a hostile resource string — quotes,
//! semicolons, `--`, unicode look-alikes, 300-byte names — is refused with a 400
//! when the capability is requested, before policy, before the store, and long
//! before any SQL exists. Names are case-sensitive: they are always quoted.

pub mod settings;

use super::grammar::{is_allowed, Invalid};
use crate::clock::rfc3339;
use crate::ids::{hex, random_bytes, sha256_hex};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use secrecy::SecretString;
use serde_json::Value;
use std::collections::BTreeMap;

/// Longest identifier part accepted (PostgreSQL's limit; MariaDB's is 64).
pub const MAX_IDENT_LEN: usize = 63;
/// Prefix of every throw-away user; revocation touches nothing without it.
pub const USER_PREFIX: &str = "tsr_";
/// Prefix of every broker-managed group role.
pub const GROUP_PREFIX: &str = "tsr_g_";
/// Prefix of generated passwords, so a leaked one is greppable.
pub const PASSWORD_PREFIX: &str = "tsr_pw_";

/// `[A-Za-z_][A-Za-z0-9_]{0,62}`.
pub fn is_ident(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=MAX_IDENT_LEN).contains(&b.len())
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// A table, or every table of a schema/database (`*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Table {
    Named(String),
    All,
}

/// A validated database resource path. `schema` is `None` for MySQL, where a
/// database *is* the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbPath {
    pub database: String,
    pub schema: Option<String>,
    pub table: Table,
}

/// Which downstream database server a backend speaks to (not the broker's
/// own store, whose SQL dialect is `store::Dialect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbKind {
    Postgres,
    Mysql,
}

impl DbKind {
    pub fn kind(self) -> &'static str {
        match self {
            DbKind::Postgres => "postgres",
            DbKind::Mysql => "mysql",
        }
    }
}

/// Database paths may name every table of a schema (`*`); policy then decides
/// whether a permit grants it explicitly ([`INCLUSION_GRANTS`]).
const ALL_TABLES: bool = true;

/// `*` is a wildcard only as the whole table part (every table of the schema).
pub const WILDCARDS: &[char] = &['*'];

/// Where `*` is every table of a schema, only a permit that names the wildcard
/// explicitly (`== "analytics.public.*"`) grants it: a pattern written for "any
/// one table" never grants all of them at once (`resource::inclusion_grants`).
pub const INCLUSION_GRANTS: bool = false;

/// A request's path (in `dialect`, on the backend's one database), then its
/// action, then the backend's allow-list.
pub fn check_resource(
    dialect: DbKind,
    backend: &settings::DatabaseBackendConfig,
    path: &str,
    action: &str,
) -> Result<(), Invalid> {
    let parsed = parse_path(dialect, path, ALL_TABLES).ok_or(Invalid::Path)?;
    // An empty database: a simulation without a configuration
    // (`DatabaseBackendConfig::unconfigured`), where any database is accepted.
    if !backend.database.is_empty() && parsed.database != backend.database {
        return Err(Invalid::Database);
    }
    if !ACTIONS.contains(&action) || !is_allowed(backend.actions.as_deref(), action) {
        return Err(Invalid::Action);
    }
    Ok(())
}

/// Parses `database.schema.table` (PostgreSQL) or `database.table` (MySQL); the
/// table may be `*` only when `allow_all_tables` (see [`check_resource`]).
pub fn parse_path(dialect: DbKind, path: &str, allow_all_tables: bool) -> Option<DbPath> {
    let parts: Vec<&str> = path.split('.').collect();
    let (database, schema, table) = match (dialect, parts.as_slice()) {
        (DbKind::Postgres, [d, s, t]) => (*d, Some(*s), *t),
        (DbKind::Mysql, [d, t]) => (*d, None, *t),
        _ => return None,
    };
    if !is_ident(database) || !schema.is_none_or(is_ident) {
        return None;
    }
    // System catalogs are never a resource: a grant there (PostgreSQL's
    // pg_authid holds password hashes) is not a table of the application's.
    let system = match (dialect, schema) {
        (DbKind::Postgres, Some(s)) => is_system_schema(s),
        (DbKind::Mysql, _) => is_system_database(database),
        _ => false,
    };
    if system {
        return None;
    }
    let table = match table {
        "*" if allow_all_tables => Table::All,
        t if is_ident(t) => Table::Named(t.to_owned()),
        _ => return None,
    };
    // MariaDB and MySQL fold database and table names to lower case when
    // `lower_case_table_names` is set, so `shop.ORDERS` could reach the table a
    // policy names `shop.orders`: one spelling only, lower case.
    let folded = |s: &str| s.bytes().any(|c| c.is_ascii_uppercase());
    if dialect == DbKind::Mysql
        && (folded(database) || matches!(&table, Table::Named(t) if folded(t)))
    {
        return None;
    }
    Some(DbPath {
        database: database.to_owned(),
        schema: schema.map(str::to_owned),
        table,
    })
}

/// PostgreSQL's own schemas: `pg_catalog`, `information_schema`, and every
/// `pg_*` (pg_toast, pg_temp_N, …: the prefix is reserved for the system).
/// Compared without case: a quoted `PG_CATALOG` is no table of anyone's either.
pub fn is_system_schema(schema: &str) -> bool {
    let s = schema.to_ascii_lowercase();
    s == "information_schema" || s.starts_with("pg_")
}

/// MariaDB/MySQL's own databases (without case: `INFORMATION_SCHEMA` is one).
pub fn is_system_database(database: &str) -> bool {
    matches!(
        database.to_ascii_lowercase().as_str(),
        "mysql" | "information_schema" | "performance_schema" | "sys"
    )
}

/// The database actions and the SQL privilege each grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Privilege {
    Select,
    Insert,
    Update,
    Delete,
}

pub const ACTIONS: [&str; 4] = ["select", "insert", "update", "delete"];

impl Privilege {
    pub fn from_action(action: &str) -> Option<Privilege> {
        Some(match action {
            "select" => Privilege::Select,
            "insert" => Privilege::Insert,
            "update" => Privilege::Update,
            "delete" => Privilege::Delete,
            _ => return None,
        })
    }

    /// The SQL keyword (a constant: never built from input).
    pub fn sql(self) -> &'static str {
        match self {
            Privilege::Select => "SELECT",
            Privilege::Insert => "INSERT",
            Privilege::Update => "UPDATE",
            Privilege::Delete => "DELETE",
        }
    }
}

/// The deterministic name of the broker-managed group role that holds
/// `privilege` on `path`: `tsr_g_` + 24 hex of SHA-256 over the parts. Same
/// resource, same group, on every replica, with no coordination.
pub fn group_name(dialect: DbKind, path: &DbPath, privilege: Privilege) -> String {
    let table = match &path.table {
        Table::Named(t) => t.as_str(),
        Table::All => "*",
    };
    let key = format!(
        "{}\0{}\0{}\0{}\0{}",
        dialect.kind(),
        path.database,
        path.schema.as_deref().unwrap_or(""),
        table,
        privilege.sql()
    );
    format!("{GROUP_PREFIX}{}", &sha256_hex(key.as_bytes())[..24])
}

/// The PostgreSQL group that holds CONNECT on `database`: `tsr_d_<24 hex>`.
pub fn database_group_name(database: &str) -> String {
    let key = format!("postgres\0{database}");
    format!("tsr_d_{}", &sha256_hex(key.as_bytes())[..24])
}

/// The PostgreSQL group that holds USAGE on `database.schema`: `tsr_s_<24 hex>`.
pub fn schema_group_name(database: &str, schema: &str) -> String {
    let key = format!("postgres\0{database}\0{schema}");
    format!("tsr_s_{}", &sha256_hex(key.as_bytes())[..24])
}

/// `tsr_<run id, 32 hex>_<12 random hex>`: 49 bytes, inside PostgreSQL's 63 and
/// MariaDB's 80, never truncated. The whole run id (not a prefix: the first hex
/// digits of a UUIDv7 are its timestamp, shared by every run in the same minute)
/// so a user seen in `pg_stat_activity` or a server log names its run.
pub fn user_name(run_id: &str) -> String {
    let compact: String = run_id.chars().filter(|c| *c != '-').collect();
    let run = if compact.len() == 32 && compact.bytes().all(|c| c.is_ascii_hexdigit()) {
        compact.to_ascii_lowercase()
    } else {
        sha256_hex(run_id.as_bytes())[..32].to_owned()
    };
    let name = format!("{USER_PREFIX}{run}_{}", hex(&random_bytes::<6>()));
    debug_assert!(is_user_name(&name));
    name
}

/// True for names [`user_name`] produces; revocation refuses to touch others.
pub fn is_user_name(s: &str) -> bool {
    s.len() == 49
        && s.starts_with(USER_PREFIX)
        && !s.starts_with(GROUP_PREFIX)
        && s.as_bytes()[36] == b'_'
        && s[4..].bytes().enumerate().all(|(i, c)| {
            if i == 32 {
                c == b'_'
            } else {
                c.is_ascii_digit() || (b'a'..=b'f').contains(&c)
            }
        })
}

/// What a database exchange grants, read from the capability and checked again
/// here (the broker validated it before policy; a backend never trusts that):
/// the privilege, the table, and the user name reserved with the lease.
pub fn grant_parts<'a>(
    dialect: DbKind,
    grant: &super::Grant<'a>,
) -> Result<(Privilege, DbPath, &'a str), super::BackendError> {
    use super::BackendError::Rejected;
    let privilege = Privilege::from_action(&grant.claims.act)
        .ok_or_else(|| Rejected("not a database action".into()))?;
    let path = parse_path(dialect, grant.path, true)
        .ok_or_else(|| Rejected(format!("not a {} resource path", dialect.kind())))?;
    // A MariaDB ref also names the account's host (`user@host`).
    let user = grant
        .downstream_ref
        .map(|r| r.split_once('@').map_or(r, |(u, _)| u))
        .filter(|u| is_user_name(u))
        .ok_or_else(|| Rejected("no user name was reserved".into()))?;
    Ok((privilege, path, user))
}

/// A fresh password: `tsr_pw_` + 32 random bytes in base64url (URL-safe, so a
/// DSN needs no escaping).
pub fn new_password() -> SecretString {
    SecretString::from(format!(
        "{PASSWORD_PREFIX}{}",
        URL_SAFE_NO_PAD.encode(random_bytes::<32>())
    ))
}

/// `host` as it goes into a URL authority (IPv6 in brackets).
pub fn url_host(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

/// What a client is handed: host, port, database, username, password, a ready
/// DSN (`scheme://user:password@host:port/database`) and the expiry.
pub fn connection_fields(
    scheme: &str,
    host: &str,
    port: u16,
    database: &str,
    user: &str,
    password: &str,
    expires_at: i64,
) -> BTreeMap<String, Value> {
    // User names, passwords (base64url) and database names (identifier grammar)
    // need no percent-encoding in a URL.
    let dsn = format!(
        "{scheme}://{user}:{password}@{}:{port}/{database}",
        url_host(host)
    );
    BTreeMap::from([
        ("host".to_owned(), Value::from(host)),
        ("port".to_owned(), Value::from(port)),
        ("database".to_owned(), Value::from(database)),
        ("username".to_owned(), Value::from(user)),
        ("password".to_owned(), Value::from(password)),
        ("dsn".to_owned(), Value::from(dsn)),
        ("valid_until".to_owned(), Value::from(rfc3339(expires_at))),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use secrecy::ExposeSecret;

    #[test]
    fn paths_parse_per_dialect() {
        let p = parse_path(DbKind::Postgres, "analytics.public.orders", false).unwrap();
        assert_eq!(p.database, "analytics");
        assert_eq!(p.schema.as_deref(), Some("public"));
        assert_eq!(p.table, Table::Named("orders".into()));
        assert!(parse_path(DbKind::Postgres, "analytics.orders", false).is_none());
        let m = parse_path(DbKind::Mysql, "shop.orders_2", false).unwrap();
        assert_eq!((m.database.as_str(), m.schema), ("shop", None));
        // MariaDB may fold names to lower case: one spelling only.
        assert!(parse_path(DbKind::Mysql, "shop.Orders_2", false).is_none());
        assert!(parse_path(DbKind::Mysql, "Shop.orders", false).is_none());
        assert!(parse_path(DbKind::Postgres, "analytics.public.Orders", false).is_some());
        assert!(parse_path(DbKind::Mysql, "a.b.c", false).is_none());
        assert!(parse_path(DbKind::Postgres, "a.b.*", false).is_none());
        assert_eq!(
            parse_path(DbKind::Postgres, "a.b.*", true).unwrap().table,
            Table::All
        );
        assert!(parse_path(DbKind::Postgres, "a.*.t", true).is_none());
    }

    #[test]
    fn system_catalogs_are_not_resources() {
        for schema in [
            "pg_catalog",
            "PG_CATALOG",
            "information_schema",
            "pg_toast",
            "pg_temp_3",
            "pg_toast_temp_1",
        ] {
            assert!(
                parse_path(DbKind::Postgres, &format!("db.{schema}.t"), true).is_none(),
                "{schema}"
            );
            assert!(
                parse_path(DbKind::Postgres, &format!("db.{schema}.*"), true).is_none(),
                "{schema}"
            );
        }
        // A database may be called anything; only the schema is the system's.
        assert!(parse_path(DbKind::Postgres, "pg_db.public.t", false).is_some());
        assert!(parse_path(DbKind::Postgres, "db.pgx.t", false).is_some());
        for db in ["mysql", "information_schema", "performance_schema", "sys"] {
            assert!(
                parse_path(DbKind::Mysql, &format!("{db}.t"), true).is_none(),
                "{db}"
            );
            assert!(
                parse_path(DbKind::Mysql, &format!("{db}.*"), true).is_none(),
                "{db}"
            );
        }
        assert!(parse_path(DbKind::Mysql, "system_data.t", false).is_some());
    }

    #[test]
    fn hostile_paths_are_refused() {
        let long = "a".repeat(300);
        for bad in [
            "db.public.x'; DROP TABLE t;--",
            "db.public.\"t\"",
            "db.public.t;",
            "db.public.t--",
            "db.public.tablé",
            "db.public.t\u{0}",
            "db.public.t ",
            "db..t",
            "db.public.1t",
            "db.public.`t`",
            &format!("db.public.{long}"),
            &format!("db.public.{}", "a".repeat(64)),
        ] {
            assert!(parse_path(DbKind::Postgres, bad, true).is_none(), "{bad:?}");
        }
        assert!(parse_path(DbKind::Postgres, &format!("d.s.{}", "a".repeat(63)), false).is_some());
    }

    #[test]
    fn user_names_fit_and_are_recognised() {
        let run = crate::ids::new_id();
        let u = user_name(&run);
        assert_eq!(u.len(), 49);
        assert!(u.contains(&run.replace('-', "")));
        assert!(is_user_name(&u), "{u}");
        assert_ne!(u, user_name(&run));
        assert!(is_user_name(&user_name("not-a-uuid")));
        assert!(!is_user_name("postgres"));
        assert!(!is_user_name(&format!("{u}x")));
        assert!(!is_user_name(&u.to_uppercase()));
        assert!(!is_user_name(&group_name(
            DbKind::Postgres,
            &parse_path(DbKind::Postgres, "a.b.c", false).unwrap(),
            Privilege::Select
        )));
    }

    #[test]
    fn group_names_are_deterministic_and_distinct() {
        let p = parse_path(DbKind::Postgres, "a.b.c", false).unwrap();
        let g = group_name(DbKind::Postgres, &p, Privilege::Select);
        assert_eq!(g, group_name(DbKind::Postgres, &p, Privilege::Select));
        assert_ne!(g, group_name(DbKind::Postgres, &p, Privilege::Insert));
        assert_ne!(g, group_name(DbKind::Mysql, &p, Privilege::Select));
        let q = parse_path(DbKind::Postgres, "a.bc.", false);
        assert!(q.is_none());
        assert_eq!(g.len(), 30);
        assert!(is_ident(&g));
    }

    #[test]
    fn passwords_are_prefixed_and_url_safe() {
        let p = new_password();
        let s = p.expose_secret();
        assert!(s.starts_with(PASSWORD_PREFIX));
        assert_eq!(s.len(), PASSWORD_PREFIX.len() + 43);
        assert!(s
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-'));
        assert_eq!(url_host("::1"), "[::1]");
        assert_eq!(url_host("db.internal"), "db.internal");
    }

    proptest! {
        #[test]
        fn accepted_paths_hold_only_identifier_characters(s in ".{0,200}") {
            for d in [DbKind::Postgres, DbKind::Mysql] {
                if let Some(p) = parse_path(d, &s, true) {
                    prop_assert!(is_ident(&p.database));
                    prop_assert!(s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'*'));
                }
            }
        }
    }
}
