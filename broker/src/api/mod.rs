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

/// The one table of routes: the router and [`ROUTES`] (which the OpenAPI test
/// checks are all documented) are both built from it, so neither can name a
/// route the other lacks. A path listed with two methods gets both.
macro_rules! routes {
    ($($method:ident $path:literal => $handler:path,)*) => {
        /// Every route, as (method, path).
        pub const ROUTES: &[(&str, &str)] = &[$((stringify!($method), $path),)*];

        fn with_routes(router: Router<AppState>) -> Router<AppState> {
            router$(.route($path, $method($handler)))*
        }
    };
}

routes! {
    post "/v1/runs" => runs::create,
    get "/v1/runs/{id}" => runs::show,
    post "/v1/runs/{id}/end" => runs::end,
    post "/v1/capabilities" => capabilities::request,
    post "/v1/capabilities/renew" => capabilities::renew,
    post "/v1/capabilities/{id}/revoke" => capabilities::revoke,
    post "/v1/exchange" => exchange::exchange,
    post "/v1/introspect" => introspect::introspect,
    get "/.well-known/jwks.json" => discovery::jwks,
    post "/v1/admin/runtimes" => admin::create_runtime,
    get "/v1/admin/runtimes" => admin::list_runtimes,
    post "/v1/admin/runtimes/{name}/disable" => admin::disable_runtime,
    get "/v1/admin/runs" => runs::list,
    get "/v1/admin/leases" => revocations::pending,
    post "/v1/admin/policy/reload" => policy::reload,
    get "/v1/admin/audit" => audit::list,
    post "/v1/admin/keys/rotate" => admin::rotate_key,
    get "/v1/admin/keys" => admin::list_keys,
    get "/v1/admin/audit/verify" => audit::verify,
    post "/v1/admin/audit/checkpoints/check" => audit::check_checkpoints,
    get "/healthz" => health::healthz,
    get "/readyz" => health::readyz,
    get "/metrics" => health::metrics,
    get "/v1/openapi.json" => discovery::openapi,
}

pub fn router(app: AppState) -> Router {
    with_routes(Router::new())
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
