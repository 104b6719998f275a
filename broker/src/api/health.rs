//! Liveness, readiness and metrics: what load balancers and scrapers read.

use crate::api::openapi::refusals;
use crate::app::AppState;
use crate::error::ApiError;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use tessera_client::types::HealthResponse;

/// Liveness
///
/// The process is up. Does not touch the store.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tags = ["operations"],
    responses(
        (status = 200, description = "Alive.", body = HealthResponse),
    ),
)]
pub async fn healthz() -> Json<HealthResponse> {
    Json(HealthResponse {
        status: "ok".into(),
    })
}

refusals!(ReadyzRefusals {
    503 => [StoreUnavailable],
});

/// Readiness
///
/// The store answers. Otherwise 503, so load balancers stop sending traffic.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    tags = ["operations"],
    responses(
        (status = 200, description = "Ready.", body = HealthResponse),
        ReadyzRefusals,
    ),
)]
pub async fn readyz(State(app): State<AppState>) -> Result<Json<HealthResponse>, ApiError> {
    if app.store.ping().await {
        Ok(Json(HealthResponse {
            status: "ready".into(),
        }))
    } else {
        Err(ApiError::unavailable())
    }
}

/// Prometheus metrics
///
/// Metrics in the OpenMetrics text exposition format (`Content-Type:
/// application/openmetrics-text; version=1.0.0; charset=utf-8`), e.g.
/// `tessera_capabilities_total{outcome="issued"}`, `tessera_store_commits_total`.
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tags = ["operations"],
    responses(
        (status = 200, description = "Metrics text.", body = String, content_type = "application/openmetrics-text"),
    ),
)]
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
