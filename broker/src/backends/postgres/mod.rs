//! Backend kind `postgres`: each exchange creates a throw-away login role with
//! exactly one privilege on exactly one table, removed for real on revocation.
//!
//! - [`quote`]: the one identifier and the one literal quoting function;
//! - [`scram`]: the SCRAM-SHA-256 verifier the broker sends instead of a password;
//! - [`grants`]: broker-managed group roles that hold the table privileges;
//! - [`users`]: creating and removing the throw-away roles;
//! - [`check`]: server defaults that would let a user do more than its grant.
//!
//! The user name is chosen before anything exists downstream
//! ([`Backend::downstream_ref`]) and stored with the lease, so whatever happens
//! next — failure, crash, expiry, run end — the revocation outbox knows what to
//! remove. `VALID UNTIL` is set to the capability's expiry, but it only refuses
//! new logins: ending sessions and dropping the role is the revocation worker's
//! job, driven by run end, capability revoke, and the expiry reaper.

pub mod check;
pub mod grants;
pub mod quote;
pub mod scram;
pub mod users;

use super::database::{self, settings::DatabaseBackendConfig, DbKind, Privilege};
use super::{Backend, BackendError, Grant, Issued};
use crate::boxed::BoxFuture;
use crate::capability::CapabilityClaims;
use secrecy::ExposeSecret;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::ConnectOptions;
use std::time::Duration;

/// The first `server_version_num` with `GRANT … WITH INHERIT …, SET …`
/// (PostgreSQL 16): from here on, users are members of shared groups that
/// they cannot act as; before, they hold their grants themselves.
pub const MEMBERSHIP_OPTIONS: u32 = 160_000;

/// How long an exchange waits for a connection before answering 503.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

pub struct PostgresBackend {
    pool: PgPool,
    /// The broker's connection options, for reaching other databases at removal.
    options: PgConnectOptions,
    /// `server_version_num`, asked once.
    version: tokio::sync::OnceCell<u32>,
    /// Serialises statements that rewrite a shared ACL (PostgreSQL 15).
    acl: tokio::sync::Mutex<()>,
    strict: super::strict::StrictGate,
    database: String,
    public_host: String,
    public_port: u16,
    connection_limit: u32,
    scram_iterations: u32,
    groups: grants::Groups,
}

/// SQLSTATEs that mean the grant itself is impossible (no such table, schema
/// or database; the broker's account may not grant on it), as opposed to the
/// server being unreachable: retrying will not help, so the caller gets 422.
const NO_SUCH_OBJECT: [&str; 4] = ["42P01", "3F000", "3D000", "42501"];

/// Maps a driver error to a backend error. Driver messages name objects and
/// SQLSTATEs, never the connection URL or a password.
pub fn classify(e: sqlx::Error) -> BackendError {
    if grants::has_code(&e, &NO_SUCH_OBJECT) {
        return BackendError::Rejected(e.to_string());
    }
    BackendError::Unavailable(e.to_string())
}

impl PostgresBackend {
    /// Builds the backend without connecting: a database that is down at start
    /// only makes exchanges for it fail (503) until it is back.
    pub fn new(config: &DatabaseBackendConfig) -> Result<PostgresBackend, BackendError> {
        let options: PgConnectOptions = config
            .url
            .expose_secret()
            .parse()
            .map_err(|_| BackendError::Unavailable("invalid postgres URL".into()))?;
        // Statement logging off: CREATE ROLE carries a verifier, which is not the
        // password but is no business of a log either (sqlx logs slow statements
        // at WARN with their full text).
        let options = options
            .application_name("tessera-broker")
            .options([("statement_timeout", "30s"), ("lock_timeout", "10s")])
            .disable_statement_logging();
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy_with(options.clone());
        Ok(PostgresBackend {
            pool,
            options,
            version: tokio::sync::OnceCell::new(),
            acl: tokio::sync::Mutex::new(()),
            strict: super::strict::StrictGate::new(config.strict),
            database: config.database.clone(),
            public_host: config.public_host.clone(),
            public_port: config.public_port,
            connection_limit: config.connection_limit,
            scram_iterations: config.scram_iterations,
            groups: grants::Groups::default(),
        })
    }

    /// Creates `user` with `privilege` on `path`, valid until `valid_until`;
    /// returns its password. The issue path; also what the scale test drives.
    pub async fn create_user(
        &self,
        path: &database::DbPath,
        privilege: Privilege,
        user: &str,
        valid_until: i64,
    ) -> Result<secrecy::SecretString, BackendError> {
        if path.database != self.database {
            return Err(BackendError::Rejected(
                "resource database is not this backend's".into(),
            ));
        }
        let version = self.version().await?;
        let access = if version >= MEMBERSHIP_OPTIONS {
            users::Access::Group(self.groups.ensure(&self.pool, path, privilege).await?)
        } else {
            users::Access::Direct(grants::direct_sql(&self.pool, user, path, privilege).await?)
        };
        // PBKDF2 with 4096 rounds is ~1 ms of CPU: off the async workers.
        let iterations = self.scram_iterations;
        let (password, verifier) = tokio::task::spawn_blocking(move || {
            let password = database::new_password();
            let verifier = scram::verifier(password.expose_secret(), iterations);
            (password, verifier)
        })
        .await
        .map_err(|_| BackendError::Unavailable("verifier task failed".into()))?;
        let sql = users::create_sql(user, &verifier, valid_until, self.connection_limit, &access)
            .map_err(|e| BackendError::Rejected(e.to_string()))?;
        let acl = matches!(access, users::Access::Direct(_)).then_some(&self.acl);
        users::create(&self.pool, &sql, acl).await?;
        Ok(password)
    }

    /// Removes `users` (idempotent). See [`users::Remover`].
    pub async fn drop_users(&self, users: &[String]) -> Result<(), BackendError> {
        users::Remover {
            pool: &self.pool,
            options: &self.options,
            version: self.version().await?,
            acl: &self.acl,
        }
        .drop_all(users)
        .await
    }

    /// The server's `server_version_num` (asked once; a server is not
    /// upgraded under a running broker without a restart of its connections).
    pub async fn version(&self) -> Result<u32, BackendError> {
        self.version
            .get_or_try_init(|| async {
                let v: String = sqlx::query_scalar("SHOW server_version_num")
                    .fetch_one(&self.pool)
                    .await
                    .map_err(classify)?;
                v.trim()
                    .parse::<u32>()
                    .map_err(|_| BackendError::Unavailable("unreadable server_version_num".into()))
            })
            .await
            .copied()
    }
}

impl Backend for PostgresBackend {
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
        Box::pin(async move {
            let mut conn = self.pool.acquire().await.map_err(classify)?;
            check::unsafe_defaults(&mut conn).await.map_err(classify)
        })
    }

    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn downstream_ref(&self, claims: &CapabilityClaims, _lease_id: &str) -> Option<String> {
        Some(database::user_name(&claims.run))
    }

    fn issue<'a>(&'a self, grant: Grant<'a>) -> BoxFuture<'a, Result<Issued, BackendError>> {
        Box::pin(async move {
            let (privilege, path, user) = database::grant_parts(DbKind::Postgres, &grant)?;
            self.strict.admit(|| self.unsafe_defaults()).await?;
            let expires_at = grant.claims.exp;
            let password = self.create_user(&path, privilege, user, expires_at).await?;
            Ok(Issued {
                fields: database::connection_fields(
                    "postgres",
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
