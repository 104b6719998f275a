//! `POST /oauth/token`: the RFC 8693 token exchange — a run token for an
//! access token to one protected resource (RFC 8707 `resource`), with one
//! scope, decided as a capability request is, optionally bound to a DPoP key.
//!
//! Why one scope per token: a token is a capability, one action on one
//! resource, decided, limited and revoked as one; a client that needs two
//! scopes asks twice and gets two tokens policy decided separately.

use super::{form, no_store, OAuthFailure};
use crate::api::capabilities::{issue, refuse_before_policy, Form, Grant, Outcome};
use crate::api::extract::{run_from, RequestId};
use crate::api::refusals;
use crate::app::AppState;
use crate::backends::settings::BackendConfig;
use crate::store::runs::RunState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use tessera_client::types::{
    CapabilityRequest, ErrorBody, ErrorCode, OAuthError, TokenExchangeRequest,
    TokenExchangeResponse, ACCESS_TOKEN_TYPE, GRANT_TYPE_TOKEN_EXCHANGE, RUN_TOKEN_TYPE,
};

/// Token exchange (RFC 8693)
///
/// A run's token (`subject_token`, type `urn:tessera:params:oauth:token-type:run_token`) is
/// exchanged for an access token to one registered protected resource (`resource`, RFC 8707:
/// the URL of an `oauth-resource` backend, byte for byte) with one `scope`. Policy decides it
/// exactly as a capability request for action = the scope and resource =
/// `BACKEND:RESOURCE_URL` (same `@ttl`, `@rate`, `@approval`, audit), bounded by the backend's
/// `max_ttl` and the run. The access token is a JWT (`typ` `at+jwt`, RFC 9068: `aud` = the
/// resource, `scope`, `sub` = the user, `act` = the run, `client_id`, `run`, `task`) that dies
/// with the run (`POST /oauth/introspect`). With a `DPoP` proof (RFC 9449) it is bound to the
/// proof's key (`cnf.jkt`, `token_type` `DPoP`). No client authentication: the run token is
/// the credential. Errors are RFC 6749 JSON with Tessera's `code` and `request_id`.
#[utoipa::path(
    post,
    path = "/oauth/token",
    operation_id = "oauthToken",
    tags = ["oauth"],
    request_body(content = TokenExchangeRequest, content_type = "application/x-www-form-urlencoded"),
    params(("DPoP" = Option<String>, Header, description = "A DPoP proof (RFC 9449) to bind the token to.")),
    responses(
        (status = 200, description = "The access token.", body = TokenExchangeResponse),
        (status = 400, description = "RFC 6749 error: `invalid_request`, `unsupported_grant_type`, `invalid_grant`, `invalid_target`, `invalid_scope`, `authorization_pending`, `invalid_dpop_proof`, `use_dpop_nonce`.", body = OAuthError),
        (status = 404, description = "No `[oauth] issuer` is configured.", body = OAuthError),
        (status = 413, description = "`body_too_large`.", body = ErrorBody),
        (status = 429, description = "`slow_down`: a rate limit; retry after `Retry-After`.", body = OAuthError),
        (status = 500, description = "`server_error`.", body = OAuthError),
        (status = 503, description = "`temporarily_unavailable`.", body = OAuthError),
    ),
)]
pub async fn token(
    State(app): State<AppState>,
    RequestId(rid): RequestId,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match exchange(&app, rid.clone(), &headers, &body).await {
        Ok(resp) => resp,
        Err(f) => f.respond(rid),
    }
}

async fn exchange(
    app: &AppState,
    rid: String,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, OAuthFailure> {
    let Some(issuer) = app.config.oauth.issuer.clone() else {
        return Err(OAuthFailure::not_configured());
    };
    let params = form(headers, body)?;
    let get = |k: &str| params.get(k).map(String::as_str);
    let required = |k: &'static str| {
        get(k)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| OAuthFailure::invalid_request(format!("the {k} parameter is required")))
    };
    if required("grant_type")? != GRANT_TYPE_TOKEN_EXCHANGE {
        return Err(OAuthFailure::new(
            "unsupported_grant_type",
            ErrorCode::InvalidRequest,
            format!("only {GRANT_TYPE_TOKEN_EXCHANGE} is supported"),
        ));
    }
    if required("subject_token_type")? != RUN_TOKEN_TYPE {
        return Err(OAuthFailure::invalid_request(format!(
            "subject_token_type must be {RUN_TOKEN_TYPE}"
        )));
    }
    if let Some(t) = get("requested_token_type") {
        if t != ACCESS_TOKEN_TYPE {
            return Err(OAuthFailure::invalid_request(format!(
                "requested_token_type must be {ACCESS_TOKEN_TYPE}"
            )));
        }
    }
    if get("actor_token").is_some() {
        return Err(OAuthFailure::invalid_request(
            "actor_token is not supported: the run is the actor",
        ));
    }
    let resource = required("resource")?;
    let target = app.config.backends.iter().find_map(|(name, b)| match b {
        BackendConfig::OAuthResource(r) if r.resource == resource => Some((name, r)),
        _ => None,
    });
    let Some((backend, config)) = target else {
        return Err(OAuthFailure::new(
            "invalid_target",
            ErrorCode::InvalidResource,
            "resource is not a registered protected resource (its URL byte for byte)",
        ));
    };
    if get("audience").is_some_and(|a| a != resource) {
        return Err(OAuthFailure::new(
            "invalid_target",
            ErrorCode::InvalidResource,
            "audience, when given, must be the resource",
        ));
    }
    let scope = required("scope")?;
    if scope.contains(' ') {
        return Err(OAuthFailure::new(
            "invalid_scope",
            ErrorCode::InvalidAction,
            "one scope per token: ask for each scope separately",
        ));
    }
    let run = run_from(app, required("subject_token")?)
        .await
        .map_err(OAuthFailure::from_api)?;
    let now = app.clock.now();
    let state = run.state(now);
    if state != RunState::Active {
        return Err(OAuthFailure::from_api(refusals::run_inactive(state)));
    }
    let cedar_resource = format!("{backend}:{resource}");
    let jkt = match app
        .dpop
        .check(headers, ("POST", "/oauth/token"), None, &run.id, now)
    {
        Ok(jkt) => jkt,
        Err(e) => {
            let refusal = refusals::dpop(&app.dpop, e, false, now);
            let refusal =
                refuse_before_policy(app, &run, rid, (scope, &cedar_resource), refusal).await;
            return Err(OAuthFailure::from_api(refusal));
        }
    };
    let bound = jkt.is_some();
    let req = CapabilityRequest {
        action: scope.to_owned(),
        resource: cedar_resource,
        ttl: None,
        hold: None,
        slot: None,
        approval_id: get("approval_id").map(Into::into),
        arguments: None,
    };
    let grant = Grant {
        jkt,
        form: Form::AccessToken {
            audience: config.resource.clone(),
            max_ttl: config.max_ttl,
            issuer,
        },
    };
    match issue(app, run, rid, &req, grant).await {
        Ok(Outcome::Issued(i)) => {
            let body = TokenExchangeResponse {
                access_token: i.response.token,
                issued_token_type: ACCESS_TOKEN_TYPE.to_owned(),
                token_type: if bound { "DPoP" } else { "Bearer" }.to_owned(),
                expires_in: (i.expires_at - now).max(0),
                scope: scope.to_owned(),
            };
            Ok((StatusCode::OK, no_store(), Json(body)).into_response())
        }
        Ok(Outcome::Pending(p)) => Err(OAuthFailure {
            approval_id: Some(p.approval_id.into()),
            ..OAuthFailure::new(
                "authorization_pending",
                ErrorCode::ApprovalPending,
                "a human must approve this token first: wait for the approval \
                 (GET /v1/approvals/{approval_id}?wait=30s), then ask again with approval_id",
            )
        }),
        Err(e) => Err(OAuthFailure::from_api(e)),
    }
}
