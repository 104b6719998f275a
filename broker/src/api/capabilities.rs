//! `/v1/capabilities`: the capability door. A run asks for a capability; the
//! decision layer ([`crate::grant`]) decides it exactly as it decides every
//! other door's request; this module only says what a capability is.
//!
//! Order matters and is the point of this module:
//! 1. the run token names a run (its ended/expired state is re-checked when the
//!    decision is recorded), and a DPoP proof, when sent, holds;
//! 2. what only this door hands out is checked: ttl, hold, slot, and that the
//!    arguments carry nothing that would mislead an approver;
//! 3. the decision layer admits, decides (a deny is audited and refused: the
//!    sandbox learns the code, never which policy said no) and passes the
//!    `@approval` gate (202 with an approval, or, with `approval_id`, the
//!    approved one redeemed);
//! 4. the effective ttl/uses are the strictest of the satisfied permits,
//!    bounded by the server caps and by the run's own expiry;
//! 5. the capability row, the rate-limit charge and the audit row commit together
//!    — and only then does the signed token leave the process.

use super::extract::{ApiJson, RequestId, RunCaller, RunOrAdmin};
use super::refusals;
use crate::api::openapi::{refusals, IdPath};
use crate::app::AppState;
use crate::audit::{events, AuditEvent};
use crate::backends::token::ACCESS_TOKEN_TYP;
use crate::capability::{CapabilityClaims, CAPABILITY_TYP};
use crate::clock::rfc3339;
use crate::error::ApiError;
use crate::grammar::parse_duration;
use crate::grant::approval::Binding;
use crate::grant::{record, Ask, Door, Permit, Refused};
use crate::ids::{is_id, new_id};
use crate::keys::jwt;
use crate::policy::effective::Effective;
use crate::store::capabilities::{CapabilityRecord, HeldCapability, RevokeCapability, Revoker};
use crate::store::holds::RenewHolds;
use crate::store::runs::{RunRecord, RunState};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::sync::Arc;
use std::time::Duration;
use tessera_client::types::ErrorCode;
use tessera_client::types::{
    ApprovalPending, CapabilityRequest, CapabilityResponse, RenewHoldsRequest, RenewHoldsResponse,
    RenewedHold, RevokeCapabilityResponse,
};

refusals!(RequestCapabilityRefusals {
    400 => [InvalidRequest, InvalidJson, InvalidAction, InvalidResource, UnknownBackend, InvalidTtl, UnknownAction, InvalidHold, InvalidSlot, InvalidArguments, InvalidDpopProof, UseDpopNonce],
    401 => [Unauthenticated],
    403 => [CapabilityDenied, WildcardOverlapsForbid, WildcardOverlapsApproval, WildcardNotCovered, ApprovalDenied, ApprovalExpired, ApprovalMismatch, RunEnded, RunExpired],
    404 => [UnknownApproval],
    409 => [ApprovalPending, ApprovalRedeemed],
    413 => [BodyTooLarge],
    415 => [UnsupportedMediaType],
    429 => [RateLimited],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Request a capability
///
/// A tool inside a run asks for a capability to perform `action` on `resource`. The action and
/// resource are validated against the backend kind's grammar and the policy schema before Cedar
/// decides. The effective ttl, uses and rate are the strictest of the satisfied permits,
/// bounded by the server caps, by the requested `ttl` and by the run's own expiry. A resource
/// with a wildcard (`*`; for `aws-sts` also `?`) is a set: it is issued only if some permit
/// holds for every member and no forbid and no `@approval` permit could hold for any member,
/// else it is refused with `wildcard_overlaps_forbid`, `wildcard_overlaps_approval` or
/// `wildcard_not_covered` (docs/policy.md). Denials are audited. The capability (an EdDSA JWT,
/// `typ` `tsr-cap+jwt`) is returned only after its record, the rate-limit charge and the audit
/// row are committed.
///
/// When a satisfied permit carries `@approval`, the answer is 202 with an approval bound to the
/// run, action, resource and `arguments` (RFC 8785 canonical form, hashed); the same request
/// while it is open gets the same approval. Once approvers approve it
/// (`GET /v1/approvals/{id}?wait=30s` tells), the same request with `approval_id` redeems it
/// for one capability carrying the arguments' hash as claim `args`, single-use unless the
/// policy's `@uses` says otherwise (docs/approvals.md).
#[utoipa::path(
    post,
    path = "/v1/capabilities",
    operation_id = "requestCapability",
    tags = ["capabilities"],
    security(("runToken" = [])),
    params(("DPoP" = Option<String>, Header, description = "A DPoP proof (RFC 9449) for `POST` on this URL: the capability is bound to its key (`cnf.jkt`), docs/oauth.md.")),
    request_body(content = CapabilityRequest, example = json!({"action": "read", "resource": "svc-reports:reports/q1", "ttl": "5m"})),
    responses(
        (status = 201, description = "Capability issued.", body = CapabilityResponse),
        (status = 202, description = "A human must approve first: the approval to wait for.", body = ApprovalPending),
        RequestCapabilityRefusals,
    ),
)]
pub async fn request(
    State(app): State<AppState>,
    RunCaller(run): RunCaller,
    RequestId(rid): RequestId,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CapabilityRequest>,
) -> Result<Response, ApiError> {
    let now = app.clock.now();
    let state = run.state(now);
    if state != RunState::Active {
        return Err(refusals::run_inactive(state));
    }
    let jkt = match app
        .dpop
        .check(&headers, ("POST", "/v1/capabilities"), None, &run.id, now)
    {
        Ok(jkt) => jkt,
        Err(e) => {
            let refusal = refusals::dpop(&app.dpop, e, false, now);
            return Err(refuse_before_policy(
                &app,
                &run,
                rid,
                (&req.action, &req.resource),
                refusal,
            )
            .await);
        }
    };
    let grant = Grant {
        jkt,
        form: Form::Capability,
    };
    Ok(match issue(&app, run, rid, &req, grant).await? {
        Outcome::Issued(i) => (StatusCode::CREATED, Json(i.response)).into_response(),
        Outcome::Pending(p) => (StatusCode::ACCEPTED, Json(p)).into_response(),
    })
}

/// What the signed grant is: a capability (exchanged at `/v1/exchange`), or an
/// OAuth access token for a protected resource (`POST /oauth/token`).
pub(crate) enum Form {
    Capability,
    AccessToken {
        /// The oauth-resource's URL: the token's `aud`.
        audience: String,
        /// The backend's `max_ttl`, on top of the policy's.
        max_ttl: Duration,
        /// The OAuth issuer: the token's `iss`.
        issuer: String,
    },
}

/// How a request is to be granted: its form and the DPoP key it is bound to.
pub(crate) struct Grant {
    pub jkt: Option<String>,
    pub form: Form,
}

pub(crate) struct Issued {
    pub response: CapabilityResponse,
    pub expires_at: i64,
}

pub(crate) enum Outcome {
    Issued(Issued),
    /// A human must approve first.
    Pending(ApprovalPending),
}

/// Decides a request of an active run through the decision layer
/// ([`crate::grant`]) and, if it is granted, signs and records it in the
/// grant's form: capabilities and OAuth access tokens differ only in what is
/// signed. What this door hands out is checked first (ttl, hold, slot, the
/// arguments an approver would read).
pub(crate) async fn issue(
    app: &AppState,
    run: Arc<RunRecord>,
    rid: String,
    req: &CapabilityRequest,
    grant: Grant,
) -> Result<Outcome, ApiError> {
    let door = match grant.form {
        Form::Capability => Door::Capability,
        Form::AccessToken { .. } => Door::Token,
    };
    let requested_ttl = req
        .ttl
        .as_deref()
        .map(parse_duration)
        .transpose()
        .map_err(|e| ApiError::bad_request(ErrorCode::InvalidTtl, e.to_string()))?;

    let hold = req
        .hold
        .as_deref()
        .map(parse_hold)
        .transpose()
        .map_err(|e| ApiError::bad_request(ErrorCode::InvalidHold, e))?;

    if let Some(slot) = &req.slot {
        if slot.is_empty() || slot.len() > 640 || !slot.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ApiError::bad_request(
                ErrorCode::InvalidSlot,
                "slot must be 1-640 printable ASCII characters without spaces",
            ));
        }
    }

    if let Some(at) = req
        .arguments
        .as_ref()
        .and_then(|a| deceptive_at(a, "arguments"))
    {
        return Err(ApiError::bad_request(
            ErrorCode::InvalidArguments,
            format!(
                "{at}: a control, bidirectional, separator or invisible character \
                 (what an approver sees must be what is there; tab and newline are allowed)"
            ),
        ));
    }
    let arguments = req
        .arguments
        .as_ref()
        .map(tessera_client::arguments::canonical)
        .transpose()
        .map_err(|e| ApiError::bad_request(ErrorCode::InvalidArguments, e.to_string()))?;
    if let Some(id) = &req.approval_id {
        if !is_id(id) {
            return Err(refusals::unknown_approval());
        }
    }
    let ask = Ask {
        door,
        run: &run,
        action: &req.action,
        resource: &req.resource,
        requested_ttl,
        arguments: req.arguments.as_ref(),
        request_id: Some(rid),
        detail: None,
        end_run_on_deny: false,
    };
    let decided = crate::grant::decide(app, ask)
        .await
        .map_err(refusals::grant)?;
    let binding = Binding {
        action: req.action.clone(),
        resource: req.resource.clone(),
        arguments: arguments.clone(),
    };
    let permit = match decided.gate(app, binding, req.approval_id.as_deref()).await {
        Ok(permit) => permit,
        Err(Refused::Pending(p)) => return Ok(Outcome::Pending(p)),
        Err(r) => return Err(refusals::grant(r)),
    };
    let issued = sign_and_record(app, permit, req, arguments, (requested_ttl, hold), grant).await;
    match &issued {
        Ok(_) => app.metrics.capability("issued"),
        Err(e) if e.code == ErrorCode::RateLimited => app.metrics.capability("rate_limited"),
        Err(_) => app.metrics.capability("refused"),
    }
    issued.map(Outcome::Issued)
}

/// Where in `v` a key or string holds a character that would make what an
/// approver reads differ from what is there (as in task attributes,
/// [`crate::names::is_deceptive`]); tab and newline are text.
fn deceptive_at(v: &serde_json::Value, at: &str) -> Option<String> {
    let bad = |s: &str| s.chars().any(crate::names::misleads);
    match v {
        serde_json::Value::String(s) if bad(s) => Some(at.to_owned()),
        serde_json::Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, x)| deceptive_at(x, &format!("{at}[{i}]"))),
        serde_json::Value::Object(m) => m.iter().find_map(|(k, x)| {
            if bad(k) {
                Some(format!("{at} (a key)"))
            } else {
                deceptive_at(
                    x,
                    &format!("{at}.{}", k.chars().take(64).collect::<String>()),
                )
            }
        }),
        _ => None,
    }
}

/// Shortest and longest hold: renewals come every third of it, so a shorter
/// one would be mostly renewal traffic; a longer one leaves a dead holder's
/// credentials alive too long to be worth it.
const HOLD_BOUNDS: (u64, u64) = (2, 3600);

fn parse_hold(s: &str) -> Result<i64, String> {
    let d = parse_duration(s).map_err(|e| e.to_string())?.as_secs();
    let (min, max) = HOLD_BOUNDS;
    if d < min || d > max {
        return Err(format!("hold must be between {min}s and {max}s"));
    }
    Ok(d as i64)
}

/// A request of an authenticated run refused before policy for a reason a
/// security team wants to see (a DPoP proof that does not hold): audited as
/// `capability.denied` with the code as its reason, and charged to the run's
/// rate like every refusal.
pub(crate) async fn refuse_before_policy(
    app: &AppState,
    run: &RunRecord,
    rid: String,
    (action, resource): (&str, &str),
    refusal: ApiError,
) -> ApiError {
    let mut audit = crate::grant::event::for_run(run, events::CAPABILITY_DENIED, action, resource);
    audit.request_id = Some(rid);
    app.metrics.capability("refused");
    let reason = refusal.code.as_str();
    let detail = Some(refusal.message.clone());
    match record::refuse(app, Door::Capability, run, audit, reason, detail).await {
        Ok(()) => refusal,
        Err(r) => refusals::grant(r),
    }
}

/// Signs what `permit` allows in the grant's form and records it; the token
/// leaves only after the record committed.
async fn sign_and_record(
    app: &AppState,
    mut permit: Permit,
    req: &CapabilityRequest,
    arguments: Option<String>,
    (requested_ttl, hold_secs): (Option<Duration>, Option<i64>),
    grant: Grant,
) -> Result<Issued, ApiError> {
    // The decision's audit row becomes the issuance's (taken, not copied).
    let mut audit = std::mem::take(&mut permit.decided.audit);
    let d = &permit.decided;
    let (run, now, constraints) = (&d.run, d.now, &d.constraints);
    // One rule for what a capability gets, shared with `tessera policy explain/test`.
    let effective = Effective::new(constraints, &app.config.limits, requested_ttl);
    let mut expires_at = (now + effective.ttl.value.as_secs() as i64).min(run.expires_at);
    if let Form::AccessToken { max_ttl, .. } = &grant.form {
        expires_at = expires_at.min(now + max_ttl.as_secs() as i64);
    }
    // An approved capability is single-use unless a gated permit's @uses says otherwise.
    let uses = if permit.redeemed.is_some() {
        constraints.approved_uses(effective.uses.value)
    } else {
        effective.uses.value
    };
    // The hash binds `{}` when an approval was redeemed without arguments; the
    // recorded arguments stay as asked, so re-authorization decides the
    // request as it was made.
    let args_hash = match &permit.redeemed {
        Some(r) => Some(r.args_hash.clone()),
        None => arguments
            .as_deref()
            .map(tessera_client::arguments::hash_canonical),
    };
    let approval = permit
        .redeemed
        .as_ref()
        .map(|r| (r.approval.clone(), r.approvers.clone()));

    let keys = app.keys.snapshot();
    let jti = new_id();
    let claims = CapabilityClaims {
        iss: app.config.issuer.clone(),
        aud: app.config.capability_audience(),
        sub: run.user.clone(),
        jti: jti.clone().into(),
        iat: now,
        nbf: now,
        exp: expires_at,
        run: run.id.clone().into(),
        task: run.task_id.clone(),
        rt: run.runtime_id.clone().into(),
        act: req.action.clone(),
        res: req.resource.clone(),
        uses,
        cnf: grant.jkt.as_ref().map(|j| serde_json::json!({ "jkt": j })),
        args: args_hash.clone(),
    };
    let signer = keys.signer(now);
    let token = match &grant.form {
        Form::Capability => jwt::encode(signer, CAPABILITY_TYP, &claims),
        Form::AccessToken {
            audience, issuer, ..
        } => jwt::encode(
            signer,
            ACCESS_TOKEN_TYP,
            &super::oauth::access_token_claims(&claims, issuer, audience),
        ),
    };
    audit.capability_id = Some(jti.clone());
    let mut extra = hold_secs.map(|h| format!(" hold={h}s")).unwrap_or_default();
    if req.slot.is_some() {
        extra.push_str(" slot=yes");
    }
    if let Some(h) = &args_hash {
        extra.push_str(&format!(" args={h}"));
    }
    if let Some((id, _)) = &approval {
        extra.push_str(&format!(" approval={id}"));
    }
    if let Some(jkt) = &grant.jkt {
        extra.push_str(&format!(" jkt={jkt}"));
    }
    if let Form::AccessToken { audience, .. } = &grant.form {
        extra.push_str(&format!(" form=access_token aud={audience}"));
    }
    audit.detail = Some(format!(
        "policies={} ttl={}s uses={} kid={}{extra}",
        d.policies.join(","),
        expires_at - now,
        uses,
        signer.kid()
    ));
    let record = CapabilityRecord {
        id: jti.clone(),
        run_id: run.id.clone(),
        kid: signer.kid().to_owned(),
        action: req.action.clone(),
        resource: req.resource.clone(),
        backend: d.backend.clone(),
        policies: d.policies.join(","),
        issued_at: now,
        expires_at,
        uses,
        hold_secs,
        slot: req.slot.clone(),
        arguments,
        args_hash: args_hash.clone(),
        approval,
    };
    let held = Arc::new(HeldCapability::from(&record));
    permit
        .issue(app, record, audit)
        .await
        .map_err(refusals::grant)?;
    // The exchange will compare its claims with this, without a read.
    app.held.insert(jti.clone(), (held, run.clone()));
    Ok(Issued {
        response: CapabilityResponse {
            capability_id: jti.into(),
            token,
            expires_at: rfc3339(expires_at),
            uses,
            lapses_at: hold_secs.map(|h| rfc3339(crate::store::holds::lapse_at(now, h))),
            args: args_hash,
        },
        expires_at,
    })
}

refusals!(RevokeCapabilityRefusals {
    401 => [Unauthenticated],
    404 => [NotFound],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Revoke a capability
///
/// Revokes one capability. A run may revoke only its own capabilities; the admin may revoke
/// any. Revoking an already revoked capability (or one whose run has ended) is not an error:
/// `revoked` is false. No request body.
#[utoipa::path(
    post,
    path = "/v1/capabilities/{id}/revoke",
    operation_id = "revokeCapability",
    tags = ["capabilities"],
    security(("runToken" = []), ("adminToken" = [])),
    params(IdPath),
    responses(
        (status = 200, description = "Revocation result.", body = RevokeCapabilityResponse),
        RevokeCapabilityRefusals,
    ),
)]
pub async fn revoke(
    State(app): State<AppState>,
    caller: RunOrAdmin,
    RequestId(rid): RequestId,
    Path(id): Path<String>,
) -> Result<Json<RevokeCapabilityResponse>, ApiError> {
    if !is_id(&id) {
        return Err(ApiError::not_found("capability"));
    }
    let (by, actor) = match &caller {
        RunOrAdmin::Run(run) => (Revoker::Run(run.id.clone()), format!("run:{}", run.id)),
        RunOrAdmin::Admin => (Revoker::Admin, "admin".to_owned()),
    };
    let mut audit = AuditEvent::new(events::CAPABILITY_REVOKED, actor, "allow");
    audit.capability_id = Some(id.clone());
    audit.request_id = Some(rid);
    let revoked = app
        .store
        .writer()
        .submit(RevokeCapability {
            capability_id: id.clone(),
            by,
            audit,
            reason: "revoked",
            audit_noop: true,
        })
        .await?
        .ok_or_else(|| ApiError::not_found("capability"))?;
    app.revocation_wakeup.notify_one();
    Ok(Json(RevokeCapabilityResponse {
        capability_id: id.into(),
        revoked,
    }))
}

/// Most ids one renewal may name.
const MAX_RENEW: usize = 100;

refusals!(RenewHoldsRefusals {
    400 => [InvalidRequest, InvalidJson],
    401 => [Unauthenticated],
    403 => [RunEnded, RunExpired],
    413 => [BodyTooLarge],
    415 => [UnsupportedMediaType],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Renew held capabilities
///
/// The holder is alive: moves the lapse of each named capability of this run forward by its
/// hold. Not audited (it decides nothing; a lapse is audited as `capability.lapsed`).
#[utoipa::path(
    post,
    path = "/v1/capabilities/renew",
    operation_id = "renewHolds",
    tags = ["capabilities"],
    security(("runToken" = [])),
    request_body = RenewHoldsRequest,
    responses(
        (status = 200, description = "Renewal result.", body = RenewHoldsResponse),
        RenewHoldsRefusals,
    ),
)]
// Not audited: it decides nothing (the lapse is).
pub async fn renew(
    State(app): State<AppState>,
    RunCaller(run): RunCaller,
    ApiJson(req): ApiJson<RenewHoldsRequest>,
) -> Result<Json<RenewHoldsResponse>, ApiError> {
    if req.capability_ids.is_empty() || req.capability_ids.len() > MAX_RENEW {
        return Err(ApiError::bad_request(
            ErrorCode::InvalidRequest,
            format!("capability_ids must name 1 to {MAX_RENEW} capabilities"),
        ));
    }
    let state = run.state(app.clock.now());
    if state != RunState::Active {
        return Err(refusals::run_inactive(state));
    }
    let mut ids: Vec<String> = Vec::with_capacity(req.capability_ids.len());
    for id in req.capability_ids {
        if !is_id(&id) {
            return Err(ApiError::bad_request(
                ErrorCode::InvalidRequest,
                "capability_ids must be capability ids",
            ));
        }
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    let renewed = app
        .store
        .writer()
        .submit(RenewHolds {
            run_id: run.id.clone(),
            ids: ids.clone(),
        })
        .await?;
    let lapsed = ids
        .into_iter()
        .filter(|id| !renewed.iter().any(|(r, _)| r == id))
        .collect();
    Ok(Json(RenewHoldsResponse {
        renewed: renewed
            .into_iter()
            .map(|(capability_id, at)| RenewedHold {
                capability_id: capability_id.into(),
                lapses_at: rfc3339(at),
            })
            .collect(),
        lapsed,
    }))
}
