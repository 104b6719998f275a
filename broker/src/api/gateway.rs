//! `POST /v1/gateway/session`: what a run's tool needs to call the APIs of
//! credential-injection rules through the egress gateway — the run's CA to
//! trust and its placeholders (`gateway::inject`). `tessera exec --egress`
//! calls it and writes the CA into the command's trust store.

use crate::api::extract::RunCaller;
use crate::api::openapi::refusals;
use crate::api::refusals as refuse;
use crate::app::AppState;
use crate::clock::rfc3339;
use crate::error::ApiError;
use crate::store::runs::RunState;
use axum::extract::State;
use axum::Json;
use tessera_client::types::{ErrorCode, GatewayPlaceholder, GatewaySession};

refusals!(GatewaySessionRefusals {
    401 => [Unauthenticated],
    403 => [RunEnded, RunExpired],
    404 => [NotFound],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// The run's credential-injection session
///
/// The run's CA (valid until the run expires, name-constrained to the injection rules' hosts,
/// its key in the gateway's memory only) and one placeholder per rule that names a
/// `placeholder_env`. The same answer for the run's life; dead when the run ends. 404 when the
/// broker has no gateway or no injection rule. Not audited: it decides nothing (each request
/// through the gateway is).
#[utoipa::path(
    post,
    path = "/v1/gateway/session",
    operation_id = "gatewaySession",
    tags = ["gateway"],
    security(("runToken" = [])),
    responses(
        (status = 200, description = "The run's CA and placeholders.", body = GatewaySession),
        GatewaySessionRefusals,
    ),
)]
pub async fn session(
    State(app): State<AppState>,
    RunCaller(run): RunCaller,
) -> Result<Json<GatewaySession>, ApiError> {
    if app.config.gateway.is_none() || !app.injection.enabled() {
        return Err(ApiError::new(
            axum::http::StatusCode::NOT_FOUND,
            ErrorCode::NotFound,
            "this broker has no egress gateway with a credential-injection rule",
        ));
    }
    let now = app.clock.now();
    let state = run.state(now);
    if state != RunState::Active {
        return Err(refuse::run_inactive(state));
    }
    // The cached run may be behind another replica's end: ask the store.
    if let Some(Some(_)) = crate::store::runs::ended_at(&app.store, &run.id).await? {
        app.injection.forget(&run.id);
        return Err(refuse::run_inactive(RunState::Ended));
    }
    let session = app
        .injection
        .open(&run.id, now, run.expires_at)
        .map_err(|e| {
            tracing::error!(error = %e, "cannot make the run's CA");
            ApiError::internal()
        })?;
    Ok(Json(GatewaySession {
        ca_pem: session.ca.pem.clone(),
        expires_at: rfc3339(session.ca.expires_at),
        hosts: app.injection.subtrees().to_vec(),
        placeholders: session
            .placeholders
            .iter()
            .map(|p| GatewayPlaceholder {
                backend: p.backend.clone(),
                env: p.env.clone(),
                value: p.value.clone(),
            })
            .collect(),
    }))
}
