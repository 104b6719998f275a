//! The expiry sweeper: ends runs that have passed their expiry.
//!
//! Why it exists although an expired run is already refused everywhere (every
//! check compares `expires_at` with the clock): an expiry nobody records is
//! invisible to the audit, and downstream credentials that outlive their run
//! (database users, for instance) need an event that revokes them. The sweeper
//! turns "past its expiry" into a durable end with a `run.expired` audit row and
//! revokes everything the run held, exactly as ending it by hand would. It also
//! revokes every capability whose hold lapsed (`store::holds`).

use crate::app::App;
use crate::store::approvals::ExpireApprovals;
use crate::store::holds::LapseHolds;
use crate::store::runs::ExpireRuns;
use crate::store::writer::WriteOp;
use crate::store::StoreError;
use std::sync::Arc;
use std::time::Duration;

/// Runs ended per write transaction, so one sweep never holds the writer long.
const BATCH: i64 = 500;

/// Ends every run past its expiry and revokes every live lease past its own
/// (queuing their downstream removal); returns how many runs it ended.
pub async fn sweep(app: &App) -> Result<usize, StoreError> {
    let ended = in_batches(app, || ExpireRuns { limit: BATCH }).await?;
    let lapsed = in_batches(app, || LapseHolds { limit: BATCH }).await?;
    if lapsed > 0 {
        tracing::info!(capabilities = lapsed, "lapsed holds revoked");
    }
    let expired = in_batches(app, || ExpireApprovals { limit: BATCH }).await?;
    if expired > 0 {
        tracing::info!(approvals = expired, "approvals expired");
        app.approvals_changed
            .send_modify(|n| *n = n.wrapping_add(1));
    }
    crate::jobs::revocation::reap_expired_leases(app).await?;
    if ended + lapsed > 0 {
        app.revocation_wakeup.notify_one();
    }
    Ok(ended)
}

/// Submits `op()` until a batch comes back short; the total it reported.
async fn in_batches<Op: WriteOp<Output = usize>>(
    app: &App,
    op: impl Fn() -> Op,
) -> Result<usize, StoreError> {
    let mut total = 0;
    loop {
        let n = app.store.writer().submit(op()).await?;
        total += n;
        if (n as i64) < BATCH {
            return Ok(total);
        }
    }
}

/// Sweeps every `interval` until the process exits. A failed sweep (store down)
/// is logged and retried on the next tick; nothing is lost, the runs stay past
/// their expiry and are refused meanwhile.
pub async fn run(app: Arc<App>, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match sweep(&app).await {
            Ok(0) => {}
            Ok(n) => {
                app.metrics.background("expiry_sweep", "ended");
                tracing::info!(runs = n, "expired runs ended");
            }
            Err(e) => {
                app.metrics.background("expiry_sweep", "failed");
                tracing::warn!(error = %e, "expiry sweep failed; will retry");
            }
        }
    }
}
