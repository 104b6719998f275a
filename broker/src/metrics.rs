//! Prometheus metrics for `/metrics`.
//!
//! Counters by outcome for the decisions that matter (capabilities, exchanges,
//! HTTP statuses), a latency histogram, and the writer's commit/batch counters,
//! which show how much group commit is saving.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::fmt::Write;
use std::sync::atomic::Ordering;

type Labels = Vec<(&'static str, String)>;

pub struct Metrics {
    registry: Registry,
    http: Family<Labels, Counter>,
    capabilities: Family<Labels, Counter>,
    exchanges: Family<Labels, Counter>,
    background: Family<Labels, Counter>,
    revocations: Family<Labels, Counter>,
    revocations_pending: Gauge,
    revocations_stuck: Gauge,
    latency: Histogram,
    egress: Family<Labels, Counter>,
    egress_bytes: Family<Labels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tessera");
        let http = Family::<Labels, Counter>::default();
        let capabilities = Family::<Labels, Counter>::default();
        let exchanges = Family::<Labels, Counter>::default();
        let background = Family::<Labels, Counter>::default();
        let revocations = Family::<Labels, Counter>::default();
        let revocations_pending = Gauge::default();
        let revocations_stuck = Gauge::default();
        let latency = Histogram::new(exponential_buckets(0.0001, 2.0, 16));
        let egress = Family::<Labels, Counter>::default();
        let egress_bytes = Family::<Labels, Counter>::default();
        registry.register(
            "egress_decisions",
            "Egress gateway decisions by decision and reason",
            egress.clone(),
        );
        registry.register(
            "egress_bytes",
            "Bytes relayed by the egress gateway, by direction",
            egress_bytes.clone(),
        );
        registry.register("http_requests", "HTTP responses by status", http.clone());
        registry.register(
            "capabilities",
            "Capability decisions by outcome",
            capabilities.clone(),
        );
        registry.register("exchanges", "Exchanges by outcome", exchanges.clone());
        registry.register(
            "background",
            "Policy reloads and expiry sweeps by task and outcome",
            background.clone(),
        );
        registry.register(
            "revocations",
            "Downstream revocation attempts by outcome",
            revocations.clone(),
        );
        registry.register(
            "revocations_pending",
            "Downstream revocations not yet confirmed",
            revocations_pending.clone(),
        );
        registry.register(
            "revocations_stuck",
            "Downstream revocations that failed 3 or more times",
            revocations_stuck.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency",
            latency.clone(),
        );
        Self {
            registry,
            http,
            capabilities,
            exchanges,
            background,
            revocations,
            revocations_pending,
            revocations_stuck,
            latency,
            egress,
            egress_bytes,
        }
    }

    pub fn http_response(&self, status: u16, seconds: f64) {
        self.http
            .get_or_create(&vec![("status", status.to_string())])
            .inc();
        self.latency.observe(seconds);
    }

    pub fn capability(&self, outcome: &'static str) {
        self.capabilities
            .get_or_create(&vec![("outcome", outcome.to_owned())])
            .inc();
    }

    /// One egress decision: `allow` or `deny`, with the reason (`policy`,
    /// `address`, `sni`, `limit`, `dns`, …).
    pub fn egress(&self, decision: &'static str, reason: &str) {
        self.egress
            .get_or_create(&vec![
                ("decision", decision.to_owned()),
                ("reason", reason.to_owned()),
            ])
            .inc();
    }

    /// Bytes relayed, `direction` = up (to the destination) or down.
    pub fn egress_bytes(&self, direction: &'static str, bytes: u64) {
        self.egress_bytes
            .get_or_create(&vec![("direction", direction.to_owned())])
            .inc_by(bytes);
    }

    pub fn exchange(&self, outcome: &'static str) {
        self.exchanges
            .get_or_create(&vec![("outcome", outcome.to_owned())])
            .inc();
    }

    /// A background task's outcome: `task` = policy_reload | expiry_sweep.
    pub fn background(&self, task: &'static str, outcome: &'static str) {
        self.background
            .get_or_create(&vec![
                ("task", task.to_owned()),
                ("outcome", outcome.to_owned()),
            ])
            .inc();
    }

    /// One downstream revocation attempt: `revoked` or `failed`.
    pub fn revocation(&self, outcome: &'static str) {
        self.revocations
            .get_or_create(&vec![("outcome", outcome.to_owned())])
            .inc();
    }

    pub fn revocations_outstanding(&self, pending: i64, stuck: i64) {
        self.revocations_pending.set(pending);
        self.revocations_stuck.set(stuck);
    }

    /// The text exposition, with the writer's counters appended.
    pub fn render(&self, writer: &crate::store::writer::WriterStats) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        // `encode` ends with "# EOF"; the writer counters go before it.
        if let Some(stripped) = out.strip_suffix("# EOF\n") {
            out.truncate(stripped.len());
        }
        let _ = write!(
            out,
            "# HELP tessera_store_commits Store transactions committed by the writer.\n\
             # TYPE tessera_store_commits counter\ntessera_store_commits_total {}\n\
             # HELP tessera_store_ops Writes applied by the writer (ops per commit = group commit).\n\
             # TYPE tessera_store_ops counter\ntessera_store_ops_total {}\n\
             # HELP tessera_store_failed_batches Writer batches that failed.\n\
             # TYPE tessera_store_failed_batches counter\ntessera_store_failed_batches_total {}\n# EOF\n",
            writer.commits.load(Ordering::Relaxed),
            writer.ops.load(Ordering::Relaxed),
            writer.failed_batches.load(Ordering::Relaxed),
        );
        out
    }
}
