//! What the broker hands a tool: capabilities and the credentials they are
//! exchanged for, typed per backend kind.
//!
//! Every secret is a `SecretString`: it never appears in `Debug` output, so a
//! tool that logs what it got (`{:?}`) leaks ids and expiries, not credentials.

use crate::error::Error;
use crate::types::{CapabilityResponse, ExchangeResponse};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// Unix time of an RFC 3339 timestamp.
pub(crate) fn parse_time(text: &str) -> Option<SystemTime> {
    let t =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    let secs = u64::try_from(t.unix_timestamp()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

/// A capability: a signed grant for one action on one resource.
pub struct Capability {
    id: String,
    token: SecretString,
    pub action: String,
    pub resource: String,
    /// RFC 3339.
    pub expires_at: String,
    /// Exchanges it allows.
    pub uses: u32,
    /// RFC 3339: when its hold lapses unless renewed (asked for with a hold).
    pub lapses_at: Option<String>,
    /// The `args` claim: hash of the arguments it was issued (approved) for.
    pub args: Option<String>,
}

impl Capability {
    pub(crate) fn new(r: CapabilityResponse, action: &str, resource: &str) -> Capability {
        Capability {
            id: r.capability_id.into(),
            token: SecretString::from(r.token),
            action: action.to_owned(),
            resource: resource.to_owned(),
            expires_at: r.expires_at,
            uses: r.uses,
            lapses_at: r.lapses_at,
            args: r.args,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The signed token, for services that verify Tessera capabilities themselves.
    pub fn token(&self) -> &str {
        self.token.expose_secret()
    }

    pub fn expires(&self) -> Option<SystemTime> {
        parse_time(&self.expires_at)
    }
}

impl std::fmt::Debug for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capability")
            .field("id", &self.id)
            .field("action", &self.action)
            .field("resource", &self.resource)
            .field("expires_at", &self.expires_at)
            .field("uses", &self.uses)
            .field("lapses_at", &self.lapses_at)
            .field("token", &"[redacted]")
            .finish()
    }
}

/// A downstream credential as the broker returned it; its fields depend on the
/// backend kind (see [`AwsCredentials`], [`DatabaseCredentials`]).
pub struct Exchanged {
    pub kind: String,
    pub lease_id: String,
    /// RFC 3339.
    pub expires_at: String,
    pub uses_left: u32,
    fields: BTreeMap<String, Value>,
}

impl From<ExchangeResponse> for Exchanged {
    fn from(r: ExchangeResponse) -> Self {
        Exchanged {
            kind: r.kind,
            lease_id: r.lease_id.into(),
            expires_at: r.expires_at,
            uses_left: r.uses_left,
            fields: r.fields,
        }
    }
}

impl Exchanged {
    /// A backend field, e.g. `token` for kind `token`. May be a secret: handle with care.
    pub fn field(&self, name: &str) -> Option<&Value> {
        self.fields.get(name)
    }

    fn text(&self, name: &str) -> Result<String, Error> {
        match self.fields.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(Value::Number(n)) => Ok(n.to_string()),
            _ => Err(Error::Protocol(format!(
                "a {} credential without `{name}`",
                self.kind
            ))),
        }
    }

    pub fn expires(&self) -> Option<SystemTime> {
        parse_time(&self.expires_at)
    }
}

impl std::fmt::Debug for Exchanged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchanged")
            .field("kind", &self.kind)
            .field("lease_id", &self.lease_id)
            .field("expires_at", &self.expires_at)
            .field("uses_left", &self.uses_left)
            .field("fields", &self.fields.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Temporary AWS credentials, scoped to one action on one resource.
pub struct AwsCredentials {
    pub capability: Capability,
    pub lease_id: String,
    pub access_key_id: String,
    secret_access_key: SecretString,
    session_token: SecretString,
    /// RFC 3339.
    pub expiration: String,
    /// The backend's region (`AWS_REGION` for a tool); `None` from a broker
    /// older than this field.
    pub region: Option<String>,
}

impl AwsCredentials {
    pub fn from_exchange(capability: Capability, ex: Exchanged) -> Result<Self, Error> {
        // Exchange responses name the credential family (`aws`); the backend
        // kind in tessera.toml is `aws-sts`.
        if ex.kind != "aws" {
            return Err(Error::Protocol(format!(
                "expected an aws credential, got {}",
                ex.kind
            )));
        }
        Ok(AwsCredentials {
            access_key_id: ex.text("access_key_id")?,
            secret_access_key: SecretString::from(ex.text("secret_access_key")?),
            session_token: SecretString::from(ex.text("session_token")?),
            expiration: ex.text("expiration")?,
            region: ex.text("region").ok(),
            lease_id: ex.lease_id,
            capability,
        })
    }

    pub fn secret_access_key(&self) -> &str {
        self.secret_access_key.expose_secret()
    }

    pub fn session_token(&self) -> &str {
        self.session_token.expose_secret()
    }

    /// When the credentials stop working (the earlier of STS's expiration and
    /// the capability's: the session policy denies everything after the latter).
    pub fn expires(&self) -> Option<SystemTime> {
        match (parse_time(&self.expiration), self.capability.expires()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The AWS `credential_process` JSON (Version 1).
    pub fn credential_process_json(&self) -> String {
        serde_json::json!({
            "Version": 1,
            "AccessKeyId": self.access_key_id,
            "SecretAccessKey": self.secret_access_key(),
            "SessionToken": self.session_token(),
            "Expiration": self.expiration,
        })
        .to_string()
    }
}

impl std::fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("expiration", &self.expiration)
            .field("lease_id", &self.lease_id)
            .field("secret_access_key", &"[redacted]")
            .field("session_token", &"[redacted]")
            .finish()
    }
}

/// A throw-away database user with grants on exactly one table.
pub struct DatabaseCredentials {
    pub capability: Capability,
    /// `postgres` or `mysql`.
    pub kind: String,
    pub lease_id: String,
    pub host: String,
    pub port: u16,
    pub database: String,
    pub username: String,
    password: SecretString,
    dsn: SecretString,
    /// RFC 3339.
    pub expires_at: String,
}

impl DatabaseCredentials {
    pub fn from_exchange(capability: Capability, ex: Exchanged) -> Result<Self, Error> {
        if ex.kind != "postgres" && ex.kind != "mysql" {
            return Err(Error::Protocol(format!(
                "expected a database credential, got {}",
                ex.kind
            )));
        }
        let port = ex
            .text("port")?
            .parse()
            .map_err(|_| Error::Protocol("database port is not a number".into()))?;
        Ok(DatabaseCredentials {
            host: ex.text("host")?,
            port,
            database: ex.text("database")?,
            username: ex.text("username")?,
            password: SecretString::from(ex.text("password")?),
            dsn: SecretString::from(ex.text("dsn")?),
            expires_at: ex.expires_at.clone(),
            kind: ex.kind.clone(),
            lease_id: ex.lease_id.clone(),
            capability,
        })
    }

    pub fn password(&self) -> &str {
        self.password.expose_secret()
    }

    /// A connection URL with the password in it.
    pub fn dsn(&self) -> &str {
        self.dsn.expose_secret()
    }

    /// The conventional environment of the database's own clients (`PGHOST`… for
    /// PostgreSQL, `MYSQL_HOST`… for MySQL/MariaDB), plus `DATABASE_URL`.
    pub fn environment(&self) -> Vec<(String, String)> {
        let mut env = match self.kind.as_str() {
            "postgres" => vec![
                ("PGHOST", self.host.clone()),
                ("PGPORT", self.port.to_string()),
                ("PGDATABASE", self.database.clone()),
                ("PGUSER", self.username.clone()),
                ("PGPASSWORD", self.password().to_owned()),
            ],
            _ => vec![
                ("MYSQL_HOST", self.host.clone()),
                ("MYSQL_TCP_PORT", self.port.to_string()),
                ("MYSQL_DATABASE", self.database.clone()),
                ("MYSQL_USER", self.username.clone()),
                ("MYSQL_PWD", self.password().to_owned()),
            ],
        };
        env.push(("DATABASE_URL", self.dsn().to_owned()));
        env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
    }
}

impl std::fmt::Debug for DatabaseCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseCredentials")
            .field("kind", &self.kind)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("database", &self.database)
            .field("username", &self.username)
            .field("expires_at", &self.expires_at)
            .field("password", &"[redacted]")
            .field("dsn", &"[redacted]")
            .finish()
    }
}
