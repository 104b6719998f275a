//! The HTTP API (v1): one router, one module per resource.
//!
//! | module | routes |
//! |---|---|
//! | [`runs`] | `POST /v1/runs`, `GET /v1/runs/{id}`, `POST /v1/runs/{id}/end` |
//! | [`capabilities`] | `POST /v1/capabilities`, `POST /v1/capabilities/renew`, `POST /v1/capabilities/{id}/revoke` |
//! | [`exchange`] | `POST /v1/exchange` |
//! | [`introspect`] | `POST /v1/introspect` |
//! | [`gateway`] | `POST /v1/gateway/session` (the run's CA and placeholders) |
//! | [`admin`] | `/v1/admin/runtimes…`, `/v1/admin/keys…`, `/v1/admin/leases` |
//! | [`audit`] | `/v1/admin/audit`, `/v1/admin/audit/verify` |
//! | [`policy`] | `/v1/admin/policy/reload` |
//! | [`runs`] (admin) | `GET /v1/admin/runs` |
//! | [`revocations`] | `GET /v1/admin/leases` (pending and stuck downstream removals) |
//! | [`health`] | `/healthz`, `/readyz`, `/metrics` |
//! | [`discovery`] | `/.well-known/jwks.json`, `/v1/openapi.json` |
//! | [`oauth`] | `/.well-known/oauth-authorization-server`, `/oauth/token`, `/oauth/introspect` |
//!
//! Every refusal reads as [`refusals`] says (status, code, message), and the
//! OpenAPI document is assembled in [`openapi`]. Bodies are capped at 64 KiB;
//! every response passes [`middleware::RequestContext`].

pub mod admin;
pub mod approvals;
pub mod approvers;
pub mod audit;
pub mod capabilities;
pub mod console;
pub mod discovery;
pub mod edge;
pub mod exchange;
pub mod extract;
pub mod gateway;
pub mod health;
pub mod introspect;
pub mod middleware;
pub mod oauth;
pub mod openapi;
pub mod policy;
pub mod refusals;
pub mod revocations;
pub mod runs;
pub mod status;
mod unread;

use crate::app::AppState;
use axum::extract::DefaultBodyLimit;
use axum::Router;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The one table of routes. Each handler's `#[utoipa::path]` says its method,
/// path and contract; this list both serves it (the router) and documents it
/// (the OpenAPI document, [`openapi::document`]), so neither can name a route
/// the other lacks.
pub fn api_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::frame())
        .routes(routes!(runs::create))
        .routes(routes!(runs::show))
        .routes(routes!(runs::end))
        .routes(routes!(capabilities::request))
        .routes(routes!(capabilities::renew))
        .routes(routes!(capabilities::revoke))
        .routes(routes!(approvals::show))
        .routes(routes!(approvals::list_mine))
        .routes(routes!(approvals::approve))
        .routes(routes!(approvals::deny))
        .routes(routes!(approvals::admin_list))
        .routes(routes!(approvals::admin_show))
        .routes(routes!(approvals::admin_deny))
        .routes(routes!(approvers::create_approver))
        .routes(routes!(approvers::list_approvers))
        .routes(routes!(approvers::revoke_approver))
        .routes(routes!(exchange::exchange))
        .routes(routes!(gateway::session))
        .routes(routes!(introspect::introspect))
        .routes(routes!(discovery::jwks))
        .routes(routes!(oauth::metadata::metadata))
        .routes(routes!(oauth::token::token))
        .routes(routes!(oauth::introspect::introspect))
        .routes(routes!(admin::create_runtime))
        .routes(routes!(admin::list_runtimes))
        .routes(routes!(admin::disable_runtime))
        .routes(routes!(runs::list))
        .routes(routes!(revocations::pending))
        .routes(routes!(policy::reload))
        .routes(routes!(audit::list))
        .routes(routes!(admin::rotate_key))
        .routes(routes!(admin::list_keys))
        .routes(routes!(status::status))
        .routes(routes!(audit::verify))
        .routes(routes!(audit::check_checkpoints))
        .routes(routes!(audit::latest_checkpoint))
        .routes(routes!(audit::record_export))
        .routes(routes!(audit::check_segment))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(health::metrics))
        .routes(routes!(discovery::openapi))
}

pub fn router(app: AppState) -> Router {
    let (routes, _) = api_router().split_for_parts();
    routes
        .merge(console::routes())
        .fallback(middleware::not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(edge::GuardLayer::new(app.clone()))
        .layer(middleware::RequestContextLayer::new(app.clone()))
        .with_state(app)
}
