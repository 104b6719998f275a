//! `POST /oauth/introspect` (RFC 7662): a resource server asks whether an
//! access token it was shown is live — so a token of a run that ended, or
//! that the policy in force no longer grants, is refused at once, before its
//! `exp`.
//!
//! The caller is the resource server itself, authenticated with the
//! `oauth-resource` backend's name and introspection secret (HTTP Basic, or
//! the form's `client_id`/`client_secret`), and it learns only about tokens
//! for *its* resource: any other token is `{"active": false}`, as is anything
//! that does not verify, so introspection is no oracle for other resources.

use super::{form, no_store, OAuthFailure};
use crate::api::extract::RequestId;
use crate::app::AppState;
use crate::backends::settings::BackendConfig;
use crate::backends::token::ACCESS_TOKEN_TYP;
use crate::capability::check_times_and_parties;
use crate::grant::reauthorize;
use crate::keys::jwt;
use crate::store::capabilities::{self, status};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use tessera_client::types::{
    ErrorBody, ErrorCode, InactiveIntrospection, OAuthAccessTokenClaims, OAuthActiveToken,
    OAuthError, OAuthIntrospection,
};

/// Introspect an access token (RFC 7662), for resource servers
///
/// The resource server authenticates with its `oauth-resource` backend's name as `client_id`
/// and that backend's introspection secret (HTTP Basic, or `client_id`/`client_secret` in the
/// form); a wrong or missing credential is 401 `invalid_client`. Form: `token` (and optionally
/// `token_type_hint`). Answers `{"active": false}` — and nothing else — unless the token is a
/// live access token for this resource server's resource: signed by Tessera, not expired,
/// its record not revoked, its run active, and still granted by the policy in force. Liveness
/// is read from the store on every call. A live token's answer is its claims, `active: true`
/// and `token_type` (`DPoP` when bound: the resource server checks the DPoP proof itself
/// against `cnf.jkt`, RFC 9449 §7).
#[utoipa::path(
    post,
    path = "/oauth/introspect",
    operation_id = "oauthIntrospect",
    tags = ["oauth"],
    security(("resourceServer" = [])),
    request_body(content = IntrospectForm, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "Introspection result.", body = OAuthIntrospection),
        (status = 400, description = "RFC 6749 error: `invalid_request`.", body = OAuthError),
        (status = 401, description = "`invalid_client`: no or a wrong resource-server credential.", body = OAuthError),
        (status = 404, description = "No `[oauth] issuer` is configured.", body = OAuthError),
        (status = 413, description = "`body_too_large`.", body = ErrorBody),
        (status = 503, description = "`temporarily_unavailable`.", body = OAuthError),
        (status = 500, description = "`server_error`.", body = OAuthError),
    ),
)]
pub async fn introspect(
    State(app): State<AppState>,
    RequestId(rid): RequestId,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match answer(&app, &headers, &body).await {
        Ok(r) => (StatusCode::OK, no_store(), Json(r)).into_response(),
        Err(f) => f.respond(rid),
    }
}

/// The form of an introspection request (documentation only).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct IntrospectForm {
    /// The access token.
    token: String,
    /// `access_token` (ignored: only access tokens are introspected here).
    token_type_hint: Option<String>,
    /// With `client_secret_post`: the backend's name.
    client_id: Option<String>,
    client_secret: Option<String>,
}

fn inactive() -> OAuthIntrospection {
    OAuthIntrospection::Inactive(InactiveIntrospection { active: false })
}

fn invalid_client() -> OAuthFailure {
    OAuthFailure {
        status: StatusCode::UNAUTHORIZED,
        headers: vec![("www-authenticate", "Basic realm=\"tessera\"".to_owned())],
        ..OAuthFailure::new(
            "invalid_client",
            ErrorCode::Unauthenticated,
            "client authentication failed: the client_id is an oauth-resource backend's name \
             and the secret its introspection secret",
        )
    }
}

/// The client's id and the secrets it may mean, from HTTP Basic (each
/// form-urlencoded, RFC 6749 §2.3.1 — and, since many clients send it as it
/// is, the secret undecoded too) or the form; both at once is refused.
fn client_credentials(
    headers: &HeaderMap,
    params: &std::collections::BTreeMap<String, String>,
) -> Result<(String, Vec<String>), OAuthFailure> {
    let basic = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("basic").then(|| rest.trim())
        });
    let posted = params.get("client_id").zip(params.get("client_secret"));
    match (basic, posted) {
        (Some(_), Some(_)) => Err(OAuthFailure::invalid_request(
            "use one client authentication method, not two",
        )),
        (Some(b64), None) => {
            let raw = STANDARD.decode(b64).map_err(|_| invalid_client())?;
            let text = String::from_utf8(raw).map_err(|_| invalid_client())?;
            let (id, secret) = text.split_once(':').ok_or_else(invalid_client)?;
            let decode = |s: &str| {
                form_urlencoded::parse(format!("x={s}").as_bytes())
                    .next()
                    .map(|(_, v)| v.into_owned())
                    .unwrap_or_default()
            };
            Ok((decode(id), vec![decode(secret), secret.to_owned()]))
        }
        (None, Some((id, secret))) => Ok((id.clone(), vec![secret.clone()])),
        (None, None) => Err(invalid_client()),
    }
}

async fn answer(
    app: &AppState,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<OAuthIntrospection, OAuthFailure> {
    let Some(issuer) = app.config.oauth.issuer.as_deref() else {
        return Err(OAuthFailure::not_configured());
    };
    let params = form(headers, body)?;
    let (client_id, secrets) = client_credentials(headers, &params)?;
    let resource = match app.config.backends.get(&client_id) {
        Some(BackendConfig::OAuthResource(r)) => Some(r),
        _ => None,
    };
    // Digests compared in constant time, against a stand-in when the client is
    // unknown: neither the secret's length nor which names are backends shows
    // in how long a refusal takes.
    let expected = resource
        .and_then(|r| r.introspection_secret.as_ref())
        .map(|s| Sha256::digest(s.expose_secret().as_bytes()))
        .unwrap_or_else(|| Sha256::digest(b"\0no introspection secret"));
    let mut same = subtle::Choice::from(0);
    for s in &secrets {
        same |= subtle::ConstantTimeEq::ct_eq(
            expected.as_slice(),
            Sha256::digest(s.as_bytes()).as_slice(),
        );
    }
    let resource = match resource {
        Some(r) if bool::from(same) && r.introspection_secret.is_some() => r,
        _ => return Err(invalid_client()),
    };
    let token = params
        .get("token")
        .filter(|t| !t.is_empty())
        .ok_or_else(|| OAuthFailure::invalid_request("the token parameter is required"))?;
    let now = app.clock.now();
    let claims = match verify(app, token, now).await {
        Some(c) => c,
        None => return Ok(inactive()),
    };
    if check_times_and_parties(
        &claims.iss,
        &claims.aud,
        claims.nbf,
        claims.exp,
        issuer,
        &resource.resource,
        now,
    )
    .is_err()
    {
        return Ok(inactive());
    }
    let store_err = |e: crate::store::StoreError| OAuthFailure::from_api(e.into());
    let Some(st) = status(&app.store, &claims.jti, now)
        .await
        .map_err(store_err)?
    else {
        return Ok(inactive());
    };
    if st.run_id != claims.run || !st.is_alive(now) {
        return Ok(inactive());
    }
    // The record must be this token's, and the policy in force must still grant it.
    let Some((held, run)) = capabilities::held(&app.store, &claims.jti)
        .await
        .map_err(store_err)?
    else {
        return Ok(inactive());
    };
    let held_resource = format!("{client_id}:{}", resource.resource);
    if held.resource != held_resource || held.action != claims.scope || run.user != claims.sub {
        return Ok(inactive());
    }
    let policy = app.policy();
    if !reauthorize::still_permitted(
        &policy,
        &app.config.backends,
        &app.config.limits,
        &held,
        &Arc::new(run),
        now,
    ) {
        return Ok(inactive());
    }
    Ok(OAuthIntrospection::Active(OAuthActiveToken {
        active: true,
        token_type: if claims.cnf.is_some() {
            "DPoP"
        } else {
            "Bearer"
        }
        .to_owned(),
        claims,
    }))
}

/// Verifies the signature against the keys in memory (an unknown `kid` reads
/// nothing: see [`crate::api::exchange::verify_capability`]).
async fn verify(app: &AppState, token: &str, now: i64) -> Option<OAuthAccessTokenClaims> {
    jwt::verify::<OAuthAccessTokenClaims>(token, ACCESS_TOKEN_TYP, &app.keys.snapshot(), now)
        .ok()
        .map(|(c, _)| c)
}
