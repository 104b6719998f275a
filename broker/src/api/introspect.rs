//! `/v1/introspect`: RFC 7662-style token introspection for runtimes and admins.
//!
//! Answers `{"active": false}` — and nothing else — for anything that is not a
//! live token this caller may see: bad signature, wrong type/issuer/audience,
//! expired, revoked, run ended or expired, unknown, or another runtime's run.
//! Liveness is read from the store on every call.

use super::exchange::verify_capability;
use super::extract::{ApiJson, RuntimeOrAdmin};
use crate::api::openapi::refusals;
use crate::app::AppState;
use crate::backends::token::{AccessTokenClaims, ACCESS_TOKEN_TYP};
use crate::capability::check_times_and_parties;
use crate::config::BackendConfig;
use crate::error::ApiError;
use crate::keys::jwt;
use crate::store::capabilities::{lease_revoked, status};
use axum::extract::State;
use axum::Json;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::Value;
use tessera_client::types::{
    AccessTokenIntrospection, CapabilityIntrospection, IntrospectRequest, IntrospectResponse,
};

fn inactive() -> Json<IntrospectResponse> {
    Json(IntrospectResponse::inactive())
}

/// The `typ` a token claims, without trusting anything else about it.
fn claimed_typ(token: &str) -> Option<String> {
    let header = token.split('.').next()?;
    let bytes = URL_SAFE_NO_PAD.decode(header).ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    v.get("typ")?.as_str().map(str::to_owned)
}

refusals!(IntrospectRefusals {
    400 => [InvalidRequest, InvalidJson],
    401 => [Unauthenticated],
    413 => [BodyTooLarge],
    415 => [UnsupportedMediaType],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Introspect a capability or access token (RFC 7662 style)
///
/// Accepts a capability (`typ` `tsr-cap+jwt`) or an access token minted by a `token` backend
/// (`typ` `at+jwt`). Answers `{"active": false}` — and nothing else — for anything that is not
/// a live token this caller may see: bad signature, wrong type/issuer/audience, expired,
/// revoked, run ended or expired, unknown, or another runtime's run. Liveness is read from the
/// store on every call. For a live token the response is its claims plus `active: true` and
/// `token_type` (and, for a capability, `scope` and `uses_left`).
#[utoipa::path(
    post,
    path = "/v1/introspect",
    operation_id = "introspect",
    tags = ["introspection"],
    security(("runtimeKey" = []), ("adminToken" = [])),
    params(("DPoP" = Option<String>, Header, description = "For a capability bound to a DPoP key: a proof by that key for `POST` on this URL with `ath` of the token; without it a bound capability is `{\"active\": false}`.")),
    request_body(content = IntrospectRequest, example = json!({"token": "eyJhbGciOiJFZERTQSIsInR5cCI6InRzci1jYXArand0Iiwia2lkIjoiLi4uIn0.eyJ...In0.c2ln"})),
    responses(
        (status = 200, description = "Introspection result.", body = IntrospectResponse),
        IntrospectRefusals,
    ),
)]
pub async fn introspect(
    State(app): State<AppState>,
    caller: RuntimeOrAdmin,
    headers: axum::http::HeaderMap,
    ApiJson(req): ApiJson<IntrospectRequest>,
) -> Result<Json<IntrospectResponse>, ApiError> {
    let now = app.clock.now();
    if claimed_typ(&req.token).as_deref() == Some(ACCESS_TOKEN_TYP) {
        return access_token(&app, &caller, &req.token, now).await;
    }
    let Ok(claims) = verify_capability(&app, &req.token).await else {
        return Ok(inactive());
    };
    // A bound capability is shown only to whoever holds its key.
    if let Some(jkt) = super::exchange::bound_key(&claims) {
        if app
            .dpop
            .check_bound(
                &headers,
                ("POST", "/v1/introspect"),
                (&req.token, jkt),
                &claims.run,
                now,
            )
            .is_err()
        {
            return Ok(inactive());
        }
    }
    let Some(st) = status(&app.store, &claims.jti, now).await? else {
        return Ok(inactive());
    };
    let visible = caller.runtime_id().is_none_or(|rt| rt == st.runtime_id);
    if !visible || st.run_id != claims.run || !st.is_active(now) {
        return Ok(inactive());
    }
    Ok(Json(IntrospectResponse::Capability(
        CapabilityIntrospection {
            active: true,
            token_type: "capability".into(),
            scope: claims.act.clone(),
            uses_left: st.uses_left,
            claims,
        },
    )))
}

async fn access_token(
    app: &AppState,
    caller: &RuntimeOrAdmin,
    token: &str,
    now: i64,
) -> Result<Json<IntrospectResponse>, ApiError> {
    let Ok((claims, _kid)) =
        jwt::verify::<AccessTokenClaims>(token, ACCESS_TOKEN_TYP, &app.keys.snapshot(), now)
    else {
        return Ok(inactive());
    };
    let audience_ok = app
        .config
        .backends
        .values()
        .any(|b| matches!(b, BackendConfig::Token(t) if t.audience == claims.aud));
    if !audience_ok
        || check_times_and_parties(
            &claims.iss,
            &claims.aud,
            claims.nbf,
            claims.exp,
            &app.config.issuer,
            &claims.aud,
            now,
        )
        .is_err()
    {
        return Ok(inactive());
    }
    match lease_revoked(&app.store, &claims.jti).await? {
        Some(None) => {}
        _ => return Ok(inactive()),
    }
    let Some(st) = status(&app.store, &claims.cap, now).await? else {
        return Ok(inactive());
    };
    let visible = caller.runtime_id().is_none_or(|rt| rt == st.runtime_id);
    if !visible || !st.is_alive(now) {
        return Ok(inactive());
    }
    Ok(Json(IntrospectResponse::AccessToken(
        AccessTokenIntrospection {
            active: true,
            token_type: "access_token".into(),
            claims,
        },
    )))
}
