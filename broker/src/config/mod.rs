//! Typed configuration: `tessera.toml` plus `TESSERA_*` environment overrides.
//!
//! Every field is parsed and checked at start; an error names the setting
//! (`limits.max_capability_ttl: ...`) so an operator knows what to fix. Unknown keys
//! are errors, so a misspelled limit is never silently ignored. No secret is read
//! from this file: the store URL, KEK and admin token come from the environment or
//! from files the config points at.
//!
//! This module reads the file and resolves what is the broker's own (listener,
//! store, keys, limits, TLS, HTTP, audit); each `[backends.NAME]` table is
//! resolved by its kind (`backends::settings`), and the result is assembled here.

pub mod approvals;
pub mod audit;
pub mod gateway;
pub mod http;
pub mod oauth;
pub mod operations;
pub mod replicas;

pub use approvals::ApprovalsConfig;
pub use audit::AuditConfig;
pub use gateway::GatewayConfig;
pub use http::{AllowedHosts, HttpConfig};
pub use oauth::OAuthConfig;
pub use operations::OperationsConfig;
pub use replicas::ReplicasConfig;
// Owned by the backend kinds and the settings leaf; named here too because the
// configuration is where callers look for them.
pub use crate::backends::settings::BackendConfig;
pub use crate::settings::{ConfigError, ConfigErrors, EnvLookup};

use crate::grammar::{parse_duration, Rate};
use crate::settings::{err, file_error, Problems, RawTable};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The file as written by an administrator.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    policy_dir: Option<PathBuf>,
    policy_watch_interval: Option<String>,
    expiry_sweep_interval: Option<String>,
    issuer: Option<String>,
    #[serde(default)]
    store: RawStore,
    #[serde(default)]
    keys: RawKeys,
    #[serde(default)]
    admin: RawAdmin,
    #[serde(default)]
    limits: RawLimits,
    tls: Option<RawTls>,
    #[serde(default)]
    http: http::RawHttp,
    #[serde(default)]
    audit: audit::RawAudit,
    #[serde(default)]
    approvals: approvals::RawApprovals,
    gateway: Option<gateway::RawGateway>,
    #[serde(default)]
    oauth: oauth::RawOAuth,
    #[serde(default)]
    shutdown: operations::RawShutdown,
    #[serde(default)]
    readiness: operations::RawReadiness,
    #[serde(default)]
    retention: operations::RawRetention,
    #[serde(default)]
    replicas: replicas::RawReplicas,
    #[serde(default)]
    /// Each table is parsed by its `kind` (each kind has its own keys).
    backends: BTreeMap<String, RawTable>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    url_env: Option<String>,
    url_file: Option<PathBuf>,
    max_connections: Option<u32>,
    timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKeys {
    kek_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmin {
    token_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    default_capability_ttl: Option<String>,
    max_capability_ttl: Option<String>,
    default_uses: Option<u32>,
    max_uses: Option<u32>,
    max_rate: Option<String>,
    default_run_ttl: Option<String>,
    max_run_ttl: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_ca_file: Option<PathBuf>,
    require_runtime_client_cert: Option<bool>,
}

/// Server-wide caps that bound every policy's annotations.
#[derive(Debug, Clone)]
pub struct Limits {
    pub default_capability_ttl: Duration,
    pub max_capability_ttl: Duration,
    pub default_uses: u32,
    pub max_uses: u32,
    pub max_rate: Rate,
    pub default_run_ttl: Duration,
    pub max_run_ttl: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            default_capability_ttl: Duration::from_secs(300),
            max_capability_ttl: Duration::from_secs(3600),
            default_uses: 10,
            max_uses: 10_000,
            max_rate: Rate {
                count: 6000,
                per: Duration::from_secs(60),
            },
            default_run_ttl: Duration::from_secs(3600),
            max_run_ttl: Duration::from_secs(24 * 3600),
        }
    }
}

/// TLS termination in the broker (rustls), optionally mTLS for runtimes.
#[derive(Debug, Clone)]
pub struct TlsConfig {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// CA that runtime client certificates must chain to.
    pub client_ca_file: Option<PathBuf>,
    /// Accept runtime keys only on connections with a verified client certificate.
    pub require_runtime_client_cert: bool,
}

/// Where the store lives (its own type: the store imports no configuration).
pub use crate::store::location::StoreUrl;

/// The validated configuration the broker runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub dev: bool,
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub policy_dir: PathBuf,
    /// `--dev` with no policy folder: `policy_dir` is in the data directory and
    /// gets the built-in example policy if it does not exist yet.
    pub embedded_policy: bool,
    /// How often the policy directory is checked for changes; `None`: never
    /// (reload then happens only on SIGHUP or the admin API).
    pub policy_watch_interval: Option<Duration>,
    /// How often runs past their expiry are ended and audited as expired.
    pub expiry_sweep_interval: Duration,
    pub issuer: String,
    pub store: StoreUrl,
    pub max_connections: u32,
    pub kek_file: Option<PathBuf>,
    pub admin_token_file: Option<PathBuf>,
    pub limits: Limits,
    pub tls: Option<TlsConfig>,
    pub http: HttpConfig,
    pub audit: AuditConfig,
    pub approvals: ApprovalsConfig,
    /// The egress gateway's listener and limits; `None`: no gateway.
    pub gateway: Option<GatewayConfig>,
    /// Tessera as an OAuth authorization server: its issuer URL and DPoP nonces.
    pub oauth: OAuthConfig,
    /// The shutdown deadline, the store's request-path timeout, readiness.
    pub operations: OperationsConfig,
    /// `[replicas]`: key pre-publication and policy versions across brokers.
    pub replicas: ReplicasConfig,
    pub backends: BTreeMap<String, BackendConfig>,
}

/// The part of the configuration that decides what a policy grants in practice: the
/// caps that bound its annotations and the backends that give resources their kind.
#[derive(Debug, Clone, Default)]
pub struct PolicySettings {
    pub limits: Limits,
    pub backends: BTreeMap<String, BackendConfig>,
}

/// Command-line settings that override the file and the environment.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub dev: bool,
    pub listen: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub policy_dir: Option<PathBuf>,
}

/// Where the broker listens when nothing says otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8700";

/// `--dev`'s data directory when none is named: one folder for the SQLite file,
/// the KEK, the admin token and checkpoints (ignored by the repository's
/// `.gitignore`), so a dev broker leaves nothing else behind.
pub const DEV_DATA_DIR: &str = "tessera-dev";

pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

pub(crate) use crate::settings::is_safe_destination;

impl Config {
    /// Loads `file` (if given; in `--dev` a missing file is fine) and applies
    /// environment and command-line overrides, then validates everything. Every
    /// problem is reported at once, each at its `FILE:LINE:COL` when it is a key
    /// of the file.
    pub fn load(
        file: Option<&Path>,
        overrides: &Overrides,
        env: EnvLookup<'_>,
    ) -> Result<Config, ConfigErrors> {
        match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| err("--config", format!("cannot read {}: {e}", path.display())))?;
                Self::from_named_toml(&path.display().to_string(), &text, overrides, env)
            }
            None => Self::from_raw(RawConfig::default(), overrides, env),
        }
    }

    /// Parses configuration text (for tests and `policy check`), named `tessera.toml`.
    pub fn from_toml(
        text: &str,
        overrides: &Overrides,
        env: EnvLookup<'_>,
    ) -> Result<Config, ConfigErrors> {
        Self::from_named_toml("tessera.toml", text, overrides, env)
    }

    fn from_named_toml(
        file: &str,
        text: &str,
        overrides: &Overrides,
        env: EnvLookup<'_>,
    ) -> Result<Config, ConfigErrors> {
        let raw = toml::from_str::<RawConfig>(text).map_err(|e| file_error(file, text, &e))?;
        Self::from_raw(raw, overrides, env).map_err(|e| e.locate(file, text))
    }

    /// Reads only what the policy tools need from `file`: `[limits]` and `[backends]`
    /// (unknown keys anywhere are still errors). No environment, store or key is
    /// consulted, so `tessera policy` runs on a machine that holds none of them.
    pub fn load_policy_settings(file: &Path) -> Result<PolicySettings, ConfigErrors> {
        let setting = file.display().to_string();
        let text = std::fs::read_to_string(file)
            .map_err(|e| err("--config", format!("cannot read {setting}: {e}")))?;
        let raw =
            toml::from_str::<RawConfig>(&text).map_err(|e| file_error(&setting, &text, &e))?;
        let mut p = Problems::default();
        let limits = p.take(resolve_limits(&raw.limits));
        let backends = p.take(resolve_backends(raw.backends, &process_env));
        p.finish().map_err(|e| e.locate(&setting, &text))?;
        Ok(PolicySettings {
            limits: limits.unwrap_or_default(),
            backends: backends.unwrap_or_default(),
        })
    }

    /// Resolves every setting, recording each problem and going on with a
    /// placeholder, so one start reports them all.
    fn from_raw(raw: RawConfig, o: &Overrides, env: EnvLookup<'_>) -> Result<Config, ConfigErrors> {
        let mut p = Problems::default();
        let listen_text = o
            .listen
            .clone()
            .or_else(|| env("TESSERA_LISTEN"))
            .or(raw.listen)
            .unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
        let listen: SocketAddr = p
            .take(
                listen_text
                    .parse()
                    .map_err(|_| err("listen", format!("not an address:port: {listen_text:?}"))),
            )
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8700)));
        let data_dir = o
            .data_dir
            .clone()
            .or_else(|| env("TESSERA_DATA_DIR").map(PathBuf::from))
            .or(raw.data_dir)
            .unwrap_or_else(|| PathBuf::from(if o.dev { DEV_DATA_DIR } else { "." }));
        let policy_dir = o
            .policy_dir
            .clone()
            .or_else(|| env("TESSERA_POLICY_DIR").map(PathBuf::from))
            .or(raw.policy_dir);
        // `--dev` outside a checkout (no `policy/` here, none named) runs the
        // example policy that ships inside the binary, written once to the data
        // directory so it can be read, edited and reloaded.
        let embedded_policy = o.dev && policy_dir.is_none() && !Path::new("policy").is_dir();
        let policy_dir = match policy_dir {
            Some(dir) => dir,
            None if embedded_policy => data_dir.join("policy"),
            None => PathBuf::from("policy"),
        };
        let policy_watch_interval = match raw.policy_watch_interval.as_deref() {
            Some("off") => None,
            other => p.take(interval_setting(
                "policy_watch_interval",
                other,
                Duration::from_secs(2),
            )),
        };
        let expiry_sweep_interval = p
            .take(interval_setting(
                "expiry_sweep_interval",
                raw.expiry_sweep_interval.as_deref(),
                Duration::from_secs(5),
            ))
            .unwrap_or_default();
        let issuer = env("TESSERA_ISSUER")
            .or(raw.issuer)
            .unwrap_or_else(|| "tessera".to_owned());
        if issuer.is_empty() || issuer.len() > 256 || issuer.chars().any(char::is_control) {
            p.take::<()>(Err(err("issuer", "must be 1-256 printable characters")));
        }

        let store = p.take(resolve_store(&raw.store, o.dev, &data_dir, env));
        let max_connections = raw.store.max_connections.unwrap_or(8);
        if !(1..=256).contains(&max_connections) {
            p.take::<()>(Err(err(
                "store.max_connections",
                "must be between 1 and 256",
            )));
        }
        let kek_file = env("TESSERA_KEK_FILE")
            .map(PathBuf::from)
            .or(raw.keys.kek_file);
        if !o.dev && kek_file.is_none() && env("TESSERA_KEK").is_none() {
            p.take::<()>(Err(err(
                "keys.kek_file",
                "no key-encryption key: set keys.kek_file, TESSERA_KEK_FILE or TESSERA_KEK (or run with --dev)",
            )));
        }
        let admin_token_file = env("TESSERA_ADMIN_TOKEN_FILE")
            .map(PathBuf::from)
            .or(raw.admin.token_file)
            .or_else(|| o.dev.then(|| data_dir.join("admin.token")));

        let limits = p.take(resolve_limits(&raw.limits)).unwrap_or_default();
        let tls = p.take(resolve_tls(raw.tls, env)).flatten();
        let http = p.take(http::resolve(raw.http, listen));
        let audit = p.take(audit::resolve(raw.audit, o.dev, &data_dir));
        let approvals = p
            .take(approvals::resolve(raw.approvals))
            .unwrap_or_default();
        let mut backends = BTreeMap::new();
        for (name, table) in raw.backends {
            let setting = format!("backends.{name}");
            let Some(mut b) = p.take(resolve_backend(&name, table, env)) else {
                continue;
            };
            if p.take(b.resolve_credentials(&setting, env)).is_some() {
                backends.insert(name, b);
            }
        }
        p.take(crate::backends::references::check_references(&backends));
        p.take(crate::backends::references::check_unique(&backends));
        let oauth = p
            .take(oauth::resolve(
                raw.oauth,
                env("TESSERA_OAUTH_ISSUER"),
                o.dev,
                tls.is_some(),
                listen,
            ))
            .unwrap_or_default();
        if oauth.issuer.is_none() {
            if let Some(name) = backends
                .iter()
                .find_map(|(n, b)| matches!(b, BackendConfig::OAuthResource(_)).then_some(n))
            {
                p.take::<()>(Err(err(
                    "oauth.issuer",
                    format!("backends.{name} is an oauth-resource: set the broker's public URL"),
                )));
            }
        }
        let operations = p
            .take(operations::resolve(
                raw.shutdown,
                &raw.store.timeout,
                raw.readiness,
                raw.retention,
            ))
            .unwrap_or_default();
        let replicas = p
            .take(replicas::resolve(raw.replicas, operations.store_timeout))
            .unwrap_or_default();
        let gateway = p
            .take(gateway::resolve(raw.gateway.unwrap_or_default(), &backends))
            .flatten();
        p.finish()?;
        let (Some(store), Some(mut http), Some(audit)) = (store, http, audit) else {
            unreachable!("a setting without a value recorded a problem");
        };
        // The pools' descriptors are kept out of the connection cap.
        http.reserved_fds = u64::from(max_connections)
            + backends
                .values()
                .map(|b| u64::from(b.pool_size()))
                .sum::<u64>();
        if o.dev && backends.is_empty() {
            // `--dev` ships one backend so the walk-through works without a config file.
            backends.insert(
                "svc-reports".to_owned(),
                BackendConfig::Token(crate::backends::token::TokenConfig {
                    audience: "https://reports.internal".to_owned(),
                    actions: None,
                }),
            );
            // …and one whose example permit needs a human approval.
            backends.insert(
                "deployer".to_owned(),
                BackendConfig::Token(crate::backends::token::TokenConfig {
                    audience: "https://deployer.internal".to_owned(),
                    actions: None,
                }),
            );
        }
        Ok(Config {
            dev: o.dev,
            listen,
            data_dir,
            policy_dir,
            embedded_policy,
            policy_watch_interval,
            expiry_sweep_interval,
            issuer,
            store,
            max_connections,
            kek_file,
            admin_token_file,
            limits,
            tls,
            http,
            audit,
            approvals,
            gateway,
            oauth,
            operations,
            replicas,
            backends,
        })
    }

    /// The `aud` of capabilities: only this broker accepts them.
    pub fn capability_audience(&self) -> String {
        format!("{}/capabilities", self.issuer)
    }
}

fn resolve_store(
    raw: &RawStore,
    dev: bool,
    data_dir: &Path,
    env: EnvLookup<'_>,
) -> Result<StoreUrl, ConfigError> {
    let (setting, url) = if let Some(u) = env("TESSERA_STORE_URL") {
        ("TESSERA_STORE_URL".to_owned(), Some(u))
    } else if let Some(var) = &raw.url_env {
        let u = env(var).ok_or_else(|| {
            err(
                "store.url_env",
                format!("environment variable {var} is not set"),
            )
        })?;
        (format!("store.url_env ({var})"), Some(u))
    } else if let Some(path) = &raw.url_file {
        let u = std::fs::read_to_string(path).map_err(|e| {
            err(
                "store.url_file",
                format!("cannot read {}: {e}", path.display()),
            )
        })?;
        ("store.url_file".to_owned(), Some(u.trim().to_owned()))
    } else {
        ("store".to_owned(), None)
    };
    match url {
        None if dev => sqlite_path("data_dir", data_dir.join("tessera.db")),
        None => Err(err(
            "store",
            "no store configured: set TESSERA_STORE_URL, store.url_env or store.url_file (or run with --dev)",
        )),
        Some(u) => {
            if let Some(path) = u.strip_prefix("sqlite://") {
                let path = path.split('?').next().unwrap_or(path);
                if path.is_empty() {
                    return Err(err(&setting, "sqlite URL needs a file path"));
                }
                sqlite_path(&setting, PathBuf::from(path))
            } else if u.starts_with("postgres://") || u.starts_with("postgresql://") {
                Ok(StoreUrl::Postgres(secrecy::SecretString::from(u)))
            } else {
                Err(err(&setting, "must start with sqlite:// or postgres://"))
            }
        }
    }
}

/// A SQLite store's file. The pool (sqlx, from a URL) and the writer
/// (rusqlite, from a file name) must open the same file, so a path that a URL
/// would read otherwise (`%` escapes, `?` and `#` delimiters, a `file:` URI)
/// is refused rather than opened as two databases.
fn sqlite_path(setting: &str, path: PathBuf) -> Result<StoreUrl, ConfigError> {
    let text = path.to_string_lossy();
    if text.contains(['%', '?', '#']) || text.starts_with("file:") {
        return Err(err(
            setting,
            "the SQLite file's path must not contain '%', '?' or '#' nor start with 'file:'",
        ));
    }
    Ok(StoreUrl::Sqlite(path))
}

fn duration_setting(
    setting: &str,
    v: &Option<String>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match v {
        None => Ok(default),
        Some(text) => parse_duration(text).map_err(|e| err(setting, e.to_string())),
    }
}

/// A background interval: 1s to 1h.
fn interval_setting(
    setting: &str,
    v: Option<&str>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    let d = duration_setting(setting, &v.map(str::to_owned), default)?;
    if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&d) {
        return Err(err(setting, "must be between 1s and 1h"));
    }
    Ok(d)
}

fn resolve_limits(raw: &RawLimits) -> Result<Limits, ConfigError> {
    let d = Limits::default();
    let l = Limits {
        default_capability_ttl: duration_setting(
            "limits.default_capability_ttl",
            &raw.default_capability_ttl,
            d.default_capability_ttl,
        )?,
        max_capability_ttl: duration_setting(
            "limits.max_capability_ttl",
            &raw.max_capability_ttl,
            d.max_capability_ttl,
        )?,
        default_uses: raw.default_uses.unwrap_or(d.default_uses),
        max_uses: raw.max_uses.unwrap_or(d.max_uses),
        max_rate: match &raw.max_rate {
            None => d.max_rate,
            Some(t) => t
                .parse()
                .map_err(|e: crate::grammar::GrammarError| err("limits.max_rate", e.to_string()))?,
        },
        default_run_ttl: duration_setting(
            "limits.default_run_ttl",
            &raw.default_run_ttl,
            d.default_run_ttl,
        )?,
        max_run_ttl: duration_setting("limits.max_run_ttl", &raw.max_run_ttl, d.max_run_ttl)?,
    };
    if l.max_capability_ttl > Duration::from_secs(24 * 3600) {
        return Err(err("limits.max_capability_ttl", "must be at most 24h"));
    }
    if l.default_capability_ttl > l.max_capability_ttl {
        return Err(err(
            "limits.default_capability_ttl",
            "must not exceed limits.max_capability_ttl",
        ));
    }
    if l.max_uses == 0 || l.max_uses > 1_000_000 {
        return Err(err("limits.max_uses", "must be between 1 and 1000000"));
    }
    if l.default_uses == 0 || l.default_uses > l.max_uses {
        return Err(err(
            "limits.default_uses",
            "must be between 1 and limits.max_uses",
        ));
    }
    if l.default_run_ttl > l.max_run_ttl {
        return Err(err(
            "limits.default_run_ttl",
            "must not exceed limits.max_run_ttl",
        ));
    }
    Ok(l)
}

fn resolve_tls(raw: Option<RawTls>, env: EnvLookup<'_>) -> Result<Option<TlsConfig>, ConfigError> {
    let raw = raw.unwrap_or_default();
    let cert = env("TESSERA_TLS_CERT_FILE")
        .map(PathBuf::from)
        .or(raw.cert_file);
    let key = env("TESSERA_TLS_KEY_FILE")
        .map(PathBuf::from)
        .or(raw.key_file);
    let client_ca = env("TESSERA_TLS_CLIENT_CA_FILE")
        .map(PathBuf::from)
        .or(raw.client_ca_file);
    match (cert, key) {
        (None, None) => {
            if client_ca.is_some() || raw.require_runtime_client_cert.is_some() {
                return Err(err(
                    "tls.client_ca_file",
                    "mTLS needs tls.cert_file and tls.key_file",
                ));
            }
            Ok(None)
        }
        (Some(_), None) => Err(err("tls.key_file", "required when tls.cert_file is set")),
        (None, Some(_)) => Err(err("tls.cert_file", "required when tls.key_file is set")),
        (Some(cert_file), Some(key_file)) => {
            let require = raw
                .require_runtime_client_cert
                .unwrap_or(client_ca.is_some());
            if require && client_ca.is_none() {
                return Err(err(
                    "tls.require_runtime_client_cert",
                    "needs tls.client_ca_file",
                ));
            }
            Ok(Some(TlsConfig {
                cert_file,
                key_file,
                client_ca_file: client_ca,
                require_runtime_client_cert: require,
            }))
        }
    }
}

fn resolve_backends(
    raw: BTreeMap<String, RawTable>,
    env: EnvLookup<'_>,
) -> Result<BTreeMap<String, BackendConfig>, ConfigError> {
    raw.into_iter()
        .map(|(name, table)| Ok((name.clone(), resolve_backend(&name, table, env)?)))
        .collect()
}

fn resolve_backend(
    name: &str,
    table: RawTable,
    env: EnvLookup<'_>,
) -> Result<BackendConfig, ConfigError> {
    let setting = format!("backends.{name}");
    if !crate::resource::is_backend_name(name) {
        return Err(err(
            &setting,
            "backend names are 1-63 of [a-z0-9-], starting with a letter",
        ));
    }
    BackendConfig::resolve(&setting, table, env)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn only_https_or_loopback_http_is_a_destination() {
        for ok in [
            "https://hooks.example.com/x",
            "http://127.0.0.1:8080/hook",
            "http://127.9.9.9/",
            "http://localhost:9/x",
            "http://[::1]:9/x",
        ] {
            assert!(super::is_safe_destination(ok), "{ok}");
        }
        for bad in [
            "http://127.0.0.1@evil.example/",
            "http://127.evil.example/",
            "http://localhost.evil.example/",
            "http://user:pw@127.0.0.1/",
            "http://10.0.0.1/",
            "ftp://127.0.0.1/",
            "https:// spaced",
            "not a url",
        ] {
            assert!(!super::is_safe_destination(bad), "{bad}");
        }
    }

    #[test]
    fn dev_needs_nothing() {
        let c = Config::from_toml(
            "",
            &Overrides {
                dev: true,
                ..Default::default()
            },
            &no_env,
        )
        .unwrap();
        assert!(matches!(c.store, StoreUrl::Sqlite(_)));
        assert_eq!(c.listen.to_string(), "127.0.0.1:8700");
        assert!(c.backends.contains_key("svc-reports"));
    }

    /// A file that does not parse, or has a key that does not exist, is named
    /// with the line and column where it goes wrong (issue 15: toml's position
    /// was dropped, leaving "tessera.toml: expected ..." to be searched for).
    #[test]
    fn a_file_error_says_where() {
        let o = Overrides {
            dev: true,
            ..Default::default()
        };
        let syntax = "listen = \"127.0.0.1:8700\"\n\n[limits]\nmax_ttl = \n";
        let e = Config::from_toml(syntax, &o, &no_env).unwrap_err();
        assert!(e.setting.starts_with("tessera.toml:4:"), "{e}");
        let unknown = "listen = \"127.0.0.1:8700\"\n[limits]\nmax_tll = \"1h\"\n";
        let e = Config::from_toml(unknown, &o, &no_env).unwrap_err();
        assert_eq!(e.setting, "tessera.toml:3:1", "{e}");
        assert!(e.message.contains("max_tll"), "{e}");
    }

    /// Every problem in one reading is reported together, each where it is
    /// written (issue 15: the store, then the KEK, then the AWS credentials came
    /// one per restart, and a bad value in the file had no line).
    #[test]
    fn every_error_is_reported_at_once_with_its_place() {
        let text = "listen = \"nowhere\"\n\n[limits]\nmax_uses = 0\n\n\
                    [backends.aws-main]\nkind = \"aws-sts\"\nregion = \"eu-west-1\"\n\
                    role_arn = \"arn:aws:iam::123456789012:role/x\"\n";
        let e = Config::from_toml(text, &Overrides::default(), &no_env).unwrap_err();
        let all = e.to_string();
        let settings: Vec<&str> = e.errors().iter().map(|e| e.setting.as_str()).collect();
        assert_eq!(
            settings,
            [
                "tessera.toml:1:10: listen",
                "store",
                "keys.kek_file",
                "tessera.toml:4:12: limits.max_uses",
                "tessera.toml:6:1: backends.aws-main",
            ],
            "{all}"
        );
        assert_eq!(all.lines().count(), 6, "a count, then one line each: {all}");
    }

    #[test]
    fn errors_name_the_setting() {
        let o = Overrides {
            dev: true,
            ..Default::default()
        };
        let e =
            Config::from_toml("[limits]\nmax_capability_ttl = \"5x\"", &o, &no_env).unwrap_err();
        assert_eq!(e.setting, "tessera.toml:2:22: limits.max_capability_ttl");
        let e = Config::from_toml("[backends.b]\nkind = \"nope\"", &o, &no_env).unwrap_err();
        assert_eq!(e.setting, "tessera.toml:2:8: backends.b.kind");
        let e = Config::from_toml("[backends.b]\nkind = \"token\"", &o, &no_env).unwrap_err();
        assert_eq!(e.setting, "tessera.toml:1:1: backends.b.audience");
        let e = Config::from_toml("listen = \"nowhere\"", &o, &no_env).unwrap_err();
        assert_eq!(e.setting, "tessera.toml:1:10: listen");
        let e = Config::from_toml("bogus = 1", &o, &no_env).unwrap_err();
        assert!(e.message.contains("bogus"), "{e}");
    }

    #[test]
    fn background_intervals() {
        let o = Overrides {
            dev: true,
            ..Default::default()
        };
        let c = Config::from_toml("", &o, &no_env).unwrap();
        assert_eq!(c.policy_watch_interval, Some(Duration::from_secs(2)));
        assert_eq!(c.expiry_sweep_interval, Duration::from_secs(5));
        let c = Config::from_toml("policy_watch_interval = \"off\"", &o, &no_env).unwrap();
        assert_eq!(c.policy_watch_interval, None);
        let e = Config::from_toml("policy_watch_interval = \"2h\"", &o, &no_env).unwrap_err();
        assert_eq!(e.setting, "tessera.toml:1:25: policy_watch_interval");
        let e = Config::from_toml("expiry_sweep_interval = \"soon\"", &o, &no_env).unwrap_err();
        assert_eq!(e.setting, "tessera.toml:1:25: expiry_sweep_interval");
    }

    #[test]
    fn production_requires_store_and_kek() {
        let e = Config::from_toml("", &Overrides::default(), &no_env).unwrap_err();
        assert_eq!(e.setting, "store");
        let env = |k: &str| (k == "TESSERA_STORE_URL").then(|| "postgres://u@h/db".to_owned());
        let e = Config::from_toml("", &Overrides::default(), &env).unwrap_err();
        assert_eq!(e.setting, "keys.kek_file");
    }

    /// The pool reads the store as a URL and the writer as a file name: a path
    /// they would read differently is refused, naming the setting.
    #[test]
    fn a_sqlite_path_that_a_url_reads_otherwise_is_refused() {
        let o = Overrides {
            dev: true,
            ..Default::default()
        };
        for url in [
            "sqlite:///tmp/a%20b.db",
            "sqlite:///tmp/a#b.db",
            "sqlite://file:/tmp/x.db",
        ] {
            let env = |k: &str| (k == "TESSERA_STORE_URL").then(|| url.to_owned());
            let e = Config::from_toml("", &o, &env).unwrap_err();
            assert_eq!(e.setting, "TESSERA_STORE_URL", "{url}");
            assert!(
                e.message.contains("must not contain"),
                "{url}: {}",
                e.message
            );
        }
        let env =
            |k: &str| (k == "TESSERA_STORE_URL").then(|| "sqlite:///tmp/t.db?mode=rwc".into());
        let c =
            Config::from_toml("", &o, &env).expect("a query string is the URL's, not the path's");
        assert!(matches!(&c.store, StoreUrl::Sqlite(p) if p == Path::new("/tmp/t.db")));
        let o = Overrides {
            dev: true,
            data_dir: Some(PathBuf::from("/tmp/50%")),
            ..Default::default()
        };
        let e = Config::from_toml("", &o, &no_env).unwrap_err();
        assert_eq!(e.setting, "data_dir");
    }

    #[test]
    fn tls_settings_come_in_pairs() {
        let o = Overrides {
            dev: true,
            ..Default::default()
        };
        let e = Config::from_toml("[tls]\ncert_file = \"c.pem\"", &o, &no_env).unwrap_err();
        assert_eq!(e.setting, "tessera.toml:1:1: tls.key_file");
        let e = Config::from_toml("[tls]\nclient_ca_file = \"ca.pem\"", &o, &no_env).unwrap_err();
        assert_eq!(e.setting, "tessera.toml:2:18: tls.client_ca_file");
        let c = Config::from_toml(
            "[tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\nclient_ca_file = \"ca.pem\"",
            &o,
            &no_env,
        )
        .unwrap();
        assert!(
            c.tls.unwrap().require_runtime_client_cert,
            "mTLS defaults to required for runtimes"
        );
    }

    #[test]
    fn policy_settings_need_no_store_keys_or_environment() {
        let dir = std::env::temp_dir().join(format!("tessera-cfg-{}", crate::ids::new_id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("tessera.toml");
        std::fs::write(
            &file,
            "[store]\nurl_env = \"TESSERA_TEST_UNSET_VARIABLE\"\n[keys]\nkek_file = \"/nowhere\"\n\
             [limits]\nmax_uses = 50\n[backends.svc]\nkind = \"token\"\naudience = \"a\"\n",
        )
        .unwrap();
        let s = Config::load_policy_settings(&file).unwrap();
        assert_eq!(s.limits.max_uses, 50);
        assert_eq!(
            s.limits.max_capability_ttl,
            Limits::default().max_capability_ttl
        );
        assert_eq!(
            s.backends.get("svc").map(BackendConfig::kind),
            Some("token")
        );
        std::fs::write(&file, "[limits]\nmax_usess = 50\n").unwrap();
        let e = Config::load_policy_settings(&file).unwrap_err();
        assert!(e.message.contains("max_usess"), "{e}");
        std::fs::write(&file, "[backends.svc]\nkind = \"token\"\n").unwrap();
        let e = Config::load_policy_settings(&file).unwrap_err();
        assert_eq!(
            e.setting,
            format!("{}:1:1: backends.svc.audience", file.display())
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn database_backends() {
        let o = Overrides {
            dev: true,
            ..Default::default()
        };
        let env = |k: &str| match k {
            "PG" => Some("postgres://tessera:s3cret@db.internal:6432/analytics".to_owned()),
            "MY" => Some("mysql://root:s3cret@127.0.0.1:3306/shop".to_owned()),
            "NODB" => Some("postgres://tessera:s3cret@db.internal".to_owned()),
            _ => None,
        };
        let c = Config::from_toml(
            "[backends.pg-main]\nkind = \"postgres\"\nurl_env = \"PG\"\n\
             [backends.shop]\nkind = \"mysql\"\nurl_env = \"MY\"\npublic_host = \"shop.db\"\nconnection_limit = 5\nactions = [\"select\"]\naccount_host = \"10.0.%\"",
            &o,
            &env,
        )
        .unwrap();
        let BackendConfig::Postgres(pg) = &c.backends["pg-main"] else {
            panic!("postgres")
        };
        assert_eq!(
            (
                pg.database.as_str(),
                pg.public_host.as_str(),
                pg.public_port
            ),
            ("analytics", "db.internal", 6432)
        );
        assert_eq!(pg.connection_limit, 2);
        let BackendConfig::Mysql(my) = &c.backends["shop"] else {
            panic!("mysql")
        };
        assert_eq!((my.public_host.as_str(), my.public_port), ("shop.db", 3306));
        assert_eq!(my.connection_limit, 5);
        assert_eq!(my.account_host.as_deref(), Some("10.0.%"));
        assert!(my.strict && pg.strict, "strict mode is the default");
        assert_eq!(pg.account_host, None);
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret"), "{shown}");

        for (text, setting) in [
            ("kind = \"postgres\"", "backends.b"),
            (
                "kind = \"postgres\"\nurl_env = \"UNSET\"",
                "backends.b.url_env",
            ),
            (
                "kind = \"postgres\"\nurl_env = \"MY\"",
                "backends.b.url_env",
            ),
            (
                "kind = \"postgres\"\nurl_env = \"NODB\"",
                "backends.b.url_env",
            ),
            (
                "kind = \"mysql\"\nurl_env = \"MY\"\naccount_host = \"%\"\nactions = [\"drop\"]",
                "backends.b.actions",
            ),
            (
                "kind = \"mysql\"\nurl_env = \"MY\"\naccount_host = \"%\"\nconnection_limit = 0",
                "backends.b.connection_limit",
            ),
            // The host of throw-away accounts is the operator's choice, never implied.
            (
                "kind = \"mysql\"\nurl_env = \"MY\"",
                "backends.b.account_host",
            ),
            (
                "kind = \"mysql\"\nurl_env = \"MY\"\naccount_host = \"a'b\"",
                "backends.b.account_host",
            ),
            (
                "kind = \"postgres\"\nurl_env = \"PG\"\naccount_host = \"%\"",
                "backends.b.account_host",
            ),
            (
                // Unknown to the kind: rejected by name (`unknown field audience`).
                "kind = \"mysql\"\nurl_env = \"MY\"\naudience = \"x\"",
                "backends.b",
            ),
            (
                "kind = \"token\"\naudience = \"x\"\nurl_env = \"PG\"",
                "backends.b",
            ),
        ] {
            let e = Config::from_toml(&format!("[backends.b]\n{text}"), &o, &env).unwrap_err();
            // Placed in the file when the setting is a key there (the table's
            // header for the table itself).
            let bare = e.setting.rsplit(": ").next().unwrap_or_default();
            assert_eq!(bare, setting, "{text}: {e}");
            assert!(!e.to_string().contains("s3cret"), "{e}");
        }
    }

    #[test]
    fn env_overrides_file() {
        let env = |k: &str| (k == "TESSERA_LISTEN").then(|| "127.0.0.1:9000".to_owned());
        let c = Config::from_toml(
            "listen = \"127.0.0.1:1\"",
            &Overrides {
                dev: true,
                ..Default::default()
            },
            &env,
        )
        .unwrap();
        assert_eq!(c.listen.port(), 9000);
    }
}
