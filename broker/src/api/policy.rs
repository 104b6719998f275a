//! `/v1/admin/policy/reload`: load the policy directory again, now.
//!
//! A valid set replaces the old one atomically; an invalid one is answered with
//! its errors (file:line:col) as 422 `invalid_policy` and changes nothing. Both
//! outcomes are audited (see [`crate::policy_reload`]).

use super::extract::{AdminCaller, RequestId};
use crate::api::openapi::refusals;
use crate::app::AppState;
use crate::error::ApiError;
use crate::policy_reload::{self, ReloadError};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use tessera_client::types::ErrorCode;
use tessera_client::types::PolicyReloadResponse;

/// Longest error list returned (the rest is in the broker log).
const MAX_MESSAGE: usize = 8 * 1024;

refusals!(ReloadPolicyRefusals {
    401 => [Unauthenticated],
    422 => [InvalidPolicy],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Reload the policy directory
///
/// Loads and validates the policy directory again. A valid set replaces the one in force
/// atomically (requests in flight finish with the set they started with). An invalid set is
/// answered with every error as file:line:col and the previous set stays in force. A valid set
/// also revokes, with their leases, every live capability it would no longer issue (each
/// audited `capability.revoked`, actor `policy`, reason `policy_changed`), and says how many in
/// `revoked`. Both outcomes are audited (`policy.reloaded`, with `revoked=N` in its detail, and
/// `policy.reload_rejected`); if the audit row cannot be written or the live capabilities
/// cannot be read, nothing is swapped (503).
#[utoipa::path(
    post,
    path = "/v1/admin/policy/reload",
    operation_id = "reloadPolicy",
    tags = ["admin", "policy"],
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The new set is in force.", body = PolicyReloadResponse),
        ReloadPolicyRefusals,
    ),
)]
pub async fn reload(
    State(app): State<AppState>,
    _admin: AdminCaller,
    RequestId(rid): RequestId,
) -> Result<Json<PolicyReloadResponse>, ApiError> {
    match policy_reload::reload(&app, "admin", Some(rid)).await {
        Ok(done) => Ok(Json(PolicyReloadResponse {
            policies: done.policies,
            sha256: done.sha256,
            version: done.version,
            revoked: done.revoked,
        })),
        Err(ReloadError::Invalid(errors)) => {
            let mut message = format!(
                "the policy set was rejected and the previous one stays in force:\n{errors}"
            );
            if message.len() > MAX_MESSAGE {
                let mut cut = MAX_MESSAGE;
                while !message.is_char_boundary(cut) {
                    cut -= 1;
                }
                message.truncate(cut);
            }
            Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::InvalidPolicy,
                message,
            ))
        }
        Err(ReloadError::Store(e)) => Err(e.into()),
    }
}
