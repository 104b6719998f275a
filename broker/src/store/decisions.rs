//! A decision that issues nothing — a refusal at any door, a gateway
//! connection or injected request let through — recorded as what it is: its
//! run re-checked, its rate charged, the approval it redeems taken and its
//! audit row written, in the writer's batch ([`super::charges`]), before the
//! door acts on it.

use super::charges::{self, Charge, Charged, RateCharge, RefusedAs};
use super::runs::RunState;
use super::writer::{BatchedOp, BoxFuture, WriteCtx, Writer};
use super::StoreError;
use crate::audit::AuditEvent;
use std::sync::Arc;

pub struct RecordDecision {
    pub rate: Vec<RateCharge>,
    /// The decision's row (`egress.allowed`, `egress.request`,
    /// `capability.denied`, `egress.denied`, …); names its run.
    pub audit: Arc<AuditEvent>,
    /// How the store's own refusals of it are recorded.
    pub refused_as: RefusedAs,
    /// `(approval, decision id)`: the approved approval this decision redeems.
    pub redeems: Option<(String, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionOutcome {
    Recorded,
    RunInactive(RunState),
    RateLimited {
        retry_after_us: i64,
    },
    /// The approval was redeemed, expired or cancelled since it was read.
    ApprovalUnavailable,
}

impl BatchedOp for RecordDecision {
    type Output = DecisionOutcome;

    /// A refusal is applied even when its submitter gave up; a decision that
    /// lets something through or redeems an approval grants.
    fn grants(&self) -> bool {
        self.audit.decision == "allow" || self.redeems.is_some()
    }

    fn apply_batch<'a>(
        ctx: &'a mut WriteCtx<'_>,
        ops: &'a [&'a Self],
    ) -> BoxFuture<'a, Result<Vec<DecisionOutcome>, sqlx::Error>> {
        Box::pin(async move {
            let charges: Vec<Charge<'_>> = ops
                .iter()
                .map(|op| Charge {
                    rate: &op.rate,
                    audit: &op.audit,
                    redeems: op.redeems.as_ref().map(|(a, d)| (a.as_str(), d.as_str())),
                    refused_as: op.refused_as,
                })
                .collect();
            Ok(charges::apply(ctx, &charges)
                .await?
                .into_iter()
                .map(|c| match c {
                    Charged::Applied => DecisionOutcome::Recorded,
                    Charged::RunInactive(s) => DecisionOutcome::RunInactive(s),
                    Charged::RateLimited { retry_after_us } => {
                        DecisionOutcome::RateLimited { retry_after_us }
                    }
                    Charged::ApprovalUnavailable => DecisionOutcome::ApprovalUnavailable,
                })
                .collect())
        })
    }
}

impl Writer {
    /// Records a decision with the batch's others; returns only after its
    /// transaction committed.
    pub async fn record_decision(&self, op: RecordDecision) -> Result<DecisionOutcome, StoreError> {
        self.submit_batched(op).await
    }
}
