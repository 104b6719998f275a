//! The revocation worker: drives the outbox (`store::revocations`) to completion.
//!
//! Why a worker and not a call in the request: the downstream system may be down
//! or slow, and a run end must be durable and prompt regardless. The request
//! commits the revocation (lease revoked + outbox row) and wakes this worker; the
//! worker claims due rows, asks each backend to remove its objects in one batch,
//! and records each outcome (audited). Failures are retried with exponential
//! backoff (1 s, 2 s, 4 s … capped at 5 min, with jitter) for as long as it takes;
//! after [`revocations::STUCK_AFTER_ATTEMPTS`] failures a row counts as stuck and shows in
//! `tessera leases list --stuck` and the `tessera_revocations_stuck` metric.

use crate::app::App;
use crate::backends::Revocation;
use crate::store::revocations::{
    self, ClaimRevocations, ExpireLeases, FinishRevocations, Job, Outcome,
};
use crate::store::StoreError;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Rows claimed per pass (one backend call per backend per pass).
const CLAIM_BATCH: i64 = 2000;
/// How long a claim keeps other workers off a row: longer than any backend call.
const CLAIM_SECS: i64 = 120;
/// Longest wait between attempts.
const MAX_BACKOFF_SECS: i64 = 300;
/// How often the worker looks even when nobody woke it.
const IDLE_TICK: Duration = Duration::from_secs(1);

/// Seconds to wait after the `attempts`-th failure: 2^(attempts-1), capped, ±25 %.
pub fn backoff_secs(attempts: i64) -> i64 {
    let base = 1i64 << (attempts - 1).clamp(0, 16);
    let base = base.min(MAX_BACKOFF_SECS);
    let jitter = (crate::ids::random_bytes::<1>()[0] as i64 * base) / (4 * 255);
    (base - base / 8 + jitter).max(1)
}

/// One pass: claims due rows and settles them. Returns how many were settled
/// successfully. Also used by tests, which run no background tasks.
pub async fn run_once(app: &App) -> Result<usize, StoreError> {
    let mut done = 0;
    if !revocations::any_due(&app.store, app.clock.now()).await? {
        return Ok(done);
    }
    loop {
        let started = std::time::Instant::now();
        let jobs = app
            .store
            .writer()
            .submit(ClaimRevocations {
                limit: CLAIM_BATCH,
                claim_secs: CLAIM_SECS,
            })
            .await?;
        if jobs.is_empty() {
            return Ok(done);
        }
        let full = jobs.len() as i64 == CLAIM_BATCH;
        let claimed = started.elapsed();
        let results = settle(app, jobs).await;
        let settled = started.elapsed();
        done += results
            .iter()
            .filter(|(_, o)| matches!(o, Outcome::Done))
            .count();
        for (_, o) in &results {
            app.metrics.revocation(match o {
                Outcome::Done => "revoked",
                Outcome::Failed { .. } => "failed",
            });
        }
        let count = results.len();
        app.store
            .writer()
            .submit(FinishRevocations { results })
            .await?;
        tracing::debug!(jobs = count, ?claimed, ?settled, finished = ?started.elapsed(), "revocation pass");
        if !full {
            return Ok(done);
        }
    }
}

/// Calls each backend once with all of its refs, concurrently across backends.
async fn settle(app: &App, jobs: Vec<Job>) -> Vec<(Job, Outcome)> {
    let mut by_backend: BTreeMap<String, Vec<Job>> = BTreeMap::new();
    for job in jobs {
        by_backend.entry(job.backend.clone()).or_default().push(job);
    }
    let now = app.clock.now();
    let calls = by_backend.into_iter().map(|(name, jobs)| async move {
        let leases: Vec<Revocation<'_>> = jobs
            .iter()
            .map(|j| Revocation {
                downstream_ref: &j.downstream_ref,
                run_id: &j.run_id,
                reason: &j.reason,
            })
            .collect();
        let result = match app.backends.get(&name) {
            Some(backend) => backend.revoke_leases(&leases).await.map_err(|e| e.to_string()),
            None => Err(format!("backend {name} is not configured")),
        };
        drop(leases);
        if let Err(e) = &result {
            tracing::warn!(backend = %name, leases = jobs.len(), error = %e, "downstream revocation failed; will retry");
        }
        jobs.into_iter()
            .map(|job| {
                let outcome = match &result {
                    Ok(()) => Outcome::Done,
                    Err(e) => Outcome::Failed {
                        error: e.chars().take(300).collect(),
                        retry_at: now + backoff_secs(job.attempts),
                    },
                };
                (job, outcome)
            })
            .collect::<Vec<_>>()
    });
    futures_util::future::join_all(calls)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// Revokes live leases past their expiry (the reaper) and queues their removal.
pub async fn reap_expired_leases(app: &App) -> Result<u64, StoreError> {
    let n = app.store.writer().submit(ExpireLeases).await?;
    if n > 0 {
        app.revocation_wakeup.notify_one();
    }
    Ok(n)
}

/// Runs until the process exits: a pass whenever woken, and at least every second.
pub async fn run(app: Arc<App>) {
    loop {
        tokio::select! {
            _ = app.revocation_wakeup.notified() => {}
            _ = tokio::time::sleep(IDLE_TICK) => {}
        }
        if let Err(e) = run_once(&app).await {
            tracing::warn!(error = %e, "revocation pass failed; will retry");
        }
        match revocations::counts(&app.store).await {
            Ok((pending, stuck)) => app.metrics.revocations_outstanding(pending, stuck),
            Err(e) => tracing::debug!(error = %e, "cannot count revocations"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        for _ in 0..100 {
            let first = backoff_secs(1);
            assert!((1..=2).contains(&first), "{first}");
            let fifth = backoff_secs(5);
            assert!((14..=20).contains(&fifth), "{fifth}");
            let late = backoff_secs(40);
            assert!(
                (MAX_BACKOFF_SECS * 7 / 8..=MAX_BACKOFF_SECS * 9 / 8 + 1).contains(&late),
                "{late}"
            );
        }
    }
}
