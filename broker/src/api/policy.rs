//! `/v1/admin/policy/reload`: load the policy directory again, now.
//!
//! A valid set replaces the old one atomically; an invalid one is answered with
//! its errors (file:line:col) as 422 `invalid_policy` and changes nothing. Both
//! outcomes are audited (see [`crate::policy_reload`]).

use super::extract::{AdminCaller, RequestId};
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

/// `POST /v1/admin/policy/reload`
pub async fn reload(
    State(app): State<AppState>,
    _admin: AdminCaller,
    RequestId(rid): RequestId,
) -> Result<Json<PolicyReloadResponse>, ApiError> {
    match policy_reload::reload(&app, "admin", Some(rid)).await {
        Ok(done) => Ok(Json(PolicyReloadResponse {
            policies: done.policies,
            sha256: done.sha256,
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
