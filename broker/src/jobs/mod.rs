//! Background work of a serving broker, started together by [`start`] and
//! stopped by [`Running::stop`].
//!
//! | job | what | how often |
//! |---|---|---|
//! | [`revocation`] | drives the downstream-removal outbox; its heartbeat keeps this instance's claims | woken by every revocation, else every second |
//! | [`expiry`] | ends runs past their expiry; revokes capabilities whose hold lapsed and leases past theirs | `expiry_sweep_interval` |
//! | [`keys`] | picks up signing keys another replica rotated | every 5 s |
//! | [`policy`] | reloads the policy on SIGHUP and, with `policy_watch_interval`, when its files change | on signal / interval |
//! | audit checkpoints (`audit::checkpoint`) | signs the head and hands it to the witnesses | `[audit]` settings |
//! | [`webhooks`] | announces pending approvals from the outbox | woken by every new approval, else every second |
//! | [`retention`] | deletes ended runs (and exported audit rows) past their retention | `retention.interval` |
//! | [`run_index`] | indexes newly issued capabilities by run (`store::run_index`; SQLite) | every 250 ms |
//!
//! Why one place: each job is a loop that must survive a store outage (log,
//! retry next tick) and some must finish or hand back their work at shutdown;
//! listing them together keeps the serve path a list of calls, and tests run
//! no jobs — they call `revocation::run_once` and `expiry::sweep` themselves.

pub mod checkpoints;
pub mod expiry;
pub mod keys;
pub mod policy;
pub mod retention;
pub mod revocation;
pub mod run_index;
pub mod webhooks;

use crate::app::AppState;
use std::time::Instant;
use tokio::task::JoinHandle;

/// The jobs whose end a shutdown waits for.
pub struct Running {
    app: AppState,
    revocation_worker: JoinHandle<()>,
    heartbeat: JoinHandle<()>,
    checkpoints: JoinHandle<()>,
}

/// Starts every background job of a serving broker.
pub fn start(app: &AppState) -> Running {
    start_replica_sync(app);
    tokio::spawn(expiry::run(app.clone(), app.config.expiry_sweep_interval));
    tokio::spawn(policy::reload_on_sighup(app.clone()));
    if let Some(every) = app.config.policy_watch_interval {
        tokio::spawn(crate::policy_reload::watch(app.clone(), every));
    }
    tokio::spawn(warn_unsafe_defaults(app.clone()));
    tokio::spawn(checkpoints::run_witness(app.clone()));
    tokio::spawn(webhooks::run(app.clone()));
    tokio::spawn(retention::run(app.clone()));
    if crate::store::run_index::trails(app.store.dialect()) {
        tokio::spawn(run_index::run(app.clone()));
    }
    Running {
        app: app.clone(),
        revocation_worker: tokio::spawn(revocation::run(app.clone())),
        heartbeat: tokio::spawn(revocation::heartbeat(app.clone())),
        checkpoints: tokio::spawn(checkpoints::run(app.clone())),
    }
}

/// The jobs through which this broker learns what other replicas on its
/// store did: rotated keys and published policy versions.
pub fn start_replica_sync(app: &AppState) {
    tokio::spawn(keys::refresh(app.clone()));
    tokio::spawn(policy::sync(app.clone()));
}

impl Running {
    /// After the listener stopped: work claimed by this process is finished or
    /// handed back, and the last rows get a checkpoint of their own, all by
    /// `deadline`. A revocation pass in progress gets two thirds of what is
    /// left; its claims are released either way.
    pub async fn stop(self, deadline: Instant) {
        let left = || deadline.saturating_duration_since(Instant::now());
        let revocations = revocation::stop(
            &self.app,
            self.revocation_worker,
            self.heartbeat,
            left() * 2 / 3,
        );
        // Releasing the claims is one write; a frozen store must not hold the
        // exit past the deadline (unreleased claims lapse on their own).
        if tokio::time::timeout(left(), revocations).await.is_err() {
            tracing::warn!(
                "revocation claims not released by the shutdown deadline; they lapse on their own"
            );
        }
        let grace = left();
        if tokio::time::timeout(grace, self.checkpoints).await.is_err() {
            tracing::warn!(?grace, "the final audit checkpoint did not finish in time");
        }
    }
}

/// Logs each downstream default that lets a throw-away credential do more
/// than its grant (`tessera backends check NAME` prints the same, with the fix).
async fn warn_unsafe_defaults(app: AppState) {
    for (name, backend) in &app.backends {
        match backend.unsafe_defaults().await {
            Ok(findings) => {
                for f in findings {
                    tracing::warn!(backend = %name, finding = f.id, what = %f.what, fix = %f.fix, "unsafe downstream default");
                }
            }
            Err(e) => {
                tracing::warn!(backend = %name, error = %e, "cannot check the backend's server defaults")
            }
        }
    }
}
