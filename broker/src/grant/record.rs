//! Steps 5–6: a decision is charged and recorded in the writer's batch before
//! the door acts on it — an issuance as `IssueCapability` (the capability row
//! with it), anything else as `RecordDecision` — and the store's last word
//! (the run ended meanwhile, a rate, an approval redeemed by another request)
//! becomes the door's answer.

use super::{rate, ApprovalRefusal, Decided, Door, Refused};
use crate::app::App;
use crate::audit::{events, AuditEvent};
use crate::store::capabilities::{CapabilityRecord, IssueCapability, IssueOutcome};
use crate::store::decisions::{DecisionOutcome, RecordDecision};
use crate::store::runs::{EndRun, RunRecord};
use crate::store::StoreError;
use std::sync::Arc;

/// The approval a permit redeems.
#[derive(Debug, Clone)]
pub struct Redeemed {
    pub approval: String,
    /// The gates it met (as recorded with it).
    pub approvers: String,
    /// The hash of the canonical arguments it is bound to.
    pub args_hash: String,
}

/// A request that passed every gate: only recording it is left.
pub struct Permit {
    pub decided: Decided,
    pub redeemed: Option<Redeemed>,
}

impl Permit {
    /// Records a decision that issues nothing (a connection, a request):
    /// charged, its approval redeemed, its audit row committed.
    pub async fn record(self, app: &App) -> Result<(), Refused> {
        let Decided {
            door,
            run,
            constraints,
            mut audit,
            ..
        } = self.decided;
        // The approval is redeemed for this decision, named by its row's
        // request id (what `approvals show` and the console then name).
        let redeems = self.redeemed.map(|r| {
            let decision = audit
                .request_id
                .get_or_insert_with(crate::ids::new_request_id)
                .clone();
            let detail = audit.detail.take().unwrap_or_default();
            audit.detail = Some(
                format!("{detail} approval={}", r.approval)
                    .trim()
                    .to_owned(),
            );
            (r.approval, decision)
        });
        let op = RecordDecision {
            rate: rate::allowed(app, &run, constraints.rate.as_ref()),
            audit: Arc::new(audit),
            refused_as: door.refused_as(),
            redeems,
        };
        outcome(app.store.writer().record_decision(op).await?)
    }

    /// Records the capability the door signed (its `capability.issued` row is
    /// `audit`): charged, its approval redeemed, committed with it.
    pub async fn issue(
        &self,
        app: &App,
        record: CapabilityRecord,
        audit: AuditEvent,
    ) -> Result<(), Refused> {
        let d = &self.decided;
        let op = IssueCapability {
            record,
            rate: rate::allowed(app, &d.run, d.constraints.rate.as_ref()),
            audit: Arc::new(audit),
        };
        match app.store.writer().record_issuance(op).await? {
            IssueOutcome::Issued => Ok(()),
            IssueOutcome::RunInactive(state) => Err(Refused::RunInactive(state)),
            IssueOutcome::RateLimited { retry_after_us } => {
                Err(Refused::RateLimited { retry_after_us })
            }
            IssueOutcome::ApprovalUnavailable => {
                Err(Refused::Approval(ApprovalRefusal::Unavailable))
            }
            IssueOutcome::Unrecordable => Err(Refused::Store(StoreError::Corrupt(
                "an issuance's audit row names another capability".into(),
            ))),
        }
    }
}

fn outcome(o: DecisionOutcome) -> Result<(), Refused> {
    match o {
        DecisionOutcome::Recorded => Ok(()),
        DecisionOutcome::RunInactive(state) => Err(Refused::RunInactive(state)),
        DecisionOutcome::RateLimited { retry_after_us } => {
            Err(Refused::RateLimited { retry_after_us })
        }
        DecisionOutcome::ApprovalUnavailable => {
            Err(Refused::Approval(ApprovalRefusal::Unavailable))
        }
    }
}

/// Records a refusal of what `audit` describes at `door`: as the door's
/// denied event with `reason` (and `detail`, when given), charged to the
/// run's server-wide rate like every refusal. `Ok`: recorded, answer with
/// the door's own refusal; `Err`: the store's word is the answer instead (the
/// run is over its rate, or ended meanwhile, or the store is unavailable).
pub async fn refuse(
    app: &App,
    door: Door,
    run: &RunRecord,
    mut audit: AuditEvent,
    reason: &str,
    detail: Option<String>,
) -> Result<(), Refused> {
    audit.event = door.refused_as().denied;
    audit.decision = "deny";
    audit.capability_id = None;
    audit.reason = Some(reason.to_owned());
    if detail.is_some() {
        audit.detail = detail;
    }
    let op = RecordDecision {
        rate: vec![rate::server(app, run)],
        audit: Arc::new(audit),
        refused_as: door.refused_as(),
        redeems: None,
    };
    match app.store.writer().record_decision(op).await {
        Ok(o) => outcome(o),
        Err(e) => {
            tracing::error!(error = %e, door = door.as_str(), "cannot record a refusal");
            Err(Refused::Store(e))
        }
    }
}

/// Counts a refusal in the door's metric family.
pub fn count(app: &App, door: Door, what: &'static str) {
    if door.is_gateway() {
        let reason = if what == "denied" { "policy" } else { what };
        app.metrics.egress("deny", reason);
    } else {
        app.metrics.capability(what);
    }
}

/// Ends `run` as `actor` for `reason`: everything it holds is revoked
/// (downstream too, through the revocation outbox).
pub async fn end_run(app: &App, run: &RunRecord, actor: &str, reason: &'static str) {
    let mut audit = AuditEvent::new(events::RUN_ENDED, actor, "allow");
    audit.run_id = Some(run.id.clone());
    audit.reason = Some(reason.into());
    let end = EndRun {
        run_id: run.id.clone(),
        runtime_id: None,
        reason,
        audit,
    };
    match app.store.writer().submit(end).await {
        Ok(_) => {
            tracing::warn!(run = %run.id, reason, "run ended by a refusal");
            app.revocation_wakeup.notify_one();
        }
        Err(e) => tracing::error!(error = %e, run = %run.id, "cannot end the run after a refusal"),
    }
    app.injection.forget(&run.id);
}
