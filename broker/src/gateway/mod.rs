//! The egress gateway (issue 17): a forward proxy that lets a run's tool reach
//! only the destinations policy permits, resolves names itself and refuses
//! non-public addresses, records every connection in the audit log, and can end
//! a run that tries a forbidden destination (docs/gateway.md).
//!
//! Why a listener of `tessera serve` rather than a process of its own: every
//! connection needs the run-token lookup, the policy in force, the rate buckets
//! and the audit chain, and ending a run must revoke everything it holds; in the
//! broker's process all of that is a function call and one group-committed
//! write, where a separate gateway would need an API round trip per connection
//! and a second copy of policy that could disagree with the first.
//!
//! - [`proxy`]: authentication, the destination, CONNECT and absolute-form HTTP;
//! - [`decide`]: policy, DNS, addresses, limits, the audited decision;
//! - [`sni`]: the ClientHello's server name, read before anything goes upstream;
//! - [`relay`], [`body`]: counted, bounded byte moving; [`traffic`]: per-run state;
//! - [`addresses`]: the ranges a sandbox must never be connected to; [`dns`].

pub mod addresses;
pub mod answer;
pub mod body;
pub mod decide;
pub mod dns;
pub mod inject;
pub mod proxy;
pub mod refusal;
pub mod relay;
pub mod sni;
pub mod traffic;

use crate::app::AppState;
use crate::config::GatewayConfig;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

pub struct Gateway {
    pub app: AppState,
    pub config: GatewayConfig,
    pub resolver: dns::Resolver,
    pub traffic: traffic::Traffic,
    /// The TLS client of injected requests (verifies the real API).
    pub upstream_tls: Arc<rustls::ClientConfig>,
    /// The `aws-sts` backends SigV4 rules sign with, by name.
    pub aws: std::collections::BTreeMap<String, Arc<crate::backends::aws::AwsStsBackend>>,
    /// MiB of request bodies held in memory to be signed, across all runs
    /// (`inject::intercept::SIGNED_BODIES_MIB`).
    pub signed_bodies: Arc<Semaphore>,
}

impl Gateway {
    pub async fn new(app: AppState, config: GatewayConfig) -> anyhow::Result<Arc<Gateway>> {
        use anyhow::Context as _;
        let resolver = dns::Resolver::new(&config.nameservers, config.connect_timeout)?;
        let mut aws = std::collections::BTreeMap::new();
        for (_, rule) in &app.injection.rules {
            if let crate::backends::http::Auth::SigV4 { backend, .. } = &rule.auth {
                if let Some(crate::config::BackendConfig::AwsSts(cfg)) =
                    app.config.backends.get(backend)
                {
                    let sts =
                        crate::backends::aws::AwsStsBackend::new(cfg.clone(), app.clock.clone())
                            .await
                            .with_context(|| format!("backends.{backend}: AWS credentials"))?;
                    aws.insert(backend.clone(), Arc::new(sts));
                }
            }
        }
        let upstream_tls = if app.injection.enabled() {
            inject::upstream::client_config(config.upstream_roots.as_deref())
                .map_err(anyhow::Error::msg)?
        } else {
            // Never used without a rule; an empty trust store verifies nothing.
            inject::upstream::client_config(config.upstream_roots.as_deref())
                .unwrap_or_else(|_| empty_client_config())
        };
        Ok(Arc::new(Gateway {
            app,
            config,
            resolver,
            traffic: traffic::Traffic::default(),
            upstream_tls,
            aws,
            signed_bodies: Arc::new(Semaphore::new(inject::intercept::SIGNED_BODIES_MIB)),
        }))
    }

    /// Every second, cuts the open connections of runs that ended or expired —
    /// by their runtime, an admin, the sweeper or another replica — so a
    /// tunnel opened before the end does not outlive it.
    async fn cut_ended_runs(self: Arc<Self>) {
        let mut stopping = self.app.stopping.subscribe();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stopping.wait_for(|s| *s) => return,
            }
            let now = self.app.clock.now();
            // Expired runs' injection sessions go here; ended ones where they
            // end (the API, the gateway) or at their first refused use.
            self.app.injection.forget_expired(now);
            for (run_id, traffic) in self.traffic.open_runs() {
                let ended = traffic.expires_at() <= now
                    || matches!(
                        crate::store::runs::ended_at(&self.app.store, &run_id).await,
                        Ok(Some(Some(_)))
                    );
                if ended {
                    traffic.cut_all();
                }
            }
        }
    }

    /// Accepts proxy connections on `listener` until the broker stops.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        let slots = Arc::new(Semaphore::new(self.config.max_connections as usize));
        let mut stopping = self.app.stopping.subscribe();
        tokio::spawn(self.clone().cut_ended_runs());
        // The address bound, not the one configured: `127.0.0.1:0` is a port
        // the system chose.
        let listen = listener
            .local_addr()
            .map_or_else(|_| self.config.listen.to_string(), |a| a.to_string());
        tracing::info!(%listen, "egress gateway listening");
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = stopping.wait_for(|s| *s) => return,
            };
            let (tcp, _) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "gateway accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                drop(tcp); // over gateway.max_connections
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let gw = self.clone();
            // A CONNECT takes the slot into its tunnel, which outlives the HTTP
            // connection: gateway.max_connections bounds tunnels too.
            let slot: proxy::Slot = Arc::new(std::sync::Mutex::new(Some(slot)));
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    proxy::handle(gw.clone(), slot.clone(), req)
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(10))
                    .serve_connection(TokioIo::new(tcp), service)
                    .with_upgrades();
                let _ = conn.await;
            });
        }
    }
}

/// A TLS client that trusts nothing (no injection rule is configured).
fn empty_client_config() -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| {
            b.with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
        });
    match config {
        Ok(c) => Arc::new(c),
        Err(_) => unreachable!("ring supports the default protocol versions"),
    }
}
