//! Tessera as an OAuth 2 authorization server for protected resources (MCP
//! servers, any OAuth resource server): the standards a resource server can
//! trust with a stock library and no Tessera code (docs/oauth.md).
//!
//! | module | route |
//! |---|---|
//! | [`metadata`] | `GET /.well-known/oauth-authorization-server` (RFC 8414) |
//! | [`token`] | `POST /oauth/token` (RFC 8693 token exchange, RFC 8707 resource, RFC 9449 DPoP) |
//! | [`introspect`] | `POST /oauth/introspect` (RFC 7662, for resource servers) |
//!
//! Why a token request is a capability request: the same Cedar request
//! (action = the scope, resource = `BACKEND:RESOURCE_URL`), the same
//! `@ttl`/`@rate`/`@approval`, the same record and audit row
//! (`capabilities::issue`); only the signed form differs (`at+jwt`, RFC 9068,
//! `aud` = the resource). So it is revoked with its run like any capability,
//! and introspection reads that record.
//!
//! Errors here are RFC 6749 §5.2 JSON (`error`, `error_description`) with
//! Tessera's stable `code` and `request_id` beside them; the request-context
//! middleware leaves them as they are ([`super::middleware::Rendered`]).

pub mod introspect;
pub mod metadata;
pub mod token;

use super::middleware::Rendered;
use crate::capability::CapabilityClaims;
use crate::error::ApiError;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::collections::BTreeMap;
use tessera_client::types::{Actor, Confirmation, ErrorCode, OAuthAccessTokenClaims, OAuthError};

/// The RFC 9068 claims of the access token a capability record stands for.
pub(crate) fn access_token_claims(
    c: &CapabilityClaims,
    issuer: &str,
    audience: &str,
) -> OAuthAccessTokenClaims {
    OAuthAccessTokenClaims {
        iss: issuer.to_owned(),
        aud: audience.to_owned(),
        sub: c.sub.clone(),
        jti: c.jti.clone().into(),
        iat: c.iat,
        nbf: c.nbf,
        exp: c.exp,
        scope: c.act.clone(),
        client_id: format!("tessera-runtime:{}", c.rt),
        act: Actor {
            sub: format!("run:{}", c.run),
        },
        run: c.run.clone().into(),
        task: c.task.clone(),
        cnf: c
            .cnf
            .as_ref()
            .and_then(|v| v.get("jkt"))
            .and_then(|j| j.as_str())
            .map(|jkt| Confirmation {
                jkt: jkt.to_owned(),
            }),
    }
}

/// An RFC 6749 error response.
pub(crate) struct OAuthFailure {
    pub status: StatusCode,
    pub error: &'static str,
    pub code: ErrorCode,
    pub description: String,
    pub approval_id: Option<String>,
    pub headers: Vec<(&'static str, String)>,
}

impl OAuthFailure {
    pub fn new(error: &'static str, code: ErrorCode, description: impl Into<String>) -> Self {
        OAuthFailure {
            status: StatusCode::BAD_REQUEST,
            error,
            code,
            description: description.into(),
            approval_id: None,
            headers: Vec::new(),
        }
    }

    /// 404: this broker has no `[oauth] issuer`, so no OAuth endpoint.
    pub fn not_configured() -> Self {
        OAuthFailure {
            status: StatusCode::NOT_FOUND,
            ..Self::new(
                "invalid_request",
                ErrorCode::NotFound,
                "this broker has no [oauth] issuer",
            )
        }
    }

    pub fn invalid_request(description: impl Into<String>) -> Self {
        Self::new("invalid_request", ErrorCode::InvalidRequest, description)
    }

    /// How the token endpoint says a Tessera refusal (RFC 6749 §5.2, RFC 8693
    /// §2.2.2, RFC 9449 §5).
    pub fn from_api(e: ApiError) -> Self {
        use ErrorCode as C;
        let error = match e.code {
            C::Unauthenticated
            | C::RunEnded
            | C::RunExpired
            | C::InvalidToken
            | C::TokenExpired => "invalid_grant",
            C::UnknownBackend | C::InvalidResource => "invalid_target",
            C::InvalidDpopProof => "invalid_dpop_proof",
            C::UseDpopNonce => "use_dpop_nonce",
            C::RateLimited => "slow_down",
            C::StoreUnavailable | C::RequestTimeout => "temporarily_unavailable",
            C::Internal => "server_error",
            C::InvalidRequest | C::InvalidJson | C::BodyTooLarge | C::UnsupportedMediaType => {
                "invalid_request"
            }
            // A scope the resource does not offer, or one policy does not grant.
            _ => "invalid_scope",
        };
        let status = match e.status {
            StatusCode::TOO_MANY_REQUESTS
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::INTERNAL_SERVER_ERROR => e.status,
            _ => StatusCode::BAD_REQUEST,
        };
        let mut headers = e.headers;
        if let Some(secs) = e.retry_after {
            headers.push(("retry-after", secs.to_string()));
        }
        OAuthFailure {
            status,
            error,
            code: e.code,
            description: e.message,
            approval_id: None,
            headers,
        }
    }

    pub fn respond(self, request_id: String) -> Response {
        if self.status.is_server_error() {
            tracing::error!(
                code = self.code.as_str(),
                error = self.error,
                "oauth request failed"
            );
        } else {
            tracing::info!(
                code = self.code.as_str(),
                error = self.error,
                "oauth request refused"
            );
        }
        let body = OAuthError {
            error: self.error.to_owned(),
            error_description: self.description,
            code: self.code.as_str().to_owned(),
            request_id,
            approval_id: self.approval_id,
        };
        let mut resp = (self.status, no_store(), Json(body)).into_response();
        for (name, value) in self.headers {
            if let Ok(v) = axum::http::HeaderValue::from_str(&value) {
                resp.headers_mut().insert(name, v);
            }
        }
        resp.extensions_mut().insert(Rendered);
        resp
    }
}

/// `Cache-Control: no-store` (RFC 6749 §5.1: token responses are not cached).
pub(crate) fn no_store() -> [(axum::http::HeaderName, &'static str); 2] {
    [
        (axum::http::header::CACHE_CONTROL, "no-store"),
        (axum::http::header::PRAGMA, "no-cache"),
    ]
}

/// A form body (`application/x-www-form-urlencoded`), each parameter at most
/// once (RFC 6749 §3.2: "MUST NOT be included more than once"); parameters it
/// does not know are ignored, and one without a value is as if omitted (§3.1),
/// as the RFC says.
pub(crate) fn form(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<BTreeMap<String, String>, OAuthFailure> {
    let media = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase());
    if media.as_deref() != Some("application/x-www-form-urlencoded") {
        return Err(OAuthFailure::new(
            "invalid_request",
            ErrorCode::UnsupportedMediaType,
            "the body must be application/x-www-form-urlencoded",
        ));
    }
    let mut out = BTreeMap::new();
    for (k, v) in form_urlencoded::parse(body) {
        if v.is_empty() {
            continue;
        }
        if out.insert(k.clone().into_owned(), v.into_owned()).is_some() {
            return Err(OAuthFailure::invalid_request(format!(
                "parameter {:?} is given more than once",
                k.chars().take(64).collect::<String>()
            )));
        }
    }
    Ok(out)
}
