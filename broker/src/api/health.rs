//! Liveness, readiness and metrics: what load balancers and scrapers read.

use crate::api::middleware::Rendered;
use crate::app::AppState;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
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
        reasons: Vec::new(),
    })
}

/// Readiness
///
/// Whether this broker should get traffic. 200 when its store commits, its
/// policy files are the policy in force, no downstream removal is stuck and it
/// is not stopping; otherwise 503 with every reason named in `reasons`
/// (`store_cannot_commit`, `policy_load_failed`, `revocation_outbox_stuck`,
/// `shutting_down`), so load balancers stop sending traffic and an operator
/// reads what to fix.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    tags = ["operations"],
    responses(
        (status = 200, description = "Ready.", body = HealthResponse),
        (status = 503, description = "Not ready; `reasons` says why.", body = HealthResponse),
    ),
)]
pub async fn readyz(State(app): State<AppState>) -> Response {
    let reasons = crate::health::check(&app).await;
    if reasons.is_empty() {
        return Json(HealthResponse {
            status: "ready".into(),
            reasons,
        })
        .into_response();
    }
    for r in &reasons {
        tracing::debug!(reason = %r.code, message = %r.message, "not ready");
    }
    let mut resp = (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(HealthResponse {
            status: "not_ready".into(),
            reasons,
        }),
    )
        .into_response();
    // The body is the answer (its reasons), not an error to render.
    resp.extensions_mut().insert(Rendered);
    resp
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
        app.metrics.render(
            app.store.writer().stats(),
            app.store.writer().health().failing().is_none(),
        ),
    )
}
