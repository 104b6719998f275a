//! The boot sequence of a serving broker, as a library function: what
//! `tessera serve` calls once it has its configuration and logging.
//!
//! Order, [`Broker::build`]: open-file limit → data directory and store file
//! (0600) → KEK → policy (an invalid policy stops the start with
//! file:line:col) → admin token → store, keys, backends (`App::build`) → the
//! published policy version → the API's and the gateway's listeners; then
//! [`Broker::run_until_stopped`]: background jobs → serve until `shutdown` →
//! stop the jobs (claimed work finished or handed back, a final checkpoint).
//! The tests start the broker through the same two. In `--dev` everything missing is generated in the
//! data directory (`tessera-dev/` by default): the SQLite file, the KEK, the
//! admin token file (or `TESSERA_ADMIN_TOKEN_FILE` when that file does not
//! exist yet) and, when there is no policy folder, the example policy.

use crate::app::{App, AppState};
use crate::clock::Clock;
use crate::config::{self, Config};
use crate::keys::Kek;
use crate::policy::PolicyEngine;
use crate::secret::AdminToken;
use anyhow::{bail, Context};
use std::future::Future;
use std::path::Path;
use std::sync::Arc;

/// Set by `tessera serve` when its logs are JSON: what the boot prints for
/// people then goes out as log events too.
pub static JSON_LOGS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Boots a broker with `config` and serves until `shutdown` resolves.
pub async fn serve(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    Broker::build(config)
        .await?
        .run_until_stopped(Jobs::All, shutdown)
        .await
}

/// Which background jobs a broker runs while it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jobs {
    /// Every job of a serving broker ([`crate::jobs::start`]).
    All,
    /// Only what tells this broker what other replicas did (rotated keys,
    /// published policy versions); the test suite drives revocation, expiry
    /// and the rest itself, one pass at a time, so what it asserts does not
    /// race a background pass.
    ReplicaSync,
}

/// A broker built and listening, not yet serving: what `tessera serve` runs
/// and what the tests start, by the same function.
///
/// Why one function: a test harness that assembles the broker by hand tests
/// its own wiring, not the one that ships. [`Broker::build`] does everything
/// `serve` does before the first request (limits, files, keys, policy, store,
/// the policy version, the listeners); [`Broker::run_until_stopped`] serves
/// until told to stop, then stops the jobs.
pub struct Broker {
    app: AppState,
    listener: tokio::net::TcpListener,
    gateway: Option<(Arc<crate::gateway::Gateway>, tokio::net::TcpListener)>,
    tls: Option<rustls::ServerConfig>,
    /// What the start line says of the policy set.
    policy_summary: (usize, String, String),
}

impl Broker {
    /// Builds the broker `config` describes and binds its listeners.
    pub async fn build(config: Config) -> anyhow::Result<Broker> {
        Self::build_with(config, None).await
    }

    /// [`Broker::build`] on a listener bound already (`config.listen` is not
    /// bound again): for a caller that must know the address before the
    /// configuration, such as an OAuth issuer naming where the broker listens.
    pub async fn build_on(
        config: Config,
        listener: tokio::net::TcpListener,
    ) -> anyhow::Result<Broker> {
        Self::build_with(config, Some(listener)).await
    }

    async fn build_with(
        config: Config,
        listener: Option<tokio::net::TcpListener>,
    ) -> anyhow::Result<Broker> {
        match crate::rlimit::raise_open_files() {
            Some((before, after)) if after > before => {
                tracing::info!(
                    before,
                    after,
                    "raised the open-file limit to its hard limit"
                )
            }
            Some((_, after)) => tracing::info!(open_files = after, "open-file limit"),
            None => tracing::warn!("cannot read the open-file limit"),
        }
        if config.dev {
            dev_data_dir(&config.data_dir)?;
            if config.embedded_policy {
                crate::policy::example::write_if_missing(&config.policy_dir)?;
                tracing::info!(policy_dir = %config.policy_dir.display(),
                    "no policy folder here: running the example policy built into the binary");
            }
        }
        if let crate::config::StoreUrl::Sqlite(path) = &config.store {
            create_private_file(path)?;
        }
        // The key, the policy and the admin token are each checked, and every
        // problem is reported at once rather than one per restart.
        let kek = load_kek(&config);
        let policy = PolicyEngine::load_dir(&config.policy_dir).map_err(|e| {
            anyhow::anyhow!("policy in {} is invalid:\n{e}", config.policy_dir.display())
        });
        let admin = admin_token_hash(&config);
        let (kek, policy, admin) = match (kek, policy, admin) {
            (Ok(kek), Ok(policy), Ok(admin)) => (kek, policy, admin),
            (kek, policy, admin) => {
                let problems: Vec<String> = [kek.err(), policy.err(), admin.err()]
                    .into_iter()
                    .flatten()
                    .map(|e| format!("{e:#}"))
                    .collect();
                bail!("{}", problems.join("\n"));
            }
        };
        let policy_summary = (
            policy.policy_count(),
            policy.decision_cache_summary(),
            crate::policy::files::fingerprint(&config.policy_dir),
        );
        let app = App::build(config, kek, policy, admin, Clock::new()).await?;
        // One policy version for every replica on this store.
        crate::policy_versions::publish_at_start(&app)
            .await
            .context("publishing the policy version")?;
        // Bound once the store, keys and policy are in place: a start that
        // fails on any of them never accepted a connection.
        let listener = match listener {
            Some(l) => l,
            None => {
                let listen = app.config.listen;
                tokio::net::TcpListener::bind(listen)
                    .await
                    .with_context(|| format!("listen: cannot bind {listen}"))?
            }
        };
        let gateway = match app.config.gateway.clone() {
            Some(gw_config) => {
                let gw_listener = tokio::net::TcpListener::bind(gw_config.listen)
                    .await
                    .with_context(|| format!("gateway.listen: cannot bind {}", gw_config.listen))?;
                let gateway = crate::gateway::Gateway::new(app.clone(), gw_config)
                    .await
                    .context("gateway")?;
                Some((gateway, gw_listener))
            }
            None => None,
        };
        let tls = match &app.config.tls {
            Some(tls) => Some(crate::server::tls_config(tls)?),
            None => None,
        };
        Ok(Broker {
            app,
            listener,
            gateway,
            tls,
            policy_summary,
        })
    }

    /// The application state this broker serves.
    pub fn app(&self) -> &AppState {
        &self.app
    }

    /// Where the API listens.
    pub fn addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// Where the egress gateway listens, when `[gateway]` is configured.
    pub fn gateway_addr(&self) -> Option<std::net::SocketAddr> {
        self.gateway.as_ref().and_then(|(_, l)| l.local_addr().ok())
    }

    /// Serves until `shutdown` resolves, then drains the connections and
    /// stops the jobs within `operations.shutdown_timeout`.
    pub async fn run_until_stopped(
        self,
        jobs: Jobs,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let Broker {
            app,
            listener,
            gateway,
            tls,
            policy_summary: (policies, decision_cache, policy_sha256),
        } = self;
        let jobs = match jobs {
            Jobs::All => Some(crate::jobs::start(&app)),
            Jobs::ReplicaSync => {
                crate::jobs::start_replica_sync(&app);
                None
            }
        };
        // The egress gateway serves before the API does: a run started once
        // the API answers can use it at once.
        if let Some((gateway, gw_listener)) = gateway {
            tokio::spawn(gateway.serve(gw_listener));
        }
        let router = crate::api::router(app.clone());
        let addr = listener.local_addr()?;
        let c = &app.config;
        let backends: Vec<String> = c
            .backends
            .iter()
            .map(|(name, b)| format!("{name}({})", b.kind()))
            .collect();
        // One line that says what this broker is: where it listens, what it stores
        // in, which policy set it enforces and what it can hand out.
        tracing::info!(
            %addr,
            store = ?c.store,
            policy_dir = %c.policy_dir.display(),
            policies,
            %decision_cache,
            policy_sha256 = %policy_sha256.get(..12).unwrap_or(&policy_sha256),
            backends = %backends.join(","),
            tls = tls.is_some(),
            mtls = c.tls.as_ref().is_some_and(|t| t.client_ca_file.is_some()),
            dev = c.dev,
            "tessera listening"
        );
        if c.dev {
            dev_exports(addr, tls.is_some(), c.admin_token_file.as_deref());
        }
        // The deadline runs from the signal: requests in flight get most of it,
        // the jobs what is left (see `stop_budget`).
        let timeout = app.config.operations.shutdown_timeout;
        let (drain, _) = stop_budget(timeout);
        let signalled = std::sync::Arc::new(std::sync::OnceLock::new());
        let shutdown = {
            let (app, signalled) = (app.clone(), signalled.clone());
            async move {
                shutdown.await;
                let _ = signalled.set(std::time::Instant::now());
                app.health.begin_stopping();
            }
        };
        crate::server::serve(
            listener,
            router,
            app.config.http.clone(),
            tls,
            shutdown,
            drain,
        )
        .await?;
        let since = signalled
            .get()
            .copied()
            .unwrap_or_else(std::time::Instant::now);
        if let Some(jobs) = jobs {
            jobs.stop(since + stop_budget(timeout).1).await;
        }
        tracing::info!(took = ?since.elapsed(), deadline = ?timeout, "stopped");
        Ok(())
    }
}

/// How a shutdown deadline is spent: the connections' drain, then the jobs
/// (a revocation pass finishing, claims handed back, the last checkpoint),
/// each measured from the signal; a margin is left for the process to exit.
fn stop_budget(timeout: std::time::Duration) -> (std::time::Duration, std::time::Duration) {
    let margin = std::time::Duration::from_millis(300).min(timeout / 4);
    let drain = timeout * 3 / 5;
    (drain, timeout - margin)
}

/// What a `--dev` user pastes into another shell to use the CLI against this
/// broker: printed as shell lines on stderr, or as one log event when logs are
/// JSON (so a collector never gets a line that is not JSON).
fn dev_exports(addr: std::net::SocketAddr, tls: bool, token_file: Option<&Path>) {
    let scheme = if tls { "https" } else { "http" };
    let addr_line = format!("export TESSERA_ADDR={scheme}://{addr}");
    let token_line = token_file.map(|f| {
        let abs = std::path::absolute(f).unwrap_or_else(|_| f.to_path_buf());
        format!("export TESSERA_ADMIN_TOKEN_FILE={}", abs.display())
    });
    if JSON_LOGS.load(std::sync::atomic::Ordering::Relaxed) {
        tracing::info!(exports = %[Some(addr_line), token_line].into_iter().flatten()
            .collect::<Vec<_>>().join("; "), "development broker: set these to use the CLI");
        return;
    }
    let mut text = format!(
        "\ntessera: development broker. To use the CLI from another shell:\n\n    {addr_line}\n"
    );
    if let Some(line) = token_line {
        text.push_str(&format!("    {line}\n"));
    }
    text.push_str("\nThe store, key and token are in the data directory; never use --dev for real credentials.\n");
    eprintln!("{text}");
}

/// Creates `--dev`'s data directory (0700) or accepts an existing one only if
/// this user owns it and no one else may write to it: a dev broker trusts the
/// KEK, admin token and policy it finds there, and in a shared folder (`/tmp`)
/// another user could have put their own.
fn dev_data_dir(dir: &Path) -> anyhow::Result<()> {
    crate::private_fs::make_dir(
        dir,
        0o022,
        "a dev broker uses only a data dir it owns that no one else may write to (remove it, \
         or pass --data-dir)",
    )
}

/// Refuses a `--dev` secret file that this user does not own or that others
/// may read or write (it would be someone else's key or token).
fn dev_owned(path: &Path, what: &str) -> anyhow::Result<()> {
    let meta =
        std::fs::symlink_metadata(path).with_context(|| format!("{what} {}", path.display()))?;
    crate::private_fs::refuse_foreign(
        path,
        &meta,
        0o077,
        &format!("{what} must be a regular file of this user with mode 600; remove it and a new one is made"),
    )
}

/// Creates an empty file readable only by its owner, unless it exists. SQLite
/// gives its WAL and shared-memory files the database file's permissions, so
/// the whole store stays 0600.
fn create_private_file(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // A store created by an older version (or by hand) may be
            // readable by others: tighten it and its journal files.
            use std::os::unix::fs::PermissionsExt;
            for suffix in ["", "-wal", "-shm"] {
                let file = std::path::PathBuf::from(format!("{}{suffix}", path.display()));
                if let Ok(meta) = std::fs::metadata(&file) {
                    if meta.permissions().mode() & 0o077 != 0 {
                        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
                            .with_context(|| format!("making {} private", file.display()))?;
                        tracing::warn!(file = %file.display(), "store file was readable by others; now 0600");
                    }
                }
            }
            Ok(())
        }
        Err(e) => Err(e).with_context(|| format!("creating {}", path.display())),
    }
}

fn load_kek(config: &Config) -> anyhow::Result<Kek> {
    if let Some(text) = config::process_env("TESSERA_KEK") {
        return Kek::from_base64(&text).context("TESSERA_KEK");
    }
    let path = match &config.kek_file {
        Some(p) => p.clone(),
        None if config.dev => config.data_dir.join("tessera-dev.kek"),
        None => bail!("config error: keys.kek_file: no key-encryption key configured"),
    };
    if !path.exists() && config.dev {
        let (kek, text) = Kek::generate();
        crate::private_fs::write_new(&path, &text)?;
        tracing::info!(path = %path.display(), "generated a development key-encryption key");
        return Ok(kek);
    }
    if config.dev {
        dev_owned(&path, "the development KEK")?;
    }
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "config error: keys.kek_file: cannot read {}",
            path.display()
        )
    })?;
    Kek::from_base64(&text)
        .with_context(|| format!("config error: keys.kek_file: {}", path.display()))
}

/// The admin token's hash, generating (and showing once) a token in `--dev`.
fn admin_token_hash(config: &Config) -> anyhow::Result<Option<String>> {
    if let Some(path) = &config.admin_token_file {
        if path.exists() {
            if config.dev {
                dev_owned(path, "the development admin token")?;
            }
            let text = zeroize::Zeroizing::new(
                std::fs::read_to_string(path)
                    .with_context(|| format!("admin token file {}", path.display()))?,
            );
            let Ok(token) = AdminToken::parse(text.trim()) else {
                bail!(
                    "config error: admin token file {} does not hold a tsr_adm_ token",
                    path.display()
                );
            };
            return Ok(Some(token.sha256()));
        }
        if !config.dev {
            bail!(
                "config error: admin.token_file: {} does not exist",
                path.display()
            );
        }
        let token = AdminToken::generate();
        crate::private_fs::write_new(path, token.expose_secret())?;
        tracing::info!(path = %path.display(), "generated a development admin token (mode 0600)");
        return Ok(Some(token.sha256()));
    }
    tracing::warn!("no admin token configured: the admin API is disabled");
    Ok(None)
}
