//! Steps 1–3 of a decision (module docs of [`crate::grant`]): the run, the
//! admission, the Cedar decision. A denial is recorded here, the same way at
//! every door; what is allowed goes on to the approval gate as [`Decided`].

use super::ask::{Ask, Decided};
use super::event;
use super::reauthorize::policy_request;
use super::record;
use super::{Door, Refused};
use crate::app::App;
use crate::audit::AuditEvent;
use crate::policy::{admit, PolicyDecision};
use crate::store::runs::{RunRecord, RunState};
use tessera_client::types::ErrorCode;

/// Decides `ask`: refuses (recording what must be recorded) or returns it
/// allowed, for the approval gate.
pub async fn decide(app: &App, ask: Ask<'_>) -> Result<Decided, Refused> {
    let now = app.clock.now();
    let (door, run) = (ask.door, ask.run);
    let state = run.state(now);
    if state != RunState::Active {
        return Err(Refused::RunInactive(state));
    }
    let mut audit = event::for_run(run, door.allowed_event(), ask.action, ask.resource);
    audit.request_id = ask.request_id;
    audit.detail = ask.detail;

    let policy = app.policy();
    let admitted = admit::check_capability(&policy, &app.config.backends, ask.action, ask.resource)
        .map_err(|r| (r.code, r.message))
        .and_then(|res| match door.admits(res.kind) {
            Ok(()) => Ok(res),
            Err((code, why)) => Err((code, why.to_owned())),
        });
    let res = match admitted {
        Ok(res) => res,
        Err((code, message)) => {
            return Err(inadmissible(app, door, run, audit, code, message).await);
        }
    };
    let request = policy_request(run, ask.action, &res, ask.requested_ttl, now, ask.arguments);
    if let Err(e) = policy.check_arguments(&request) {
        let e: String = e.chars().take(300).collect();
        return Err(inadmissible(app, door, run, audit, ErrorCode::InvalidArguments, e).await);
    }
    match policy.decide(&request) {
        PolicyDecision::Allow {
            policies,
            constraints,
        } => Ok(Decided {
            door,
            run: run.clone(),
            backend: res.backend.to_owned(),
            policies,
            constraints,
            audit,
            now,
        }),
        PolicyDecision::Deny {
            rule,
            policies,
            errors,
        } => {
            if !errors.is_empty() {
                tracing::warn!(?errors, "policy evaluation errors");
            }
            tracing::info!(
                user = %run.user, door = door.as_str(), action = %ask.action,
                resource = %ask.resource, rule = rule.reason(), ?policies, "denied by policy"
            );
            record::count(app, door, "denied");
            let end_run =
                door.is_gateway() && (ask.end_run_on_deny || policy.ends_run_on_deny(&policies));
            let detail = format!("rule={} policies={}", rule.reason(), policies.join(","));
            let recorded = record::refuse(app, door, run, audit, rule.reason(), Some(detail)).await;
            if end_run {
                // Ending the run is the answer, whatever the store made of the refusal.
                record::end_run(app, run, "gateway", "egress_denied").await;
                return Err(Refused::Denied { rule, end_run });
            }
            Err(recorded.err().unwrap_or(Refused::Denied { rule, end_run }))
        }
    }
}

/// A request the door cannot decide; recorded at the doors that record them.
async fn inadmissible(
    app: &App,
    door: Door,
    run: &RunRecord,
    audit: AuditEvent,
    code: ErrorCode,
    message: String,
) -> Refused {
    if door.records_inadmissible() {
        record::count(app, door, "invalid");
        let detail = format!("why={}", code.as_str());
        if let Err(r) = record::refuse(app, door, run, audit, "invalid_request", Some(detail)).await
        {
            return r;
        }
    }
    Refused::Inadmissible { code, message }
}
