//! Prometheus metrics for `/metrics`.
//!
//! Counters by outcome for the decisions that matter (capabilities, exchanges,
//! HTTP statuses), a latency histogram, and the writer's commit/batch counters,
//! which show how much group commit is saving.
//!
//! The counters a request touches (its HTTP status; a capability's or an
//! exchange's outcome) are resolved once per label value and then incremented
//! directly: the hot path builds no label vector and takes no lock. Each is
//! resolved on first use, so `/metrics` lists a series only once it has been
//! counted, exactly as a plain family does.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

type Labels = Vec<(&'static str, String)>;

/// Capability outcomes counted by the API (`approval_requested`, `denied`,
/// `issued`, `rate_limited`, `refused`), the likeliest first.
const CAPABILITY_OUTCOMES: &[&str] = &[
    "issued",
    "denied",
    "refused",
    "rate_limited",
    "approval_requested",
];

/// Exchange outcomes known in advance, the likeliest first (a backend's error
/// code, also counted, takes the family's own lookup).
const EXCHANGE_OUTCOMES: &[&str] = &[
    "ok",
    "invalid_token",
    "invalid_dpop_proof",
    "uses_exhausted",
    "capability_unknown",
    "capability_revoked",
    "capability_expired",
    "capability_lapsed",
    "run_expired",
    "run_ended",
    "claims_mismatch",
    "policy_changed",
    "backend_gone",
    "revoked_during_issue",
];

/// Every status code a response can have (`http::StatusCode` is 100–999;
/// the table covers 100–599, anything else takes the family's lookup).
const STATUS_FIRST: u16 = 100;
const STATUS_COUNT: usize = 500;

/// A counter family with one label whose values are (mostly) known in
/// advance: each known value's counter is looked up in the family once, on
/// its first use, and kept.
struct Resolved {
    family: Family<Labels, Counter>,
    label: &'static str,
    handles: Box<[OnceLock<Counter>]>,
}

impl Resolved {
    fn new(label: &'static str, slots: usize) -> Self {
        Self {
            family: Family::default(),
            label,
            handles: (0..slots).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Adds one to the series `label=value`, `slot` being `value`'s place in
    /// the table (`None`: not in it).
    fn inc(&self, slot: Option<usize>, value: impl FnOnce() -> String) {
        match slot.and_then(|i| self.handles.get(i)) {
            Some(handle) => handle
                .get_or_init(|| {
                    self.family
                        .get_or_create(&vec![(self.label, value())])
                        .clone()
                })
                .inc(),
            None => self
                .family
                .get_or_create(&vec![(self.label, value())])
                .inc(),
        };
    }

    /// For a table of `&'static str` values.
    fn inc_named(&self, values: &[&str], value: &str) {
        let slot = values.iter().position(|v| *v == value);
        self.inc(slot, || value.to_owned());
    }
}

pub struct Metrics {
    registry: Registry,
    http: Resolved,
    capabilities: Resolved,
    exchanges: Resolved,
    background: Family<Labels, Counter>,
    revocations: Family<Labels, Counter>,
    revocations_pending: Gauge,
    revocations_stuck: Gauge,
    latency: Histogram,
    egress: Family<Labels, Counter>,
    egress_bytes: Family<Labels, Counter>,
    retention: Family<Labels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tessera");
        let http = Resolved::new("status", STATUS_COUNT);
        let capabilities = Resolved::new("outcome", CAPABILITY_OUTCOMES.len());
        let exchanges = Resolved::new("outcome", EXCHANGE_OUTCOMES.len());
        let background = Family::<Labels, Counter>::default();
        let revocations = Family::<Labels, Counter>::default();
        let revocations_pending = Gauge::default();
        let revocations_stuck = Gauge::default();
        let latency = Histogram::new(exponential_buckets(0.0001, 2.0, 16));
        let egress = Family::<Labels, Counter>::default();
        let egress_bytes = Family::<Labels, Counter>::default();
        let retention = Family::<Labels, Counter>::default();
        registry.register(
            "retention_pruned",
            "Rows deleted by retention, by kind (runs, capabilities, leases, revocations, approvals, audit)",
            retention.clone(),
        );
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
        registry.register(
            "http_requests",
            "HTTP responses by status",
            http.family.clone(),
        );
        registry.register(
            "capabilities",
            "Capability decisions by outcome",
            capabilities.family.clone(),
        );
        registry.register(
            "exchanges",
            "Exchanges by outcome",
            exchanges.family.clone(),
        );
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
            retention,
        }
    }

    /// Rows retention deleted: `kind` = runs | capabilities | leases |
    /// revocations | approvals | audit.
    pub fn retention_pruned(&self, kind: &'static str, rows: u64) {
        if rows > 0 {
            self.retention
                .get_or_create(&vec![("kind", kind.to_owned())])
                .inc_by(rows);
        }
    }

    pub fn http_response(&self, status: u16, seconds: f64) {
        let slot = status
            .checked_sub(STATUS_FIRST)
            .map(usize::from)
            .filter(|i| *i < STATUS_COUNT);
        self.http.inc(slot, || status.to_string());
        self.latency.observe(seconds);
    }

    pub fn capability(&self, outcome: &'static str) {
        self.capabilities.inc_named(CAPABILITY_OUTCOMES, outcome);
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
        self.exchanges.inc_named(EXCHANGE_OUTCOMES, outcome);
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

    /// The text exposition, with the writer's counters appended and whether
    /// its last batch committed (`tessera_store_writable`, for alerts).
    pub fn render(&self, writer: &crate::store::writer::WriterStats, writable: bool) -> String {
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
             # TYPE tessera_store_failed_batches counter\ntessera_store_failed_batches_total {}\n\
             # HELP tessera_store_writable 1 unless the writer's last batch failed on the store (full disk, read-only, unreachable).\n\
             # TYPE tessera_store_writable gauge\ntessera_store_writable {}\n\
             # HELP tessera_audit_head_held_seconds Time this broker's committed batches held the audit chain head (summed over replicas per second: how busy the cluster's one serialisation point is).\n\
             # TYPE tessera_audit_head_held_seconds counter\ntessera_audit_head_held_seconds_total {:.6}\n\
             # HELP tessera_store_writer_nice The store writer thread's nice value: on SQLite below the request threads' when the system allows raising it (CAP_SYS_NICE or RLIMIT_NICE), theirs when not or on PostgreSQL.\n\
             # TYPE tessera_store_writer_nice gauge\ntessera_store_writer_nice {}\n# EOF\n",
            writer.commits.load(Ordering::Relaxed),
            writer.ops.load(Ordering::Relaxed),
            writer.failed_batches.load(Ordering::Relaxed),
            u8::from(writable),
            writer.head_held_us.load(Ordering::Relaxed) as f64 / 1e6,
            writer.writer_nice.load(Ordering::Relaxed),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUSES: &[u16] = &[200, 200, 201, 404, 200, 100, 599, 600, 999, 429];
    const CAPABILITIES: &[&str] = &["issued", "issued", "denied", "refused", "issued"];
    // `backend_unavailable` is not in the table: the family's own lookup.
    const EXCHANGES: &[&str] = &["ok", "backend_unavailable", "ok", "uses_exhausted"];

    /// The lines of the three request families in `text`, sorted (a family
    /// lists its series in hash order).
    fn request_lines(text: &str) -> Vec<String> {
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| {
                [
                    "tessera_http_requests",
                    "tessera_capabilities",
                    "tessera_exchanges",
                ]
                .iter()
                .any(|m| l.contains(m))
            })
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    }

    /// The same counts through plain families, each series looked up by its
    /// label vector every time (what `/metrics` rendered before the handles).
    fn reference() -> String {
        let mut registry = Registry::with_prefix("tessera");
        let http = Family::<Labels, Counter>::default();
        let capabilities = Family::<Labels, Counter>::default();
        let exchanges = Family::<Labels, Counter>::default();
        registry.register("http_requests", "HTTP responses by status", http.clone());
        registry.register(
            "capabilities",
            "Capability decisions by outcome",
            capabilities.clone(),
        );
        registry.register("exchanges", "Exchanges by outcome", exchanges.clone());
        for s in STATUSES {
            http.get_or_create(&vec![("status", s.to_string())]).inc();
        }
        for o in CAPABILITIES {
            capabilities
                .get_or_create(&vec![("outcome", (*o).to_owned())])
                .inc();
        }
        for o in EXCHANGES {
            exchanges
                .get_or_create(&vec![("outcome", (*o).to_owned())])
                .inc();
        }
        let mut out = String::new();
        encode(&mut out, &registry).expect("encode");
        out
    }

    #[test]
    fn resolved_counters_render_as_plain_families_did() {
        let m = Metrics::new();
        for s in STATUSES {
            m.http_response(*s, 0.001);
        }
        for o in CAPABILITIES {
            m.capability(o);
        }
        for o in EXCHANGES {
            m.exchange(o);
        }
        let text = m.render(&crate::store::writer::WriterStats::default(), true);
        assert!(text.contains("tessera_store_writable 1\n"));
        let got = request_lines(&text);
        assert_eq!(got, request_lines(&reference()));
        // Spot checks, and a series never counted is not listed.
        for line in [
            "tessera_http_requests_total{status=\"200\"} 3",
            "tessera_http_requests_total{status=\"999\"} 1",
            "tessera_capabilities_total{outcome=\"issued\"} 3",
            "tessera_exchanges_total{outcome=\"backend_unavailable\"} 1",
            "tessera_exchanges_total{outcome=\"ok\"} 2",
        ] {
            assert!(got.iter().any(|l| l == line), "{line} in {got:#?}");
        }
        assert!(!text.contains("rate_limited"), "{text}");
        assert!(!text.contains("invalid_token"), "{text}");
        assert!(!text.contains("status=\"500\""), "{text}");
        assert!(text.contains("tessera_http_request_duration_seconds_count 10"));
    }

    #[test]
    fn the_tables_hold_each_value_once() {
        for table in [CAPABILITY_OUTCOMES, EXCHANGE_OUTCOMES] {
            for (i, v) in table.iter().enumerate() {
                assert_eq!(table.iter().position(|w| w == v), Some(i), "{v}");
            }
        }
    }
}
