//! Backend kind `mysql` (MariaDB and MySQL): each exchange creates a throw-away
//! account with exactly one privilege on exactly one table, removed for real on
//! revocation.
//!
//! - [`check`]: server settings that would let an account do more than its grant;
//! - [`quote`]: the one identifier, literal and account quoting functions;
//! - [`native_password`]: the password hash sent instead of the password;
//! - [`users`]: creating (with their one grant) and removing the throw-away
//!   accounts; why grants are direct here, not through roles as on PostgreSQL.
//!
//! MariaDB has no account expiry. The user is valid until its lease is
//! revoked: by run end, capability revoke, or the expiry reaper, which is what
//! makes the capability's expiry true downstream.

pub mod check;
pub mod native_password;
pub mod quote;
pub mod users;

use super::database::{self, settings::DatabaseBackendConfig, DbKind, Privilege};
use super::{Backend, BackendError, Grant, Issued};
use crate::boxed::BoxFuture;
use crate::capability::CapabilityClaims;
use secrecy::ExposeSecret;
use sqlx::mysql::{MySqlConnectOptions, MySqlDatabaseError, MySqlPool, MySqlPoolOptions};
use sqlx::ConnectOptions;
use std::time::Duration;

const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

/// Server error numbers that mean the grant is impossible: unknown database
/// (1049), unknown table (1146).
const NO_SUCH_OBJECT: [u16; 2] = [1049, 1146];

pub struct MysqlBackend {
    pool: MySqlPool,
    database: String,
    public_host: String,
    public_port: u16,
    connection_limit: u32,
    account_host: String,
    strict: super::strict::StrictGate,
}

pub fn has_number(e: &sqlx::Error, numbers: &[u16]) -> bool {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<MySqlDatabaseError>())
        .is_some_and(|m| numbers.contains(&m.number()))
}

/// Maps a driver error to a backend error (messages never hold the URL).
pub fn classify(e: sqlx::Error) -> BackendError {
    if has_number(&e, &NO_SUCH_OBJECT) {
        return BackendError::Rejected(e.to_string());
    }
    BackendError::Unavailable(e.to_string())
}

impl MysqlBackend {
    /// Builds the backend without connecting (see `PostgresBackend::new`).
    pub fn new(config: &DatabaseBackendConfig) -> Result<MysqlBackend, BackendError> {
        let url = config
            .url
            .expose_secret()
            .replacen("mariadb://", "mysql://", 1);
        let options: MySqlConnectOptions = url
            .parse()
            .map_err(|_| BackendError::Unavailable("invalid mysql URL".into()))?;
        let pool = MySqlPoolOptions::new()
            .max_connections(config.max_connections)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy_with(
                // The password hash is in CREATE USER: keep statements out of logs.
                options
                    .statement_cache_capacity(16)
                    .disable_statement_logging(),
            );
        Ok(MysqlBackend {
            pool,
            database: config.database.clone(),
            public_host: config.public_host.clone(),
            public_port: config.public_port,
            connection_limit: config.connection_limit,
            account_host: config
                .account_host
                .clone()
                .ok_or_else(|| BackendError::Unavailable("account_host is not set".into()))?,
            strict: super::strict::StrictGate::new(config.strict),
        })
    }

    /// Creates `user` with `privilege` on `path`; returns its password.
    pub async fn create_user(
        &self,
        path: &database::DbPath,
        privilege: Privilege,
        user: &str,
    ) -> Result<secrecy::SecretString, BackendError> {
        if path.database != self.database {
            return Err(BackendError::Rejected(
                "resource database is not this backend's".into(),
            ));
        }
        let password = database::new_password();
        let hash = native_password::hash(password.expose_secret());
        let statements = users::create_sql(
            user,
            &self.account_host,
            &hash,
            self.connection_limit,
            path,
            privilege,
        )
        .map_err(|e| BackendError::Rejected(e.to_string()))?;
        users::create(&self.pool, &statements).await?;
        Ok(password)
    }

    pub async fn drop_users(&self, users: &[String]) -> Result<(), BackendError> {
        users::drop_all(&self.pool, users).await
    }
}

impl Backend for MysqlBackend {
    fn kind(&self) -> &'static str {
        "mysql"
    }

    fn downstream_ref(&self, claims: &CapabilityClaims, _lease_id: &str) -> Option<String> {
        Some(users::account_ref(
            &database::user_name(&claims.run),
            &self.account_host,
        ))
    }

    fn ping(&self) -> BoxFuture<'_, Option<Result<(), BackendError>>> {
        Box::pin(async move {
            let query = sqlx::query("SELECT 1").execute(&self.pool);
            Some(
                match tokio::time::timeout(std::time::Duration::from_secs(2), query).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(classify(e)),
                    Err(_) => Err(BackendError::Unavailable("timed out".into())),
                },
            )
        })
    }

    fn unsafe_defaults(&self) -> BoxFuture<'_, Result<Vec<super::Finding>, BackendError>> {
        Box::pin(async move { check::unsafe_defaults(&self.pool).await.map_err(classify) })
    }

    fn issue<'a>(&'a self, grant: Grant<'a>) -> BoxFuture<'a, Result<Issued, BackendError>> {
        Box::pin(async move {
            let (privilege, path, user) = database::grant_parts(DbKind::Mysql, &grant)?;
            self.strict.admit(|| self.unsafe_defaults()).await?;
            let password = self.create_user(&path, privilege, user).await?;
            let expires_at = grant.claims.exp;
            Ok(Issued {
                fields: database::connection_fields(
                    "mysql",
                    &self.public_host,
                    self.public_port,
                    &self.database,
                    user,
                    password.expose_secret(),
                    expires_at,
                ),
                expires_at,
            })
        })
    }

    fn revoke<'a>(&'a self, refs: &'a [String]) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(self.drop_users(refs))
    }
}
