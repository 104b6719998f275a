//! `[backends.NAME]`: which kind a table is, and that kind's validated settings.
//!
//! Why here and not in `config`: each kind owns its keys and their checks
//! (`token::settings`, `aws::settings`, `database::settings`), and the resource
//! grammar needs a backend's settings (its action allow-list, its one database)
//! without the rest of the configuration. `config` reads the file, checks the
//! table names and asks [`BackendConfig::resolve`] for each table; nothing here
//! imports `config`.

use super::aws::settings::{self as aws, AwsStsConfig};
use super::database::settings::{self as database, DatabaseBackendConfig};
use super::database::DbKind;
use super::http::settings::{self as http, HttpConfig};
use super::net::settings::{self as net, NetConfig};
use super::oauth::settings::{self as oauth, OAuthResourceConfig};
use super::token::settings as token;
use crate::settings::{err, ConfigError, EnvLookup, RawTable};

/// A configured downstream backend.
#[derive(Debug, Clone)]
pub enum BackendConfig {
    /// Mints audience-restricted JWTs for an internal service (RFC 8693 style).
    Token(token::TokenConfig),
    /// Temporary AWS credentials from STS AssumeRole (`backends::aws`).
    AwsSts(AwsStsConfig),
    /// Throw-away PostgreSQL roles (`backends::postgres`).
    Postgres(DatabaseBackendConfig),
    /// Throw-away MariaDB/MySQL users (`backends::mysql`).
    Mysql(DatabaseBackendConfig),
    /// Network destinations the egress gateway decides per connection (`backends::net`).
    Net(NetConfig),
    /// A downstream HTTP API the gateway calls with an injected credential (`backends::http`).
    Http(HttpConfig),
    /// An OAuth resource server runs get access tokens for (`backends::oauth`).
    OAuthResource(OAuthResourceConfig),
}

impl BackendConfig {
    pub fn kind(&self) -> &'static str {
        match self {
            BackendConfig::Token(_) => "token",
            BackendConfig::AwsSts(_) => "aws-sts",
            BackendConfig::Postgres(_) => "postgres",
            BackendConfig::Mysql(_) => "mysql",
            BackendConfig::Net(_) => "net",
            BackendConfig::Http(_) => "http",
            BackendConfig::OAuthResource(_) => "oauth-resource",
        }
    }

    /// A backend of `kind` as the policy tools model it without a configuration
    /// or a connection (each kind's `unconfigured`); `None`: this build has no
    /// such kind.
    pub fn unconfigured(kind: &str) -> Option<BackendConfig> {
        match kind {
            "postgres" => Some(BackendConfig::Postgres(
                DatabaseBackendConfig::unconfigured(),
            )),
            "mysql" => Some(BackendConfig::Mysql(DatabaseBackendConfig::unconfigured())),
            "token" => Some(BackendConfig::Token(token::TokenConfig::unconfigured())),
            "aws-sts" => Some(BackendConfig::AwsSts(AwsStsConfig::unconfigured())),
            "net" => Some(BackendConfig::Net(NetConfig::default())),
            "http" => Some(BackendConfig::Http(HttpConfig::unconfigured())),
            "oauth-resource" => Some(BackendConfig::OAuthResource(
                OAuthResourceConfig::unconfigured(),
            )),
            _ => None,
        }
    }

    /// Resolves one table (`setting` is its name, `backends.NAME`) by its `kind`:
    /// the kind checks its own keys. What only a serving broker needs from the
    /// environment is left to [`BackendConfig::resolve_credentials`].
    pub fn resolve(
        setting: &str,
        table: RawTable,
        env: EnvLookup<'_>,
    ) -> Result<BackendConfig, ConfigError> {
        let kind = table
            .get("kind")
            .and_then(toml::Value::as_str)
            .ok_or_else(|| err(&format!("{setting}.kind"), "required"))?
            .to_owned();
        match kind.as_str() {
            "token" => Ok(BackendConfig::Token(token::resolve(setting, table)?)),
            "aws-sts" => Ok(BackendConfig::AwsSts(aws::resolve(setting, table)?)),
            "net" => Ok(BackendConfig::Net(net::resolve(setting, table)?)),
            "http" => Ok(BackendConfig::Http(http::resolve(setting, table)?)),
            "oauth-resource" => Ok(BackendConfig::OAuthResource(oauth::resolve(
                setting, table,
            )?)),
            "postgres" => Ok(BackendConfig::Postgres(database::resolve(
                setting,
                table,
                DbKind::Postgres,
                env,
            )?)),
            "mysql" => Ok(BackendConfig::Mysql(database::resolve(
                setting,
                table,
                DbKind::Mysql,
                env,
            )?)),
            other => Err(err(
                &format!("{setting}.kind"),
                format!("unknown kind {other:?} (supported: token, postgres, mysql, aws-sts, net, http, oauth-resource)"),
            )),
        }
    }

    /// Picks the broker's own downstream credentials from the environment where
    /// the kind reads them at start (`aws-sts`: module docs of `aws::settings`).
    /// `serve` calls it; the policy tools, which connect to nothing, do not.
    pub fn resolve_credentials(
        &mut self,
        setting: &str,
        env: EnvLookup<'_>,
    ) -> Result<(), ConfigError> {
        match self {
            BackendConfig::AwsSts(aws) => {
                aws.credentials = aws::resolve_credentials(setting, &aws.credentials, env)?;
            }
            BackendConfig::Http(h) => http::resolve_credentials(setting, h, env)?,
            BackendConfig::OAuthResource(r) => oauth::resolve_credentials(setting, r, env)?,
            _ => {}
        }
        Ok(())
    }

    /// Connections the broker keeps open to this backend's server (its pool);
    /// 0 for kinds that keep none.
    pub fn pool_size(&self) -> u32 {
        match self {
            BackendConfig::Postgres(db) | BackendConfig::Mysql(db) => db.max_connections,
            BackendConfig::Token(_)
            | BackendConfig::AwsSts(_)
            | BackendConfig::Net(_)
            | BackendConfig::Http(_)
            | BackendConfig::OAuthResource(_) => 0,
        }
    }
}
