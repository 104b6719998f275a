//! `/v1/exchange`: a capability buys one downstream credential.
//!
//! The capability is the credential: its signature, type, issuer, audience and
//! times are checked first; then its claims are compared with the row the store
//! recorded at issuance and the recorded request is decided again under the
//! policy in force ([`crate::grant::reauthorize`]: a mismatch is `invalid_token`, a
//! capability the policy no longer grants is revoked and refused with
//! `policy_changed`); then the store — not any cache — decides whether it is
//! revoked, its run ended or expired, or its uses ran out, and takes one use
//! atomically while recording the lease. Only then is the downstream credential
//! minted; a backend failure marks the reserved lease failed.

use super::extract::{ApiJson, RequestId};
use super::refusals;
use crate::api::openapi::refusals;
use crate::app::AppState;
use crate::audit::{events, AuditEvent};
use crate::backends::Grant;
use crate::capability::{self, CapabilityClaims, TokenError};
use crate::clock::rfc3339;
use crate::error::ApiError;
use crate::grant::reauthorize;
use crate::ids::new_id;
use crate::store::capabilities::{
    self, lease_revoked, ConsumeOutcome, ConsumeUse, FailLease, LeaseRecord, RevokeCapability,
    Revoker,
};
use crate::store::revocations::RearmRevocation;
use crate::store::writer::AppendAudit;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use std::sync::Arc;
use tessera_client::types::ErrorCode;
use tessera_client::types::{ExchangeRequest, ExchangeResponse};

/// Verifies a capability against the keys in memory. An unknown `kid` is
/// refused without reading the store: every key is published, and loaded by
/// every replica's periodic refresh, before it signs
/// ([`crate::keys::ring_set`]), so a genuine token's key is always known here
/// and a forged `kid` costs nothing but this lookup.
pub async fn verify_capability(
    app: &AppState,
    token: &str,
) -> Result<CapabilityClaims, TokenError> {
    let now = app.clock.now();
    let aud = app.config.capability_audience();
    capability::verify(token, &app.keys.snapshot(), &app.config.issuer, &aud, now)
}

refusals!(ExchangeRefusals {
    400 => [InvalidRequest, InvalidJson, InvalidAction, SessionPolicyTooLarge, UserNotAwsCompatible, RunNotAwsCompatible],
    401 => [InvalidToken, TokenExpired, InvalidDpopProof, UseDpopNonce],
    403 => [CapabilityRevoked, RunEnded, RunExpired, UsesExhausted, UnknownBackend, PolicyChanged, CapabilityLapsed, LeaseRevoked],
    413 => [BodyTooLarge],
    415 => [UnsupportedMediaType],
    422 => [BackendRejected],
    500 => [Internal],
    502 => [BackendRefused],
    503 => [StoreUnavailable, BackendUnavailable, BackendUnsafeDefaults, BackendThrottled],
});

/// Exchange a capability for a downstream credential
///
/// No `Authorization` header: the capability in the body is the credential. Its signature,
/// `typ`, issuer, audience and times are checked first (`401 invalid_token` / `401
/// token_expired`); then its claims (`res`, `act`, `sub`, `run`, `rt`, `task`, `iat`, `exp`,
/// `uses`, `jti`) are compared with the capability the store recorded and its run (`401
/// invalid_token` on any difference, audited `exchange.refused` with reason `claims_mismatch`);
/// then the recorded request is decided again under the policy in force, and a capability it
/// would no longer issue is revoked with its leases and refused (`403 policy_changed`); then
/// the store decides whether it is revoked, its run ended or expired, or its uses ran out, and
/// takes one use atomically while recording the lease. A credential minted for an exchange the
/// store then refuses is revoked at the backend before the refusal is returned.
#[utoipa::path(
    post,
    path = "/v1/exchange",
    operation_id = "exchange",
    tags = ["exchange"],
    params(("DPoP" = Option<String>, Header, description = "Required for a capability bound to a DPoP key (`cnf.jkt`): a proof by that key for `POST` on this URL with `ath` of the capability (RFC 9449).")),
    request_body(content = ExchangeRequest, example = json!({"capability": "eyJhbGciOiJFZERTQSIsInR5cCI6InRzci1jYXArand0Iiwia2lkIjoiLi4uIn0.eyJ...In0.c2ln"})),
    responses(
        (status = 200, description = "Downstream credential issued.", body = ExchangeResponse),
        ExchangeRefusals,
    ),
)]
pub async fn exchange(
    State(app): State<AppState>,
    RequestId(rid): RequestId,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ExchangeRequest>,
) -> Result<Json<ExchangeResponse>, ApiError> {
    // Unverifiable tokens are counted and logged, not audited: they cannot be
    // attributed to anyone, and auditing them would let anyone grow the log.
    let claims = match verify_capability(&app, &req.capability).await {
        Ok(c) => c,
        Err(e) => {
            app.metrics.exchange("invalid_token");
            return Err(refusals::token(e));
        }
    };
    let mut audit = AuditEvent::new(
        events::EXCHANGE_SUCCEEDED,
        format!("run:{}", claims.run),
        "allow",
    );
    audit.run_id = Some(claims.run.clone().into());
    audit.capability_id = Some(claims.jti.clone().into());
    audit.user = Some(claims.sub.clone());
    audit.task_id = Some(claims.task.clone());
    audit.action = Some(claims.act.clone());
    audit.resource = Some(claims.res.clone());
    audit.request_id = Some(rid);
    // A capability bound to a DPoP key is worth nothing without the key.
    if let Some(jkt) = bound_key(&claims) {
        let now = app.clock.now();
        if let Err(e) = app.dpop.check_bound(
            &headers,
            ("POST", "/v1/exchange"),
            (&req.capability, jkt),
            &claims.run,
            now,
        ) {
            app.metrics.exchange("invalid_dpop_proof");
            let mut refused = audit.clone();
            refused.event = events::EXCHANGE_REFUSED;
            refused.decision = "deny";
            refused.reason = Some("invalid_dpop_proof".into());
            refused.detail = Some(format!("dpop={e}"));
            app.store.writer().submit(AppendAudit(refused)).await?;
            return Err(refusals::dpop(&app.dpop, e, true, now));
        }
    }
    if let Some(refusal) = reauthorize(&app, &claims, &audit).await? {
        return Err(refusal);
    }
    let backend = claims
        .res
        .split_once(':')
        .and_then(|(name, path)| Some((name, path, app.backends.get(name).cloned()?)));
    let Some((backend_name, path, backend)) = backend else {
        app.metrics.exchange("backend_gone");
        audit.event = events::EXCHANGE_REFUSED;
        audit.decision = "deny";
        audit.reason = Some("unknown_backend".into());
        app.store.writer().submit(AppendAudit(audit)).await?;
        return Err(ApiError::forbidden(
            ErrorCode::UnknownBackend,
            "the capability's backend is no longer configured",
        ));
    };

    // 1. Reserve: take one use and record the lease, atomically. Nothing is minted
    //    downstream for a capability the store refuses.
    let lease_id = new_id();
    audit.detail = Some(format!("lease={lease_id} backend={backend_name}"));
    let lease = LeaseRecord {
        id: lease_id.clone(),
        capability_id: claims.jti.clone().into(),
        run_id: claims.run.clone().into(),
        backend: backend_name.to_owned(),
        kind: backend.kind().to_owned(),
        expires_at: claims.exp,
        downstream_ref: backend.downstream_ref(&claims, &lease_id),
    };
    let downstream_ref = lease.downstream_ref.clone();
    let outcome = app
        .store
        .writer()
        .submit(ConsumeUse {
            lease,
            audit: audit.clone(),
        })
        .await?;
    let ConsumeOutcome::Consumed { uses_left } = outcome else {
        app.metrics.exchange(outcome.reason());
        return Err(refusals::exchange(&outcome));
    };

    // 2. Mint. If the backend fails, the reserved lease is marked failed (the use
    //    stays spent: failing closed never hands out a second credential).
    let now = app.clock.now();
    let grant = Grant {
        claims: &claims,
        lease_id: &lease_id,
        path,
        downstream_ref: downstream_ref.as_deref(),
        now,
    };
    crate::failpoint::hit("exchange.before_issue").await;
    match backend.issue(grant).await {
        Ok(_) if downstream_ref.is_some() && lease_revoked_meanwhile(&app, &lease_id).await? => {
            // The run ended (or the capability was revoked) while the user was
            // being created: its removal may already have run and missed it.
            app.store
                .writer()
                .submit(RearmRevocation {
                    lease_id: lease_id.clone(),
                })
                .await?;
            app.revocation_wakeup.notify_one();
            app.metrics.exchange("revoked_during_issue");
            Err(ApiError::forbidden(
                ErrorCode::LeaseRevoked,
                "the capability or its run was revoked while the credential was issued",
            ))
        }
        Ok(issued) => {
            app.metrics.exchange("ok");
            Ok(Json(ExchangeResponse {
                kind: backend.credential_kind().to_owned(),
                lease_id: lease_id.into(),
                expires_at: rfc3339(issued.expires_at.min(claims.exp)),
                uses_left,
                args: claims.args.clone(),
                fields: issued.fields,
            }))
        }
        Err(e) => {
            tracing::error!(error = %e, backend = backend_name, "backend could not issue");
            let api_error = refusals::backend(&e);
            let cause: String = e.to_string().chars().take(300).collect();
            audit.detail = Some(format!(
                "{} error={cause}",
                audit.detail.take().unwrap_or_default()
            ));
            app.metrics.exchange(api_error.code.as_str());
            audit.event = events::LEASE_FAILED;
            audit.decision = "error";
            audit.reason = Some(api_error.code.as_str().into());
            app.store
                .writer()
                .submit(FailLease { lease_id, audit })
                .await?;
            app.revocation_wakeup.notify_one();
            Err(api_error)
        }
    }
}

/// The DPoP key thumbprint a capability is bound to (`cnf.jkt`), if any.
pub fn bound_key(claims: &CapabilityClaims) -> Option<&str> {
    claims.cnf.as_ref()?.get("jkt")?.as_str()
}

/// Step 0: the claims must be what the store recorded, and the policy in force
/// must still issue the capability; one it no longer would is revoked here.
/// `None`: go on (a capability the store does not know, or that is revoked or of
/// an ended run, is refused by the reservation with its own code).
async fn reauthorize(
    app: &AppState,
    claims: &CapabilityClaims,
    audit: &AuditEvent,
) -> Result<Option<ApiError>, ApiError> {
    let (held, run) = match app.held.get(&claims.jti) {
        Some(hit) => hit,
        None => match capabilities::held(&app.store, &claims.jti).await? {
            Some((held, run)) => {
                let entry = (Arc::new(held), Arc::new(run));
                app.held.insert(claims.jti.clone().into(), entry.clone());
                entry
            }
            None => return Ok(None),
        },
    };
    let mut refused = audit.clone();
    refused.event = events::EXCHANGE_REFUSED;
    refused.decision = "deny";
    refused.run_id = Some(held.run_id.clone());
    refused.user = Some(run.user.clone());
    refused.task_id = Some(run.task_id.clone());
    refused.action = Some(held.action.clone());
    refused.resource = Some(held.resource.clone());
    let differ = reauthorize::mismatched_claims(claims, &held, &run);
    if !differ.is_empty() {
        tracing::warn!(capability = %held.id, claims = ?differ, "a validly signed capability claims other than what was issued");
        app.metrics.exchange("claims_mismatch");
        refused.reason = Some("claims_mismatch".into());
        refused.detail = Some(format!("claims={}", differ.join(",")));
        app.store.writer().submit(AppendAudit(refused)).await?;
        return Ok(Some(ApiError::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::InvalidToken,
            "capability is not valid",
        )));
    }
    let now = app.clock.now();
    let policy = app.policy();
    let limits = &app.config.limits;
    if reauthorize::still_permitted(&policy, &app.config.backends, limits, &held, &run, now) {
        return Ok(None);
    }
    let mut revoked = AuditEvent::new(events::CAPABILITY_REVOKED, "policy", "allow");
    revoked.capability_id = Some(held.id.clone());
    revoked.user = Some(run.user.clone());
    revoked.task_id = Some(run.task_id.clone());
    revoked.action = Some(held.action.clone());
    revoked.resource = Some(held.resource.clone());
    revoked.request_id = audit.request_id.clone();
    revoked.reason = Some("policy_changed".into());
    let now_revoked = app
        .store
        .writer()
        .submit(RevokeCapability {
            capability_id: held.id.clone(),
            by: Revoker::Admin,
            audit: revoked,
            reason: "policy_changed",
            audit_noop: false,
        })
        .await?;
    if now_revoked != Some(true) {
        // Already revoked (its run ended, a reload, an admin): the reservation
        // refuses it with that code.
        return Ok(None);
    }
    app.revocation_wakeup.notify_one();
    refused.reason = Some("policy_changed".into());
    app.store.writer().submit(AppendAudit(refused)).await?;
    app.metrics.exchange("policy_changed");
    Ok(Some(ApiError::forbidden(
        ErrorCode::PolicyChanged,
        "the policy in force no longer grants this capability; it has been revoked",
    )))
}

/// Whether the lease was revoked while its credential was being issued.
async fn lease_revoked_meanwhile(app: &AppState, lease_id: &str) -> Result<bool, ApiError> {
    Ok(matches!(
        lease_revoked(&app.store, lease_id).await?,
        Some(Some(_))
    ))
}
