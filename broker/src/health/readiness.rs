//! The readiness check itself: every reason, from what the application has
//! seen (its [`Health`](super::Health), the store's writer, the outbox, the
//! signing keys, the policy version).
//!
//! Why a file of its own: the application holds a `Health`, and this check
//! reads the application; kept in one file, the two would import each other.

use crate::app::App;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tessera_client::types::ReadinessReason;

/// A commit this recent (and no failure since) proves the store commits.
const RECENT_COMMIT: Duration = Duration::from_secs(2);
/// How long the store's and the outbox's verdict answers readiness checks:
/// `/readyz` needs no token, so a flood of it must not become a flood of
/// store queries (one computes, the others wait for its answer).
const VERDICT_REUSE: Duration = Duration::from_secs(1);

fn reason(code: &str, message: String) -> ReadinessReason {
    ReadinessReason {
        code: code.to_owned(),
        message,
    }
}

/// Every reason this broker is not ready; empty when it is.
pub async fn check(app: &App) -> Vec<ReadinessReason> {
    let mut reasons = Vec::new();
    if app.health.stopping.load(Ordering::Acquire) {
        reasons.push(reason(
            "shutting_down",
            "the broker is stopping: requests in flight finish, new ones go elsewhere".into(),
        ));
    }
    reasons.extend(shared_state(app).await);
    if let Some(e) = app.health.policy_error() {
        reasons.push(reason(
            "policy_load_failed",
            format!("the last policy reload was rejected, so the policy files are not the policy in force: {e}"),
        ));
    }
    let replicas = &app.config.replicas;
    let store_timeout = app.config.operations.store_timeout;
    let stale_after = replicas.keys_stale_after(store_timeout);
    let age = app.keys.age();
    if age > stale_after {
        reasons.push(reason(
            "keys_stale",
            format!(
                "the signing keys were last read from the store {}s ago (limit {}s): a key rotated by another replica may sign before this one knows it",
                age.as_secs(),
                stale_after.as_secs()
            ),
        ));
    }
    let limit = replicas.policy_lag_limit(store_timeout);
    if let Some((newest, for_how_long)) = app.health.policy_behind() {
        if for_how_long > limit {
            reasons.push(reason(
                "policy_behind",
                format!(
                    "policy version {newest} is published but version {} is in force here, for {}s (limit {}s); the log says why",
                    app.policy_in_force.version().version,
                    for_how_long.as_secs(),
                    limit.as_secs()
                ),
            ));
        }
    }
    reasons
}

/// The reasons that cost a store query, computed at most once per
/// [`VERDICT_REUSE`] whoever asks.
async fn shared_state(app: &App) -> Vec<ReadinessReason> {
    let mut verdict = app.health.verdict.lock().await;
    if let Some((at, reasons)) = &*verdict {
        if at.elapsed() < VERDICT_REUSE {
            return reasons.clone();
        }
    }
    let mut reasons = Vec::new();
    if let Some(r) = store(app).await {
        reasons.push(r);
    }
    if let Some(r) = outbox(app).await {
        reasons.push(r);
    }
    *verdict = Some((std::time::Instant::now(), reasons.clone()));
    reasons
}

/// Whether the store commits: the batch in progress is not stuck, and the
/// last batch committed (proved by a probe when none did recently).
async fn store(app: &App) -> Option<ReadinessReason> {
    let writer = app.store.writer();
    let health = writer.health();
    let timeout = writer.timeout();
    if let Some(busy) = health.busy_for_ms(writer.now_ms()) {
        if busy > timeout.as_millis() as i64 {
            return Some(reason(
                "store_cannot_commit",
                format!("a write to the store has been running for {busy} ms (store.timeout is {timeout:?})"),
            ));
        }
    }
    if health.committed_within(RECENT_COMMIT) {
        // Commits prove the write path; a read proves the connection is
        // still there (a server that went away since the last commit).
        return (!app.store.answers_read().await).then(|| {
            reason(
                "store_cannot_commit",
                format!("the store did not answer a read within {timeout:?}"),
            )
        });
    }
    let answered = app.store.ping(health.failing().is_some()).await;
    if let Some(f) = health.failing() {
        // The cause, not the store's own words: /readyz is unauthenticated,
        // and a driver's error can name hosts or accounts (the log has it).
        return Some(reason(
            "store_cannot_commit",
            format!(
                "{} ({}); the broker log has the store's error",
                f.cause.sentence(),
                f.cause.code()
            ),
        ));
    }
    (!answered).then(|| {
        reason(
            "store_cannot_commit",
            format!("the store did not answer a read and a write within {timeout:?}"),
        )
    })
}

/// Whether a downstream removal has been pending for longer than
/// `readiness.outbox_stuck_after`.
async fn outbox(app: &App) -> Option<ReadinessReason> {
    let limit = app.config.operations.outbox_stuck_after?;
    let oldest = tokio::time::timeout(
        app.store.writer().timeout(),
        crate::store::revocations::oldest_pending(&app.store),
    )
    .await;
    let Ok(Ok(Some(created_at))) = oldest else {
        // No pending removal, or the store did not answer (reported above).
        return None;
    };
    let age = app.clock.now() - created_at;
    (age > limit.as_secs() as i64).then(|| {
        reason(
            "revocation_outbox_stuck",
            format!(
                "a downstream removal has been pending for {age} s (readiness.outbox_stuck_after is {} s); see GET /v1/admin/leases",
                limit.as_secs()
            ),
        )
    })
}
