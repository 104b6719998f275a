//! What clients discover without a credential: the signing keys' public
//! halves (JWKS, for services that verify Tessera tokens themselves) and the
//! OpenAPI document.

use crate::app::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use tessera_client::types::Jwks;

/// Public signing keys (JWK Set)
///
/// The Ed25519 public keys that verify capabilities and access tokens: the active key and any
/// retired key still within its publication window. Public; cacheable for 60 seconds.
#[utoipa::path(
    get,
    path = "/.well-known/jwks.json",
    operation_id = "jwks",
    tags = ["keys"],
    responses(
        (status = 200, description = "JWK Set.", body = Jwks),
    ),
)]
pub async fn jwks(State(app): State<AppState>) -> impl IntoResponse {
    let body = app.keys.snapshot().jwks(app.clock.now());
    ([(header::CACHE_CONTROL, "public, max-age=60")], Json(body))
}

/// This OpenAPI document
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    operation_id = "openapi",
    tags = ["operations"],
    responses(
        (status = 200, description = "The OpenAPI 3.1 document.", body = Object),
    ),
)]
pub async fn openapi() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        super::openapi::document(),
    )
}
