//! The pruner: every `retention.interval`, deletes ended runs older than
//! `retention.runs` and, when `retention.audit` is set, exported audit rows
//! older than it up to a signed checkpoint (`store::retention` says what may
//! go). Batches are submitted one after another, so issuance interleaves
//! with them; each is audited and counted in `tessera_retention_pruned_total`.

use crate::app::App;
use crate::store::retention::{self, PruneAudit, PruneRuns, Pruned};
use crate::store::StoreError;
use std::sync::Arc;

/// What one pass deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    pub pruned: Pruned,
    pub audit_rows: u64,
}

/// Runs until the broker stops.
pub async fn run(app: Arc<App>) {
    let retention = app.config.operations.retention;
    if retention.runs.is_none() && retention.audit.is_none() {
        return;
    }
    let mut stopping = app.stopping.subscribe();
    let mut tick = tokio::time::interval(retention.interval);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
        match run_once(&app).await {
            Ok(pass) if pass != Pass::default() => {
                let p = pass.pruned;
                tracing::info!(
                    runs = p.runs,
                    capabilities = p.capabilities,
                    leases = p.leases,
                    revocations = p.revocations,
                    approvals = p.approvals,
                    audit_rows = pass.audit_rows,
                    "retention: pruned"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "retention pass failed; will retry"),
        }
    }
}

/// One pass: every batch that is due now. Also what tests call.
pub async fn run_once(app: &App) -> Result<Pass, StoreError> {
    let mut pass = Pass::default();
    let retention = app.config.operations.retention;
    let stopping = || *app.stopping.borrow();
    if let Some(keep) = retention.runs {
        let ended_before = app.clock.now() - keep.as_secs() as i64;
        loop {
            let ids = retention::prunable_runs(&app.store, ended_before, retention::RUNS_PER_BATCH)
                .await?;
            if ids.is_empty() || stopping() {
                break;
            }
            let n = ids.len();
            let done = app
                .store
                .writer()
                .submit(PruneRuns { ids, ended_before })
                .await?;
            count(app, done);
            pass.pruned.add(done);
            // Those left were taken by a removal meanwhile: the next pass.
            if done.runs == 0 || n < retention::RUNS_PER_BATCH as usize {
                break;
            }
        }
    }
    if let Some(keep) = retention.audit {
        let older_than_ms = app.clock.now_ms() - keep.as_millis() as i64;
        if let Some((through, jws, export_id)) =
            retention::audit_prune_target(&app.store, older_than_ms).await?
        {
            if checkpoint_is_ours(app, &jws, through).await {
                loop {
                    if stopping() {
                        break;
                    }
                    let deleted = app
                        .store
                        .writer()
                        .submit(PruneAudit {
                            through,
                            export_id: export_id.clone(),
                        })
                        .await?;
                    app.metrics.retention_pruned("audit", deleted);
                    pass.audit_rows += deleted;
                    if deleted == 0 {
                        break;
                    }
                }
            } else {
                tracing::error!(seq = through, "retention: the checkpoint audit pruning would stop at is not signed by this broker; nothing pruned");
            }
        }
    }
    Ok(pass)
}

fn count(app: &App, p: Pruned) {
    app.metrics.retention_pruned("runs", p.runs);
    app.metrics.retention_pruned("capabilities", p.capabilities);
    app.metrics.retention_pruned("leases", p.leases);
    app.metrics.retention_pruned("revocations", p.revocations);
    app.metrics.retention_pruned("approvals", p.approvals);
}

/// Whether `jws` is a checkpoint of row `seq` signed by a key this broker
/// has used (the store's table could hold a planted one).
async fn checkpoint_is_ours(app: &App, jws: &str, seq: i64) -> bool {
    let keys = match crate::keys::manage::every_key(
        &app.store,
        &app.kek,
        app.keys.snapshot().active.clone(),
    )
    .await
    {
        Ok(k) => k,
        Err(_) => return false,
    };
    match crate::audit::checkpoint::check(app, &keys, &[jws.to_owned()]).await {
        Ok(results) => results
            .first()
            .is_some_and(|r| r.seq == seq && r.status == "matches"),
        Err(_) => false,
    }
}
