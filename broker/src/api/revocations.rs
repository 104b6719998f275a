//! `GET /v1/admin/leases`: downstream removals still pending, and the stuck ones.
//!
//! Why: a revocation the downstream system keeps refusing (database down, the
//! broker's account lost a privilege) must not be invisible. The worker retries it
//! for as long as it takes; this lists what it is still working on — with
//! `stuck=true`, only rows that failed at least `STUCK_AFTER_ATTEMPTS` times —
//! with the last error (never a secret). `tessera leases list [--stuck]` reads it.

use super::extract::{AdminCaller, ApiQuery};
use crate::api::openapi::refusals;
use crate::app::AppState;
use crate::clock::rfc3339;
use crate::error::ApiError;
use crate::store::revocations::{self, STUCK_AFTER_ATTEMPTS};
use axum::extract::State;
use axum::Json;
use tessera_client::types::PendingRevocationsQuery;
use tessera_client::types::{ErrorCode, PendingRevocation, PendingRevocationList};

refusals!(ListPendingRevocationsRefusals {
    400 => [InvalidQuery],
    401 => [Unauthenticated],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Downstream revocations not yet confirmed
///
/// Leases whose downstream object (a database user, …) is revoked in the broker but not yet
/// confirmed removed, oldest first. The worker retries each with backoff; `stuck=true` keeps
/// those that failed 3 or more times. Also `tessera leases list [--stuck]`.
#[utoipa::path(
    get,
    path = "/v1/admin/leases",
    operation_id = "listPendingRevocations",
    tags = ["admin", "leases"],
    security(("adminToken" = [])),
    params(PendingRevocationsQuery),
    responses(
        (status = 200, description = "Pending revocations.", body = PendingRevocationList),
        ListPendingRevocationsRefusals,
    ),
)]
pub async fn pending(
    State(app): State<AppState>,
    _admin: AdminCaller,
    ApiQuery(p): ApiQuery<PendingRevocationsQuery>,
) -> Result<Json<PendingRevocationList>, ApiError> {
    let limit = p.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request(
            ErrorCode::InvalidQuery,
            "limit must be 1-1000",
        ));
    }
    let stuck = p.stuck.unwrap_or(false);
    let rows = revocations::pending(&app.store, stuck, limit).await?;
    let revocations = rows
        .into_iter()
        .map(|r| PendingRevocation {
            stuck: r.attempts >= STUCK_AFTER_ATTEMPTS,
            lease_id: r.lease_id.into(),
            backend: r.backend,
            downstream_ref: r.downstream_ref,
            run_id: r.run_id.into(),
            reason: r.reason,
            queued_at: rfc3339(r.created_at),
            attempts: r.attempts,
            next_attempt_at: rfc3339(r.next_attempt_at),
            last_error: r.last_error,
        })
        .collect();
    Ok(Json(PendingRevocationList { revocations }))
}
