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
        if let Some(target) = retention::audit_prune_target(&app.store, older_than_ms).await? {
            if audit_target_holds(app, &target, older_than_ms).await? {
                loop {
                    if stopping() {
                        break;
                    }
                    let deleted = app
                        .store
                        .writer()
                        .submit(PruneAudit {
                            through: target.through,
                            export_id: target.export_id.clone(),
                        })
                        .await?;
                    app.metrics.retention_pruned("audit", deleted);
                    pass.audit_rows += deleted;
                    if deleted == 0 {
                        break;
                    }
                }
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

/// Whether audit rows may be pruned up to `target.through`, checked against
/// what cannot be forged rather than what the tables say: the checkpoint is
/// signed by this broker, names that row as stored and its signed time is
/// older than the period; the export is recorded by an `audit.exported` row
/// whose link verifies and whose range covers the row; and every row kept up
/// to that one verifies (so no tampered row is carried out of the store,
/// where only its export could show it). Anything else is logged and
/// nothing is pruned.
async fn audit_target_holds(
    app: &App,
    target: &retention::PruneCandidate,
    older_than_ms: i64,
) -> Result<bool, StoreError> {
    let seq = target.through;
    let refuse = |why: &str| {
        tracing::error!(seq, why, "retention: audit rows not pruned");
        Ok(false)
    };
    let Some(key) = app.store.writer().audit_key() else {
        return Ok(false);
    };
    let Some(keys) = super::checkpoints::verifying_keys(app).await else {
        return Ok(false);
    };
    let checked = crate::audit::checkpoint::check(
        &app.store,
        &app.config.issuer,
        &keys,
        std::slice::from_ref(&target.checkpoint),
    )
    .await?;
    if !checked
        .first()
        .is_some_and(|r| r.seq == seq && r.status == "matches")
    {
        return refuse(
            "the checkpoint is not this broker's signed checkpoint of the row as stored",
        );
    }
    match crate::audit::checkpoint::signed_time(&keys, &target.checkpoint) {
        Some(at_ms) if at_ms < older_than_ms => {}
        _ => return refuse("the checkpoint's signed row time is not older than retention.audit"),
    }
    if let Some(p) =
        crate::audit::verify::problem_through(&app.store, key, target.exported_row).await?
    {
        tracing::error!(seq, problem_seq = p.seq, kind = %p.kind, detail = %p.detail,
            "retention: the audit chain does not verify up to the export's record; nothing pruned");
        return Ok(false);
    }
    let recorded =
        crate::store::audit::chain_page(&app.store, target.exported_row, target.exported_row, 1)
            .await?
            .into_iter()
            .next()
            .and_then(Result::ok);
    let covers = recorded.is_some_and(|row| {
        row.event.event == crate::audit::events::AUDIT_EXPORTED
            && crate::audit::verify::export_range(row.event.detail.as_deref())
                .is_some_and(|(id, last)| id == target.export_id && last >= seq)
    });
    if !covers {
        return refuse("no audit.exported row records an export covering the row");
    }
    Ok(true)
}
