//! The run index's catch-up: indexes newly issued capabilities by run, a
//! quarter of a second's issuances at a time (`store::run_index` says why it
//! trails the issuances, and why nothing is missing from a run's list
//! meanwhile).

use crate::app::AppState;
use crate::store::run_index::{CatchUp, INTERVAL, JOB_ROWS};

/// Catches up every [`INTERVAL`] when the audit has moved past the mark; a
/// catch-up cut short goes again at once. A failure is logged and retried on
/// the next tick: readers read the audit's tail meanwhile.
pub async fn run(app: AppState) {
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut mark = 0;
    let mut failing = false;
    loop {
        tick.tick().await;
        while app.store.writer().audit_high_water() > mark {
            match app.store.writer().submit(CatchUp { rows: JOB_ROWS }).await {
                Ok(m) => {
                    failing = false;
                    let cut_short = m - mark >= JOB_ROWS;
                    mark = mark.max(m);
                    // The catch-up's own batch committed more rows after it:
                    // those wait for the next tick, unless it read all it may.
                    if !cut_short {
                        break;
                    }
                }
                Err(e) => {
                    app.metrics.background("run_index", "failed");
                    // Once per outage: readers read the audit's tail meanwhile.
                    if !failing {
                        tracing::warn!(error = %e, "run index catch-up failed; will retry");
                    }
                    failing = true;
                    break;
                }
            }
        }
    }
}
