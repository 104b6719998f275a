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
//! A backend that can tell whether its server answers (`Backend::ping`) is
//! asked every second while its removals back off, and they are retried as
//! soon as it answers: removal follows a recovered server within seconds.
//!
//! Claims belong to this process ([`crate::instance`]): each pass first takes
//! over the claims of instances that are certainly gone, claims hold for
//! [`CLAIM_LEASE_SECS`] and are renewed by the heartbeat, and [`stop`] lets a
//! pass in progress finish (bounded) and releases whatever is still held, so a
//! crash or a rollout delays a removal by seconds, not by a claim timeout.

use crate::app::App;
use crate::backends::{BackendError, Revocation};
use crate::instance::CLAIM_LEASE_SECS;
use crate::store::instances::{self, ReleaseClaims};
use crate::store::revocations::{
    self, ClaimRevocations, ExpireLeases, FinishRevocations, Outcome, Removal,
};
use crate::store::StoreError;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Rows claimed per pass (one backend call per backend per pass).
const CLAIM_BATCH: i64 = 2000;
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
    take_over_dead(app).await?;
    if !revocations::any_due(&app.store, app.clock.now()).await? {
        return Ok(done);
    }
    loop {
        crate::failpoint::hit("revocation.before_claim").await;
        let started = std::time::Instant::now();
        let jobs = app
            .store
            .writer()
            .submit(ClaimRevocations {
                instance_id: app.instance.id.clone(),
                limit: CLAIM_BATCH,
                claim_secs: CLAIM_LEASE_SECS,
            })
            .await?;
        if jobs.is_empty() {
            return Ok(done);
        }
        crate::failpoint::hit("revocation.after_claim").await;
        let full = jobs.len() as i64 == CLAIM_BATCH;
        let claimed = started.elapsed();
        let results = settle(app, jobs).await;
        crate::failpoint::hit("revocation.before_finish").await;
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
            .submit(FinishRevocations {
                instance_id: app.instance.id.clone(),
                results,
            })
            .await?;
        tracing::debug!(jobs = count, ?claimed, ?settled, finished = ?started.elapsed(), "revocation pass");
        if !full {
            return Ok(done);
        }
    }
}

/// Releases the claims of every instance that is certainly gone (stopped, stale,
/// or a process on this machine that no longer runs), so they are due now.
async fn take_over_dead(app: &App) -> Result<(), StoreError> {
    let now = app.clock.now();
    let dead: Vec<(String, Option<i64>)> = instances::claimants(&app.store, &app.instance.id)
        .await?
        .into_iter()
        .filter(|(_, row)| row.as_ref().is_none_or(|r| app.instance.sees_dead(r, now)))
        .map(|(id, row)| (id, row.map(|r| r.heartbeat_at)))
        .collect();
    if dead.is_empty() {
        return Ok(());
    }
    let released = app
        .store
        .writer()
        .submit(ReleaseClaims {
            instances: dead.clone(),
            stop: false,
        })
        .await?;
    if released > 0 {
        let ids: Vec<&str> = dead.iter().map(|(id, _)| id.as_str()).collect();
        tracing::info!(instances = ?ids, released, "took over revocations claimed by instances that are gone");
    }
    Ok(())
}

/// Calls each backend once with all of its refs, concurrently across backends.
async fn settle(app: &App, jobs: Vec<Removal>) -> Vec<(Removal, Outcome)> {
    let mut by_backend: BTreeMap<String, Vec<Removal>> = BTreeMap::new();
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
            Some(backend) => backend.revoke_leases(&leases).await,
            None => Err(BackendError::Unavailable(format!("backend {name} is not configured"))),
        };
        drop(leases);
        // Which jobs failed, and why: all of them, or (Partial) only the named refs.
        let failed_ref = |job: &Removal| -> Option<String> {
            match &result {
                Ok(()) => None,
                Err(BackendError::Partial { failed }) => failed
                    .iter()
                    .find(|(r, _)| *r == job.downstream_ref)
                    .map(|(_, why)| why.clone()),
                Err(e) => Some(e.to_string()),
            }
        };
        if let Err(e) = &result {
            tracing::warn!(backend = %name, leases = jobs.len(), error = %e, "downstream revocation failed; will retry");
        }
        jobs.into_iter()
            .map(|job| {
                let outcome = match failed_ref(&job) {
                    None => Outcome::Done,
                    Some(e) => Outcome::Failed {
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

/// Runs until the broker stops: a pass whenever woken, and at least every
/// second. A stop is only seen between passes, so a pass always finishes (or
/// [`stop`] gives up on it after its deadline).
pub async fn run(app: Arc<App>) {
    let mut stopping = app.stopping.subscribe();
    // The first pass runs at once: work left by an instance that died is due.
    let mut first = true;
    let mut answered = BTreeMap::new();
    loop {
        if !std::mem::take(&mut first) {
            tokio::select! {
                _ = app.revocation_wakeup.notified() => {}
                _ = tokio::time::sleep(IDLE_TICK) => {}
                _ = stopping.wait_for(|s| *s) => return,
            }
        }
        if *stopping.borrow() {
            return;
        }
        if let Err(e) = retry_recovered(&app, &mut answered).await {
            tracing::debug!(error = %e, "cannot look for recovered backends");
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

/// Asks each backend whose removals wait out a backoff whether its server
/// answers (`Backend::ping`); when the answer turns to yes, those removals
/// are due at once. `answered` keeps each backend's last answer, so a server
/// that answers pings but still refuses a removal is retried once per
/// recovery, not every second.
pub async fn retry_recovered(
    app: &App,
    answered: &mut BTreeMap<String, bool>,
) -> Result<u64, StoreError> {
    let waiting = revocations::backing_off(&app.store, app.clock.now()).await?;
    answered.retain(|name, _| waiting.contains(name));
    let pings = waiting.iter().filter_map(|name| {
        let backend = app.backends.get(name)?;
        Some(async move { (name, backend.ping().await) })
    });
    let mut made_due = 0;
    for (name, answer) in futures_util::future::join_all(pings).await {
        let Some(answer) = answer else { continue };
        let ok = answer.is_ok();
        let was = answered.insert(name.clone(), ok);
        if !ok || was == Some(true) {
            continue;
        }
        let n = app
            .store
            .writer()
            .submit(revocations::RetryNow {
                backend: name.clone(),
            })
            .await?;
        if n > 0 {
            tracing::info!(backend = %name, removals = n, "the backend answers again; retrying its removals now");
            made_due += n;
        }
    }
    Ok(made_due)
}

/// Stops the worker: waits up to `grace` for a pass in progress to finish,
/// then releases every claim this instance still holds and marks it stopped,
/// so the next start (or another replica) takes the work at once.
pub async fn stop(
    app: &App,
    worker: tokio::task::JoinHandle<()>,
    heartbeat: tokio::task::JoinHandle<()>,
    grace: Duration,
) {
    let _ = app.stopping.send(true);
    let abort = worker.abort_handle();
    if tokio::time::timeout(grace, worker).await.is_err() {
        abort.abort();
        tracing::warn!(
            ?grace,
            "revocation pass still running at shutdown; releasing its claims"
        );
    }
    // The heartbeat kept the claims of the pass in progress alive until here.
    heartbeat.abort();
    match app
        .store
        .writer()
        .submit(ReleaseClaims {
            instances: vec![(app.instance.id.clone(), None)],
            stop: true,
        })
        .await
    {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            released = n,
            "released revocation claims for the next start"
        ),
        Err(e) => {
            tracing::warn!(error = %e, "cannot release revocation claims; they lapse on their own")
        }
    }
}

/// Keeps this instance's row and claims alive until [`stop`] ends it (after
/// the worker's last pass, so a pass finishing in its grace period keeps
/// its claims).
pub async fn heartbeat(app: Arc<App>) {
    let mut tick =
        tokio::time::interval(Duration::from_secs(crate::instance::HEARTBEAT_SECS as u64));
    loop {
        tick.tick().await;
        let beat = instances::Heartbeat {
            instance_id: app.instance.id.clone(),
        };
        if let Err(e) = app.store.writer().submit(beat).await {
            tracing::warn!(error = %e, "instance heartbeat failed; claims lapse unless it recovers");
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
