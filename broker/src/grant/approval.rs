//! The `@approval` gate (step 4), the same at every door: a gated permit
//! holds only through an approval bound to exactly this request — its run,
//! action, resource and the canonical arguments it is bound to, and the gates
//! in force — and an approval lets exactly one request through.
//!
//! Opening: the first request opens a pending approval (approvers see it in
//! the console and webhooks), the identical request while it is open gets the
//! same one back, and a denial stands for the rest of the run. Redeeming: a
//! door whose caller names the approval (`approval_id`: capabilities, OAuth)
//! redeems that one if it is for this very request; at the gateway, where a
//! client can only retry, the identical request redeems the approved one.
//! Either way the redemption is taken in the same transaction that records
//! the decision, so two retries cannot both pass.

use super::record::{self, Redeemed};
use super::{ApprovalRefusal, Decided, Permit, Refused};
use crate::app::App;
use crate::audit::events;
use crate::clock::rfc3339;
use crate::ids::new_id;
use crate::policy::approval_gate;
use crate::store::approvals::{self, ApprovalRecord, RequestApproval, Requested};
use crate::store::runs::RunState;
use tessera_client::types::{ApprovalPending, ApprovalRule, ApprovalStatus};

/// What an approval is bound to besides the run and the gates.
pub struct Binding {
    pub action: String,
    pub resource: String,
    /// RFC 8785 canonical JSON (`{}` when the request has none).
    pub arguments: Option<String>,
}

impl Decided {
    /// Passes the approval gate: a permit when no gate applies or the
    /// approval holds; otherwise why not (an approval opened is [`Refused::Pending`]).
    /// `named`: the approval the caller names (doors that let it name one).
    pub async fn gate(
        self,
        app: &App,
        binding: Binding,
        named: Option<&str>,
    ) -> Result<Permit, Refused> {
        let Some(policy_id) = self.constraints.approval.clone() else {
            return Ok(Permit {
                decided: self,
                redeemed: None,
            });
        };
        let approvers = self.constraints.approvers();
        let canonical = binding.arguments.clone().unwrap_or_else(|| "{}".to_owned());
        let args_hash = tessera_client::arguments::hash_canonical(&canonical);
        if let (true, Some(id)) = (self.door.names_approvals(), named) {
            return self
                .redeem_named(app, id, &binding, args_hash, approvers)
                .await;
        }
        let record = ApprovalRecord {
            id: new_id(),
            run_id: self.run.id.clone(),
            action: binding.action,
            resource: binding.resource,
            arguments: canonical,
            args_hash: args_hash.clone(),
            policy: policy_id,
            approvers: approvers.clone(),
            status: ApprovalStatus::Pending,
            created_at: self.now,
            expires_at: (self.now + self.constraints.approval_ttl().as_secs() as i64)
                .min(self.run.expires_at),
            decided_at: None,
            capability_id: None,
        };
        let open = self.open(app, record).await?;
        let approved = open.status_at(self.now) == ApprovalStatus::Approved;
        if approved && !self.door.names_approvals() {
            // The identical request, approved: this one redeems it.
            return Ok(Permit {
                decided: self,
                redeemed: Some(Redeemed {
                    approval: open.id,
                    approvers,
                    args_hash,
                }),
            });
        }
        Err(Refused::Pending(pending(&open, self.now)))
    }

    /// Opens an approval for `record` (or finds the open one for the same
    /// request), with its `approval.requested` row and webhook.
    async fn open(&self, app: &App, record: ApprovalRecord) -> Result<ApprovalRecord, Refused> {
        let mut audit = self.audit.clone();
        audit.event = events::APPROVAL_REQUESTED;
        audit.decision = "pending";
        audit.detail = Some(format!(
            "approval={} policy={} approvers={} args={} expires_at={}",
            record.id, record.policy, record.approvers, record.args_hash, record.expires_at
        ));
        let notify = crate::jobs::webhooks::announcement(app, &self.run, &record);
        let outcome = app
            .store
            .writer()
            .submit(RequestApproval {
                record,
                audit,
                notify,
                rate: vec![super::rate::server(app, &self.run)],
            })
            .await?;
        match outcome {
            Requested::Created(r) => {
                app.metrics.capability("approval_requested");
                app.webhook_wakeup.notify_one();
                tracing::info!(approval = %r.id, run = %self.run.id, door = self.door.as_str(), "approval requested");
                Ok(r)
            }
            Requested::Existing(r) => Ok(r),
            Requested::RunInactive => Err(Refused::RunInactive(RunState::Ended)),
            Requested::Denied(r) => Err(Refused::Approval(ApprovalRefusal::DeniedBefore(r.id))),
            Requested::TooMany => Err(Refused::Approval(ApprovalRefusal::TooMany)),
            Requested::RateLimited { retry_after_us } => {
                Err(Refused::RateLimited { retry_after_us })
            }
        }
    }

    /// The approval the caller names, if it is approved, unredeemed and for
    /// exactly this request; a refusal is recorded.
    async fn redeem_named(
        self,
        app: &App,
        id: &str,
        binding: &Binding,
        args_hash: String,
        approvers: String,
    ) -> Result<Permit, Refused> {
        let found = approvals::get(&app.store, id)
            .await?
            .filter(|v| v.record.run_id == self.run.id);
        let refusal = match &found {
            None => Some(ApprovalRefusal::Unknown),
            Some(v) => {
                let r = &v.record;
                let same = r.action == binding.action
                    && r.resource == binding.resource
                    && r.args_hash == args_hash
                    && r.approvers == approvers;
                match r.status_at(self.now) {
                    _ if !same => Some(ApprovalRefusal::Mismatch),
                    ApprovalStatus::Approved if r.capability_id.is_none() => None,
                    status => Some(ApprovalRefusal::Status(status)),
                }
            }
        };
        if let Some(refusal) = refusal {
            record::count(app, self.door, "refused");
            let reason = refusal.code();
            let detail = Some(format!("approval={id}"));
            let door = self.door;
            record::refuse(app, door, &self.run, self.audit, reason.as_str(), detail).await?;
            return Err(Refused::Approval(refusal));
        }
        Ok(Permit {
            decided: self,
            redeemed: Some(Redeemed {
                approval: id.to_owned(),
                approvers,
                args_hash,
            }),
        })
    }
}

/// The answer to a gated request: the approval to wait for.
pub fn pending(record: &ApprovalRecord, now: i64) -> ApprovalPending {
    ApprovalPending {
        status: record.status_at(now),
        expires_at: rfc3339(record.expires_at),
        approvers: rules(&record.approvers),
        args: record.args_hash.clone(),
        approval_id: record.id.clone().into(),
    }
}

/// The gates as the API shows them.
pub fn rules(described: &str) -> Vec<ApprovalRule> {
    approval_gate::parse_described(described)
        .unwrap_or_default()
        .into_iter()
        .map(|(rule, required)| ApprovalRule {
            rule: rule.to_string(),
            required,
        })
        .collect()
}
