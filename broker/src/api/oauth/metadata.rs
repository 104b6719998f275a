//! `GET /.well-known/oauth-authorization-server` (RFC 8414): what a resource
//! server or client needs to find the token endpoint, the keys and
//! introspection, so it can be configured with the issuer URL alone.

use crate::app::AppState;
use crate::backends::settings::BackendConfig;
use crate::error::ApiError;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use tessera_client::types::{
    AuthorizationServerMetadata, ErrorBody, GRANT_TYPE_TOKEN_EXCHANGE, RUN_TOKEN_TYPE,
};

/// Authorization-server metadata (RFC 8414)
///
/// Tessera as an OAuth 2 authorization server: its issuer (`[oauth] issuer`), token endpoint
/// (RFC 8693 token exchange only), JWKS, introspection endpoint (RFC 7662, for resource
/// servers), DPoP algorithms (RFC 9449) and the scopes of every `oauth-resource` backend.
/// 404 when no `[oauth] issuer` is configured. Public; cacheable for 60 seconds.
#[utoipa::path(
    get,
    path = "/.well-known/oauth-authorization-server",
    operation_id = "oauthMetadata",
    tags = ["oauth"],
    responses(
        (status = 200, description = "The metadata.", body = AuthorizationServerMetadata),
        (status = 404, description = "`not_found`: no `[oauth] issuer` is configured.", body = ErrorBody),
    ),
)]
pub async fn metadata(State(app): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    let issuer = app
        .config
        .oauth
        .issuer
        .clone()
        .ok_or_else(|| ApiError::not_found("OAuth metadata (no [oauth] issuer)"))?;
    let mut scopes: Vec<String> = app
        .config
        .backends
        .values()
        .filter_map(|b| match b {
            BackendConfig::OAuthResource(r) => Some(r.scopes.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    scopes.sort();
    scopes.dedup();
    let strings = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let body = AuthorizationServerMetadata {
        token_endpoint: format!("{issuer}/oauth/token"),
        jwks_uri: format!("{issuer}/.well-known/jwks.json"),
        introspection_endpoint: format!("{issuer}/oauth/introspect"),
        issuer,
        grant_types_supported: strings(&[GRANT_TYPE_TOKEN_EXCHANGE]),
        response_types_supported: Vec::new(),
        token_endpoint_auth_methods_supported: strings(&["none"]),
        introspection_endpoint_auth_methods_supported: strings(&[
            "client_secret_basic",
            "client_secret_post",
        ]),
        dpop_signing_alg_values_supported: strings(&["ES256", "EdDSA"]),
        scopes_supported: scopes,
        tessera_subject_token_types_supported: strings(&[RUN_TOKEN_TYPE]),
    };
    Ok(([(header::CACHE_CONTROL, "public, max-age=60")], Json(body)))
}
