//! The one application state, built once at start and shared by every handler.
//!
//! [`App::build`] turns a validated [`Config`] into a running broker core: store
//! opened and migrated, KEK and signing keys loaded (or created in `--dev`), policy
//! loaded and validated, backends constructed. The boot (`crate::boot`) then
//! publishes the policy version and starts the jobs. Tests build it the same
//! way, with a fresh database, so they exercise exactly what production runs.

use crate::backends::http::HttpBackend;
use crate::backends::mysql::MysqlBackend;
use crate::backends::net::NetBackend;
use crate::backends::postgres::PostgresBackend;
use crate::backends::{aws::AwsStsBackend, token::TokenBackend, Backend};
use crate::clock::Clock;
use crate::config::{BackendConfig, Config};
use crate::instance::Instance;
use crate::keys::{manage, Kek, KeyRing};
use crate::metrics::Metrics;
use crate::policy::in_force::PolicyInForce;
use crate::policy::PolicyEngine;
use crate::store::capabilities::HeldCapability;
use crate::store::instances::RegisterInstance;
use crate::store::runs::RunRecord;
use crate::store::Store;
use anyhow::Context;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

pub type AppState = Arc<App>;

pub struct App {
    pub config: Config,
    pub store: Store,
    pub kek: Kek,
    pub keys: Arc<KeyRing>,
    /// The policy set in force, its published version, seal and reload lock.
    pub policy_in_force: PolicyInForce,
    pub backends: BTreeMap<String, Arc<dyn Backend>>,
    /// SHA-256 of the admin token; `None` disables the admin API.
    pub admin_token_hash: Option<String>,
    pub metrics: Metrics,
    pub clock: Clock,
    pub runs: RunCache,
    /// Issued capabilities and their runs (see [`HeldCache`]).
    pub held: HeldCache,
    /// Wakes the revocation worker when the outbox gains rows.
    pub revocation_wakeup: tokio::sync::Notify,
    /// Bumped by every approval decision here: long-polls wake at once (and
    /// re-read the store every second for decisions on other replicas).
    pub approvals_changed: tokio::sync::watch::Sender<u64>,
    /// Wakes the webhook worker when an approval is opened.
    pub webhook_wakeup: tokio::sync::Notify,
    /// This process as the store knows it (owner of its revocation claims).
    pub instance: Instance,
    /// Set once when the broker begins to stop; background tasks watch it.
    pub stopping: tokio::sync::watch::Sender<bool>,
    /// What readiness reports besides the store (stopping, a rejected policy).
    pub health: crate::health::Health,
    /// When this process started (Unix seconds).
    pub started_at: i64,
    /// The highest audit row this process has checkpointed.
    pub last_checkpoint: std::sync::atomic::AtomicI64,
    witness: std::sync::OnceLock<Option<reqwest::Client>>,
    /// Credential injection's per-run CAs and placeholders (`injection`).
    pub injection: crate::injection::Sessions,
    /// DPoP proof checks, their replay cache and nonces (`dpop`).
    pub dpop: crate::dpop::Dpop,
}

impl App {
    pub async fn build(
        config: Config,
        kek: Kek,
        policy: PolicyEngine,
        admin_token_hash: Option<String>,
        clock: Clock,
    ) -> anyhow::Result<AppState> {
        let store = Store::open(
            &config.store,
            config.max_connections,
            clock.clone(),
            config.operations.store_timeout,
        )
        .await
        .context("opening the store")?;
        // The audit key first: no row is written before the chain is keyed.
        let audit_key = crate::audit::key_store::load_or_create(&store, &kek, clock.now())
            .await
            .context("loading the audit key")?;
        store.writer().install_audit_key(Arc::new(audit_key));
        let keyset = manage::load_or_create(&store, &kek, clock.now())
            .await
            .context("loading signing keys")?;
        let keys = Arc::new(KeyRing::new(keyset));
        let instance = Instance::this_process();
        store
            .writer()
            .submit(RegisterInstance(instance.clone()))
            .await
            .context("registering this broker instance")?;
        let mut backends: BTreeMap<String, Arc<dyn Backend>> = BTreeMap::new();
        for (name, b) in &config.backends {
            let backend: Arc<dyn Backend> = match b {
                BackendConfig::Token(token) => Arc::new(TokenBackend {
                    issuer: config.issuer.clone(),
                    audience: token.audience.clone(),
                    keys: keys.clone(),
                }),
                BackendConfig::AwsSts(aws) => Arc::new(
                    AwsStsBackend::new(aws.clone(), clock.clone())
                        .await
                        .with_context(|| format!("backends.{name}: AWS credentials"))?,
                ),
                BackendConfig::Postgres(db) => {
                    Arc::new(PostgresBackend::new(db).with_context(|| format!("backend {name}"))?)
                }
                BackendConfig::Mysql(db) => {
                    Arc::new(MysqlBackend::new(db).with_context(|| format!("backend {name}"))?)
                }
                BackendConfig::Net(_) => Arc::new(NetBackend),
                BackendConfig::Http(_) => Arc::new(HttpBackend),
                BackendConfig::OAuthResource(_) => {
                    Arc::new(crate::backends::oauth::OAuthResourceBackend)
                }
            };
            backends.insert(name.clone(), backend);
        }
        let injection = crate::injection::Sessions::new(&config);
        let dpop =
            crate::dpop::Dpop::new(config.oauth.issuer.clone(), config.oauth.dpop_nonce, &kek);
        let app = Arc::new(App {
            policy_in_force: PolicyInForce::new(policy, &kek),
            injection,
            dpop,
            config,
            store,
            kek,
            keys,
            backends,
            admin_token_hash,
            metrics: Metrics::new(),
            started_at: clock.now(),
            last_checkpoint: std::sync::atomic::AtomicI64::new(0),
            witness: std::sync::OnceLock::new(),
            clock,
            runs: RunCache::new(RUN_CACHE_MAX),
            held: HeldCache::new(HELD_CACHE_MAX),
            revocation_wakeup: tokio::sync::Notify::new(),
            approvals_changed: tokio::sync::watch::Sender::new(0),
            webhook_wakeup: tokio::sync::Notify::new(),
            instance,
            stopping: tokio::sync::watch::Sender::new(false),
            health: crate::health::Health::default(),
        });
        Ok(app)
    }

    /// The policy set in force; requests hold their snapshot for their whole life.
    pub fn policy(&self) -> Arc<PolicyEngine> {
        self.policy_in_force.engine()
    }

    /// The HTTP client for the audit witness, if one is configured (built once).
    pub fn witness_client(&self) -> Option<&reqwest::Client> {
        self.witness
            .get_or_init(|| {
                self.config.audit.witness_url.as_ref()?;
                crate::http_client::system_roots()
                    .map_err(
                        |e| tracing::error!(error = %e, "cannot build the witness HTTP client"),
                    )
                    .ok()
            })
            .as_ref()
    }
}

/// Facts that never change once written, by key, bounded: when full it starts
/// over. What is cached must be immutable in the store, so an entry can be stale
/// only in what it does not hold.
pub struct FactCache<V> {
    map: RwLock<HashMap<String, V>>,
    max: usize,
}

impl<V: Clone> FactCache<V> {
    pub fn new(max: usize) -> Self {
        FactCache {
            map: RwLock::new(HashMap::new()),
            max,
        }
    }

    pub fn get(&self, key: &str) -> Option<V> {
        self.map.read().ok()?.get(key).cloned()
    }

    pub fn insert(&self, key: String, value: V) {
        let full = match self.map.write() {
            Ok(mut m) => {
                let full = (m.len() >= self.max).then(|| std::mem::take(&mut *m));
                m.insert(key, value);
                full
            }
            Err(_) => None,
        };
        // The full map is dropped here, after the lock is released: freeing
        // `max` entries takes milliseconds, and every reader and issuer
        // would wait for it.
        drop(full);
    }
}

/// Run-token lookups, cached by token hash.
///
/// Only the immutable attributes of a run are trusted from the cache (user, task,
/// runtime, labels, expiry). Whether the run has *ended* is always decided by the
/// store, inside the transaction that records a capability or consumes a use, so a
/// stale entry can never let an ended run obtain anything.
pub type RunCache = FactCache<Arc<RunRecord>>;

const RUN_CACHE_MAX: usize = 100_000;

/// Capabilities as issued, with their runs, by capability id: what an exchange
/// compares a token's claims with and re-decides under the policy in force
/// ([`crate::grant::reauthorize`]). Only immutable fields are held; whether a capability
/// is revoked, expired or out of uses, or its run ended, is decided by the store
/// when the exchange takes a use. Filled at issuance and on a miss.
pub type HeldCache = FactCache<(Arc<HeldCapability>, Arc<RunRecord>)>;

const HELD_CACHE_MAX: usize = 50_000;
