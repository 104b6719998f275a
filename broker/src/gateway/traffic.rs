//! What each run is doing through the gateway: its open connections, the bytes
//! it sent and received, and a signal that cuts all of them at once; and each
//! connection's own record, which writes its `egress.closed` audit row when the
//! connection is gone, whatever ended it; and an injected exchange's
//! [`Tally`], which writes its `egress.response` row when both bodies are done.
//!
//! Why in memory: the limits are the gateway process's (docs/gateway.md says so);
//! the audit rows, written through the store, are the durable account.

use crate::app::AppState;
use crate::audit::{events, AuditEvent};
use crate::store::writer::AppendAudit;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Which way bytes go: from the tool (`Up`) or to it (`Down`).
#[derive(Clone, Copy)]
pub enum Direction {
    Up,
    Down,
}

/// One run's traffic through this gateway.
pub struct RunTraffic {
    open: AtomicU32,
    up: AtomicU64,
    down: AtomicU64,
    expires_at: i64,
    /// Set to true when the run must lose every connection (it ended).
    cut: tokio::sync::watch::Sender<bool>,
}

impl RunTraffic {
    /// A receiver that fires when the run's connections are cut.
    pub fn cut_signal(&self) -> tokio::sync::watch::Receiver<bool> {
        self.cut.subscribe()
    }

    /// When the run expires (Unix seconds).
    pub fn expires_at(&self) -> i64 {
        self.expires_at
    }

    /// Cuts every open connection of the run.
    pub fn cut_all(&self) {
        self.cut.send_replace(true);
    }
}

/// Every run's traffic, by run id.
#[derive(Default)]
pub struct Traffic {
    runs: Mutex<HashMap<String, Arc<RunTraffic>>>,
    /// The size at which entries of expired runs are next dropped.
    prune_at: std::sync::atomic::AtomicUsize,
}

/// Entries kept before those of expired runs are first dropped.
const PRUNE_ABOVE: usize = 10_000;

impl Traffic {
    pub fn run(&self, run_id: &str, expires_at: i64, now: i64) -> Arc<RunTraffic> {
        let mut runs = match self.runs.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if runs.len() > self.prune_at.load(Ordering::Relaxed).max(PRUNE_ABOVE) {
            runs.retain(|_, r| r.expires_at > now || r.open.load(Ordering::Relaxed) > 0);
            // Not again before the map doubles: a scan per decision would not do.
            self.prune_at.store(runs.len() * 2, Ordering::Relaxed);
        }
        runs.entry(run_id.to_owned())
            .or_insert_with(|| {
                Arc::new(RunTraffic {
                    open: AtomicU32::new(0),
                    up: AtomicU64::new(0),
                    down: AtomicU64::new(0),
                    expires_at,
                    cut: tokio::sync::watch::Sender::new(false),
                })
            })
            .clone()
    }

    /// The runs with connections open now.
    pub fn open_runs(&self) -> Vec<(String, Arc<RunTraffic>)> {
        let runs = match self.runs.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        runs.iter()
            .filter(|(_, r)| r.open.load(Ordering::Relaxed) > 0)
            .map(|(id, r)| (id.clone(), r.clone()))
            .collect()
    }

    /// The run's traffic if it has any here.
    pub fn get(&self, run_id: &str) -> Option<Arc<RunTraffic>> {
        match self.runs.lock() {
            Ok(g) => g.get(run_id).cloned(),
            Err(p) => p.into_inner().get(run_id).cloned(),
        }
    }
}

/// Why a connection was cut rather than closed by either end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    ByteLimit,
    DurationLimit,
    RunEnded,
}

impl Cut {
    pub fn as_str(self) -> &'static str {
        match self {
            Cut::ByteLimit => "byte_limit",
            Cut::DurationLimit => "duration_limit",
            Cut::RunEnded => "run_ended",
        }
    }
}

/// Limits a connection is held to.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_up: u64,
    pub max_down: u64,
}

/// One upstream connection: counted, limited, and audited on drop.
pub struct Conn {
    app: AppState,
    run: Arc<RunTraffic>,
    limits: Limits,
    up: AtomicU64,
    down: AtomicU64,
    started: Instant,
    /// The `egress.allowed` row's fields, reused for `egress.closed`.
    audit: AuditEvent,
    address: String,
    cut: Mutex<Option<Cut>>,
    connected_to: Mutex<Option<SocketAddr>>,
    /// Set once the upstream accepted: only then is a close row written.
    connected: std::sync::atomic::AtomicBool,
}

impl Conn {
    /// Takes one of the run's connection slots, or `None` when all `max` are open.
    pub fn open(
        app: AppState,
        run: Arc<RunTraffic>,
        max_open: u32,
        limits: Limits,
        audit: AuditEvent,
        address: String,
    ) -> Option<Conn> {
        run.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max_open).then_some(n + 1)
            })
            .ok()?;
        Some(Conn {
            app,
            run,
            limits,
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            started: Instant::now(),
            audit,
            address,
            cut: Mutex::new(None),
            connected_to: Mutex::new(None),
            connected: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Whether the run has any byte allowance left at all.
    pub fn exhausted(run: &RunTraffic, limits: Limits) -> bool {
        run.up.load(Ordering::Relaxed) >= limits.max_up
            || run.down.load(Ordering::Relaxed) >= limits.max_down
    }

    /// Counts `n` bytes sent upstream; false when the run is over its limit.
    pub fn add_up(&self, n: usize) -> bool {
        self.up.fetch_add(n as u64, Ordering::Relaxed);
        let total = self.run.up.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        total <= self.limits.max_up
    }

    /// Counts `n` bytes received; false when the run is over its limit.
    pub fn add_down(&self, n: usize) -> bool {
        self.down.fetch_add(n as u64, Ordering::Relaxed);
        let total = self.run.down.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        total <= self.limits.max_down
    }

    /// Records why the connection is being cut (the first reason wins).
    pub fn cut(&self, why: Cut) {
        if let Ok(mut c) = self.cut.lock() {
            c.get_or_insert(why);
        }
    }

    /// The upstream accepted: the connection's close will be audited.
    pub fn connected(&self, address: SocketAddr) {
        self.connected.store(true, Ordering::Release);
        if let Ok(mut a) = self.connected_to.lock() {
            *a = Some(address);
        }
    }

    pub fn run(&self) -> &RunTraffic {
        &self.run
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.run.open.fetch_sub(1, Ordering::AcqRel);
        if !self.connected.load(Ordering::Acquire) {
            return;
        }
        let connected_to = self
            .connected_to
            .lock()
            .ok()
            .and_then(|a| *a)
            .map_or_else(|| self.address.clone(), |a| a.to_string());
        let up = self.up.load(Ordering::Relaxed);
        let down = self.down.load(Ordering::Relaxed);
        self.app.metrics.egress_bytes("up", up);
        self.app.metrics.egress_bytes("down", down);
        let cut = self.cut.lock().ok().and_then(|c| *c);
        let mut ev = self.audit.clone();
        ev.event = events::EGRESS_CLOSED;
        ev.decision = if cut.is_some() { "deny" } else { "allow" };
        ev.reason = Some(cut.map_or("closed", Cut::as_str).to_owned());
        ev.detail = Some(format!(
            "address={connected_to} bytes_up={up} bytes_down={down} duration_ms={}",
            self.started.elapsed().as_millis()
        ));
        let app = self.app.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = app.store.writer().submit(AppendAudit(ev)).await {
                    tracing::error!(error = %e, "cannot audit the end of an egress connection");
                }
            });
        }
    }
}

/// One injected exchange's account: its `egress.response` row (status, bytes,
/// duration) is written when both bodies are done with it.
pub struct Tally {
    app: AppState,
    audit: AuditEvent,
    pub up: AtomicU64,
    pub down: AtomicU64,
    pub status: AtomicU16,
    started: std::time::Instant,
}

impl Tally {
    pub fn new(app: AppState, audit: AuditEvent) -> Tally {
        Tally {
            app,
            audit,
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            status: AtomicU16::new(0),
            started: std::time::Instant::now(),
        }
    }

    pub fn add(&self, direction: Direction, n: usize) {
        match direction {
            Direction::Up => self.up.fetch_add(n as u64, Ordering::Relaxed),
            Direction::Down => self.down.fetch_add(n as u64, Ordering::Relaxed),
        };
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        let status = self.status.load(Ordering::Relaxed);
        let mut ev = self.audit.clone();
        ev.event = events::EGRESS_RESPONSE;
        ev.decision = "allow";
        ev.reason = Some(if status == 0 {
            "no_response".to_owned()
        } else {
            status.to_string()
        });
        ev.detail = Some(format!(
            "{} status={status} bytes_up={} bytes_down={} duration_ms={}",
            self.audit
                .detail
                .as_deref()
                .and_then(|d| d.split(" policies=").next())
                .unwrap_or_default(),
            self.up.load(Ordering::Relaxed),
            self.down.load(Ordering::Relaxed),
            self.started.elapsed().as_millis()
        ));
        let app = self.app.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = app.store.writer().submit(AppendAudit(ev)).await {
                    tracing::error!(error = %e, "cannot audit an injected exchange");
                }
            });
        }
    }
}
