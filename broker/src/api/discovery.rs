//! What clients discover without a credential: the signing keys' public
//! halves (JWKS, for services that verify Tessera tokens themselves) and the
//! OpenAPI document.

use crate::app::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;

/// `GET /.well-known/jwks.json`
pub async fn jwks(State(app): State<AppState>) -> impl IntoResponse {
    let body = app.keys.snapshot().jwks(app.clock.now());
    ([(header::CACHE_CONTROL, "public, max-age=60")], Json(body))
}

/// `GET /v1/openapi.json`
pub async fn openapi() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        super::openapi::document(),
    )
}
