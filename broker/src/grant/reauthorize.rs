//! Re-authorization: a capability is worth only what the policy in force would
//! still issue, and only what the store recorded when it was issued.
//!
//! Why: a signed token is a claim, not a fact. At exchange the broker compares
//! every claim that matters (resource, action, user, run, runtime, task, issue
//! and expiry times, uses) with the capability row written at issuance, so a
//! token re-signed with edited claims buys nothing even under a valid signature;
//! and it decides the recorded request again under the current policy, so a
//! reload that adds a forbid stops capabilities issued before it. A reload also
//! revokes, at once, every live capability the new policy would no longer issue
//! ([`stale`]), so their leases go too.
//!
//! Invariants: the request re-decided is the recorded one (the run's user, task,
//! labels and runtime, the capability's action and resource), admitted by the
//! same checks and decided by the same [`PolicyEngine::decide`] as at issuance,
//! at the current time; the requested ttl is taken as the lifetime the capability
//! was given, and its recorded arguments are the request's. A capability is still
//! permitted only if the decision allows it — when an approval gates it, only if
//! it was redeemed from an approval of exactly the gates in force — and the
//! effective ttl and uses are at least what it holds.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::app::App;
use crate::audit::{events, AuditEvent};
use crate::capability::CapabilityClaims;
use crate::config::{BackendConfig, Limits};
use crate::policy::admit;
use crate::policy::effective::Effective;
use crate::policy::{PolicyDecision, PolicyEngine, PolicyRequest};
use crate::resource::Resource;
use crate::store::capabilities::{HeldCapability, RevokeCapability, Revoker};
use crate::store::runs::RunRecord;
use crate::store::{Store, StoreError};

/// The claims of `claims` that differ from what the store recorded (empty: all
/// match). `run` is the run of `held`.
pub fn mismatched_claims(
    claims: &CapabilityClaims,
    held: &HeldCapability,
    run: &RunRecord,
) -> Vec<&'static str> {
    [
        ("jti", claims.jti == held.id),
        ("run", claims.run == held.run_id),
        ("act", claims.act == held.action),
        ("res", claims.res == held.resource),
        ("iat", claims.iat == held.issued_at),
        ("exp", claims.exp == held.expires_at),
        ("uses", claims.uses == held.uses),
        ("args", claims.args == held.args_hash),
        ("sub", claims.sub == run.user),
        ("rt", claims.rt == run.runtime_id),
        ("task", claims.task == run.task_id),
    ]
    .into_iter()
    .filter(|(_, same)| !same)
    .map(|(name, _)| name)
    .collect()
}

/// The request `run` puts to policy for `action` on `res`: the one way it is
/// built, at every door ([`crate::grant::decide`]) and at re-authorization, so
/// all decide the same request.
pub fn policy_request<'a>(
    run: &'a RunRecord,
    action: &'a str,
    res: &Resource<'a>,
    requested_ttl: Option<Duration>,
    now: i64,
    arguments: Option<&'a serde_json::Value>,
) -> PolicyRequest<'a> {
    PolicyRequest {
        user: &run.user,
        action,
        backend: res.backend,
        backend_kind: res.kind,
        path: res.path,
        run_id: &run.id,
        run_labels: &run.labels,
        task_id: &run.task_id,
        task_kind: &run.task_kind,
        task_attributes: &run.task_attributes,
        runtime: &run.runtime_name,
        requested_ttl,
        now_unix: now,
        arguments,
    }
}

/// Whether the policy in force would still issue `held` to `run` at `now`.
pub fn still_permitted(
    engine: &PolicyEngine,
    backends: &BTreeMap<String, BackendConfig>,
    limits: &Limits,
    held: &HeldCapability,
    run: &RunRecord,
    now: i64,
) -> bool {
    let Ok(res) = admit::check_capability(engine, backends, &held.action, &held.resource) else {
        return false;
    };
    let lifetime =
        Duration::from_secs(u64::try_from(held.expires_at - held.issued_at).unwrap_or(0));
    let arguments = match held.arguments.as_deref().map(serde_json::from_str) {
        None => None,
        Some(Ok(v)) => Some(v),
        Some(Err(_)) => return false,
    };
    let request = policy_request(
        run,
        &held.action,
        &res,
        Some(lifetime),
        now,
        arguments.as_ref(),
    );
    match engine.decide(&request) {
        PolicyDecision::Deny { .. } => false,
        PolicyDecision::Allow { constraints, .. } => {
            let effective = Effective::new(&constraints, limits, Some(lifetime));
            // Gated: only by an approval of exactly the gates in force.
            let approved = constraints.approval.is_none()
                || held.approved_for.as_deref() == Some(constraints.approvers().as_str());
            let uses = if held.approved_for.is_some() {
                constraints.approved_uses(effective.uses.value)
            } else {
                effective.uses.value
            };
            approved && effective.ttl.value >= lifetime && uses >= held.uses
        }
    }
}

/// The live capabilities that `engine` would no longer issue.
pub async fn stale(
    store: &Store,
    engine: &PolicyEngine,
    backends: &BTreeMap<String, BackendConfig>,
    limits: &Limits,
    now: i64,
) -> Result<Vec<HeldCapability>, StoreError> {
    let live = crate::store::capabilities::live(store, now).await?;
    Ok(live
        .into_iter()
        .filter(|(held, run)| !still_permitted(engine, backends, limits, held, run, now))
        .map(|(held, _)| held)
        .collect())
}

/// Revokes (with their leases) the live capabilities a new policy set no
/// longer issues, found by [`stale`] before it came into
/// force. A capability missed here (a crash, a store error) is still refused
/// at its next exchange, which re-decides it under the policy in force.
pub async fn revoke_stale(app: &App, stale: &[HeldCapability], request_id: Option<String>) {
    // Submitted together, so the writer commits them in a few batches.
    let revocations = stale.iter().map(|held| {
        let mut ev = AuditEvent::new(events::CAPABILITY_REVOKED, "policy", "allow");
        ev.capability_id = Some(held.id.clone());
        ev.action = Some(held.action.clone());
        ev.resource = Some(held.resource.clone());
        ev.reason = Some("policy_changed".into());
        ev.request_id = request_id.clone();
        app.store.writer().submit(RevokeCapability {
            capability_id: held.id.clone(),
            by: Revoker::Admin,
            audit: ev,
            reason: "policy_changed",
            audit_noop: true,
        })
    });
    for (held, done) in stale
        .iter()
        .zip(futures_util::future::join_all(revocations).await)
    {
        if let Err(e) = done {
            tracing::error!(error = %e, capability = %held.id, "could not revoke a capability the new policy no longer grants; its exchange is refused all the same");
        }
    }
    if !stale.is_empty() {
        app.revocation_wakeup.notify_one();
    }
}
