//! The HTTP API (v1): one router, one module per resource.
//!
//! | module | routes |
//! |---|---|
//! | [`runs`] | `POST /v1/runs`, `GET /v1/runs/{id}`, `POST /v1/runs/{id}/end` |
//! | [`capabilities`] | `POST /v1/capabilities`, `POST /v1/capabilities/renew`, `POST /v1/capabilities/{id}/revoke` |
//! | [`exchange`] | `POST /v1/exchange` |
//! | [`introspect`] | `POST /v1/introspect` |
//! | [`admin`] | `/v1/admin/runtimes…`, `/v1/admin/keys…`, `/v1/admin/leases` |
//! | [`audit`] | `/v1/admin/audit`, `/v1/admin/audit/verify` |
//! | [`policy`] | `/v1/admin/policy/reload` |
//! | [`runs`] (admin) | `GET /v1/admin/runs` |
//! | [`revocations`] | `GET /v1/admin/leases` (pending and stuck downstream removals) |
//! | [`health`] | `/healthz`, `/readyz`, `/metrics` |
//! | [`discovery`] | `/.well-known/jwks.json`, `/v1/openapi.json` |
//!
//! Every refusal reads as [`refusals`] says (status, code, message), and the
//! OpenAPI document is assembled in [`openapi`]. Bodies are capped at 64 KiB;
//! every response passes [`middleware::request_context`].

pub mod admin;
pub mod audit;
pub mod capabilities;
pub mod discovery;
pub mod edge;
pub mod exchange;
pub mod extract;
pub mod health;
pub mod introspect;
pub mod middleware;
pub mod openapi;
pub mod policy;
pub mod refusals;
pub mod revocations;
pub mod runs;

use crate::app::AppState;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Every route, as (method, path) — the OpenAPI test checks each is documented.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/runs"),
    ("get", "/v1/runs/{id}"),
    ("post", "/v1/runs/{id}/end"),
    ("post", "/v1/capabilities"),
    ("post", "/v1/capabilities/renew"),
    ("post", "/v1/capabilities/{id}/revoke"),
    ("post", "/v1/exchange"),
    ("post", "/v1/introspect"),
    ("get", "/.well-known/jwks.json"),
    ("post", "/v1/admin/runtimes"),
    ("get", "/v1/admin/runtimes"),
    ("post", "/v1/admin/runtimes/{name}/disable"),
    ("get", "/v1/admin/runs"),
    ("get", "/v1/admin/leases"),
    ("post", "/v1/admin/policy/reload"),
    ("get", "/v1/admin/audit"),
    ("post", "/v1/admin/keys/rotate"),
    ("get", "/v1/admin/keys"),
    ("get", "/v1/admin/audit/verify"),
    ("post", "/v1/admin/audit/checkpoints/check"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/v1/openapi.json"),
];

pub fn router(app: AppState) -> Router {
    Router::new()
        .route("/v1/runs", post(runs::create))
        .route("/v1/runs/{id}", get(runs::show))
        .route("/v1/runs/{id}/end", post(runs::end))
        .route("/v1/capabilities", post(capabilities::request))
        .route("/v1/capabilities/renew", post(capabilities::renew))
        .route("/v1/capabilities/{id}/revoke", post(capabilities::revoke))
        .route("/v1/exchange", post(exchange::exchange))
        .route("/v1/introspect", post(introspect::introspect))
        .route("/.well-known/jwks.json", get(discovery::jwks))
        .route(
            "/v1/admin/runtimes",
            post(admin::create_runtime).get(admin::list_runtimes),
        )
        .route("/v1/admin/keys/rotate", post(admin::rotate_key))
        .route("/v1/admin/keys", get(admin::list_keys))
        .route(
            "/v1/admin/runtimes/{name}/disable",
            post(admin::disable_runtime),
        )
        .route("/v1/admin/runs", get(runs::list))
        .route("/v1/admin/leases", get(revocations::pending))
        .route("/v1/admin/policy/reload", post(policy::reload))
        .route("/v1/admin/audit", get(audit::list))
        .route("/v1/admin/audit/verify", get(audit::verify))
        .route(
            "/v1/admin/audit/checkpoints/check",
            post(audit::check_checkpoints),
        )
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/v1/openapi.json", get(discovery::openapi))
        .fallback(middleware::not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            edge::guard,
        ))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            middleware::request_context,
        ))
        .with_state(app)
}
