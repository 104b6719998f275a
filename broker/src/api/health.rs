//! Liveness, readiness and metrics: what load balancers and scrapers read.

use crate::app::AppState;
use crate::error::ApiError;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use tessera_client::types::HealthResponse;

/// `GET /healthz`: the process is up.
pub async fn healthz() -> Json<HealthResponse> {
    Json(HealthResponse {
        status: "ok".into(),
    })
}

/// `GET /readyz`: the store answers; otherwise 503 so load balancers stop sending.
pub async fn readyz(State(app): State<AppState>) -> Result<Json<HealthResponse>, ApiError> {
    if app.store.ping().await {
        Ok(Json(HealthResponse {
            status: "ready".into(),
        }))
    } else {
        Err(ApiError::unavailable())
    }
}

/// `GET /metrics`: Prometheus text exposition.
pub async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.render(app.store.writer().stats()),
    )
}
