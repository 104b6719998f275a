//! `[backends.NAME]` of kind `postgres` or `mysql`: parsed and checked at start.
//!
//! Why the two kinds share one table: they differ only in the URL's scheme and in
//! one key each (`scram_iterations` for `postgres`, `account_host` for `mysql`),
//! and an operator moving a backend from one server to the other should find the
//! same keys meaning the same thing. The broker's connection URL is a secret: it
//! comes from `url_env` or `url_file`, never from the file, and no error quotes it.

use super::DbKind;
use crate::settings::{err, parse_table, ConfigError, EnvLookup, RawTable};
use serde::Deserialize;
use std::path::PathBuf;

/// A database backend: the broker's privileged connection and what clients are told.
#[derive(Clone)]
pub struct DatabaseBackendConfig {
    /// The broker's own (privileged) connection URL. A secret: never logged.
    pub url: secrecy::SecretString,
    /// The one database this backend grants on (the URL's).
    pub database: String,
    /// Host and port handed to clients (default: the URL's).
    pub public_host: String,
    pub public_port: u16,
    /// `CONNECTION LIMIT` / `MAX_USER_CONNECTIONS` of each issued user.
    pub connection_limit: u32,
    /// Size of the broker's pool to this server.
    pub max_connections: u32,
    /// PBKDF2 iterations of the SCRAM-SHA-256 verifiers sent to PostgreSQL.
    pub scram_iterations: u32,
    /// Allowed actions (default: all of `select`, `insert`, `update`, `delete`).
    pub actions: Option<Vec<String>>,
    /// Refuse to issue while the server has unsafe defaults (default: on).
    pub strict: bool,
    /// `mysql` only: the host part of every throw-away account
    /// (`'tsr_…'@'<account_host>'`); `None` for `postgres`.
    pub account_host: Option<String>,
}

impl DatabaseBackendConfig {
    /// A backend as policy simulation sees one without a configuration: no URL
    /// (nothing is connected to), any action of the kind's grammar, and any
    /// database (an empty `database`, which [`super::check_resource`] reads so).
    pub fn unconfigured() -> DatabaseBackendConfig {
        DatabaseBackendConfig {
            url: secrecy::SecretString::from(String::new()),
            database: String::new(),
            public_host: String::new(),
            public_port: 0,
            connection_limit: 0,
            max_connections: 0,
            scram_iterations: 0,
            actions: None,
            strict: true,
            account_host: None,
        }
    }
}

impl std::fmt::Debug for DatabaseBackendConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseBackendConfig")
            .field("url", &"[redacted]")
            .field("database", &self.database)
            .field("public_host", &self.public_host)
            .field("public_port", &self.public_port)
            .field("connection_limit", &self.connection_limit)
            .field("max_connections", &self.max_connections)
            .field("scram_iterations", &self.scram_iterations)
            .field("actions", &self.actions)
            .field("strict", &self.strict)
            .field("account_host", &self.account_host)
            .finish()
    }
}

/// `[backends.NAME]` of kind `postgres` or `mysql`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDatabaseBackend {
    #[allow(dead_code)]
    kind: String,
    actions: Option<Vec<String>>,
    url_env: Option<String>,
    url_file: Option<PathBuf>,
    public_host: Option<String>,
    public_port: Option<u16>,
    connection_limit: Option<u32>,
    max_connections: Option<u32>,
    scram_iterations: Option<u32>,
    strict: Option<bool>,
    account_host: Option<String>,
}

/// A database backend's settings. The URL comes from `url_env` or `url_file`,
/// never from the file itself; errors name the setting, never the URL.
pub fn resolve(
    setting: &str,
    table: RawTable,
    dialect: DbKind,
    env: EnvLookup<'_>,
) -> Result<DatabaseBackendConfig, ConfigError> {
    let b: RawDatabaseBackend = parse_table(setting, table)?;
    let url = match (&b.url_env, &b.url_file) {
        (Some(var), None) => env(var).ok_or_else(|| {
            err(
                &format!("{setting}.url_env"),
                format!("environment variable {var} is not set"),
            )
        })?,
        (None, Some(path)) => std::fs::read_to_string(path)
            .map_err(|e| {
                err(
                    &format!("{setting}.url_file"),
                    format!("cannot read {}: {e}", path.display()),
                )
            })?
            .trim()
            .to_owned(),
        _ => return Err(err(
            setting,
            "exactly one of url_env or url_file is required (the URL is a secret: never inline)",
        )),
    };
    let url_setting = if b.url_env.is_some() {
        format!("{setting}.url_env")
    } else {
        format!("{setting}.url_file")
    };
    let (host, port, database) = match dialect {
        DbKind::Postgres => {
            let o = url
                .starts_with("postgres://")
                .then(|| url.parse::<sqlx::postgres::PgConnectOptions>().ok())
                .flatten()
                .ok_or_else(|| err(&url_setting, "not a valid postgres:// URL"))?;
            let db = o.get_database().map(str::to_owned);
            (o.get_host().to_owned(), o.get_port(), db)
        }
        DbKind::Mysql => {
            let o = (url.starts_with("mysql://") || url.starts_with("mariadb://"))
                .then(|| url.replacen("mariadb://", "mysql://", 1))
                .and_then(|u| u.parse::<sqlx::mysql::MySqlConnectOptions>().ok())
                .ok_or_else(|| err(&url_setting, "not a valid mysql:// URL"))?;
            let db = o.get_database().map(str::to_owned);
            (o.get_host().to_owned(), o.get_port(), db)
        }
    };
    let database = database.filter(|d| super::is_ident(d)).ok_or_else(|| {
        err(
            &url_setting,
            "the URL must name the database to grant on ([A-Za-z_][A-Za-z0-9_]*)",
        )
    })?;
    let public_host = b.public_host.unwrap_or(host);
    if public_host.is_empty()
        || public_host.len() > 253
        || public_host
            .bytes()
            .any(|c| !(c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b':' | b'_')))
    {
        return Err(err(
            &format!("{setting}.public_host"),
            "must be a host name or IP address",
        ));
    }
    let public_port = b.public_port.unwrap_or(port);
    let connection_limit = b.connection_limit.unwrap_or(2);
    if !(1..=1000).contains(&connection_limit) {
        return Err(err(
            &format!("{setting}.connection_limit"),
            "must be between 1 and 1000",
        ));
    }
    let max_connections = b.max_connections.unwrap_or(4);
    if !(1..=64).contains(&max_connections) {
        return Err(err(
            &format!("{setting}.max_connections"),
            "must be between 1 and 64",
        ));
    }
    let scram_iterations = match (dialect, b.scram_iterations) {
        (_, None) => crate::backends::postgres::scram::ITERATIONS,
        (DbKind::Mysql, Some(_)) => {
            return Err(err(
                &format!("{setting}.scram_iterations"),
                "only for kind \"postgres\"",
            ))
        }
        (DbKind::Postgres, Some(n)) if (1..=1_000_000).contains(&n) => n,
        (DbKind::Postgres, Some(_)) => {
            return Err(err(
                &format!("{setting}.scram_iterations"),
                "must be between 1 and 1000000",
            ))
        }
    };
    if let Some(actions) = &b.actions {
        for a in actions {
            if !super::ACTIONS.contains(&a.as_str()) {
                return Err(err(
                    &format!("{setting}.actions"),
                    format!("invalid action {a:?} (select, insert, update, delete)"),
                ));
            }
        }
    }
    let account_host = match (dialect, b.account_host) {
        (DbKind::Postgres, None) => None,
        (DbKind::Postgres, Some(_)) => {
            return Err(err(
                &format!("{setting}.account_host"),
                "only for kind \"mysql\"",
            ))
        }
        (DbKind::Mysql, None) => {
            return Err(err(
                &format!("{setting}.account_host"),
                "required for kind \"mysql\": the host pattern throw-away accounts may connect from, \
                 e.g. \"10.0.%\" for the agents' network or \"%\" for any host (docs/backends/databases.md)",
            ))
        }
        (DbKind::Mysql, Some(h)) => {
            if !crate::backends::mysql::quote::is_host_pattern(&h) {
                return Err(err(
                    &format!("{setting}.account_host"),
                    "must be a host name, IP address or pattern of [A-Za-z0-9.:_%-], at most 255 bytes",
                ));
            }
            Some(h)
        }
    };
    Ok(DatabaseBackendConfig {
        url: secrecy::SecretString::from(url),
        database,
        public_host,
        public_port,
        connection_limit,
        max_connections,
        scram_iterations,
        actions: b.actions,
        strict: b.strict.unwrap_or(true),
        account_host,
    })
}
