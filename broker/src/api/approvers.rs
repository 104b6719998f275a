//! `/v1/admin/approvers`: the keys of the people who approve. Minted by an
//! administrator for a user of entities.json, shown once, stored as SHA-256;
//! revoking one stops it at once and takes back what it approved and was not
//! redeemed (`store/approvers.rs`).

use super::extract::{AdminCaller, ApiJson, RequestId};
use crate::api::openapi::{refusals, IdPath};
use crate::app::AppState;
use crate::audit::{events, AuditEvent};
use crate::clock::rfc3339;
use crate::error::ApiError;
use crate::ids::{is_id, new_id};
use crate::secret::ApproverKey;
use crate::store::approvers::{self, ApproverRecord, CreateApprover, RevokeApprover};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use std::sync::Arc;
use tessera_client::types::{
    Approver, ApproverList, CreateApproverRequest, CreateApproverResponse, ErrorCode,
};

fn wire(a: ApproverRecord) -> Approver {
    Approver {
        id: a.id,
        name: a.name,
        user: a.user_name,
        created_at: rfc3339(a.created_at),
        revoked_at: a.revoked_at.map(rfc3339),
    }
}

refusals!(CreateApproverRefusals {
    400 => [InvalidRequest, InvalidJson, InvalidName, InvalidUser],
    401 => [Unauthenticated],
    409 => [ApproverExists],
    413 => [BodyTooLarge],
    415 => [UnsupportedMediaType],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Create an approver key
///
/// Mints an approver key (`tsr_apr_…`) for `user`, shown exactly once; only its SHA-256 is
/// stored. The user's groups come from entities.json under the policy in force at each
/// decision.
#[utoipa::path(
    post,
    path = "/v1/admin/approvers",
    operation_id = "createApprover",
    tags = ["approvals", "admin"],
    security(("adminToken" = [])),
    request_body(content = CreateApproverRequest, example = json!({"name": "dana-laptop", "user": "dana"})),
    responses(
        (status = 201, description = "Approver key created.", body = CreateApproverResponse),
        CreateApproverRefusals,
    ),
)]
pub async fn create_approver(
    State(app): State<AppState>,
    _admin: AdminCaller,
    RequestId(rid): RequestId,
    ApiJson(req): ApiJson<CreateApproverRequest>,
) -> Result<(StatusCode, Json<CreateApproverResponse>), ApiError> {
    if !super::admin::is_runtime_name(&req.name) {
        return Err(ApiError::bad_request(
            ErrorCode::InvalidName,
            "approver name must be 1-63 of [a-z0-9._-]",
        ));
    }
    if !crate::names::is_user(&req.user) {
        return Err(ApiError::bad_request(
            ErrorCode::InvalidUser,
            "user must be 1-128 of [A-Za-z0-9._@+-]",
        ));
    }
    if app.policy().groups_of(&req.user).is_none() {
        // A rule names users and groups of entities.json: a key for anyone else
        // could approve nothing, or, for `any`, let an invented person approve.
        return Err(ApiError::bad_request(
            ErrorCode::InvalidUser,
            "the user is not in the policy's entities.json",
        ));
    }
    let key = ApproverKey::generate();
    let record = ApproverRecord {
        id: new_id(),
        name: req.name.clone(),
        user_name: req.user.clone(),
        created_at: app.clock.now(),
        revoked_at: None,
    };
    let mut audit = AuditEvent::new(events::APPROVER_CREATED, "admin", "allow");
    audit.request_id = Some(rid);
    audit.user = Some(req.user.clone());
    audit.detail = Some(format!("approver={} id={}", record.name, record.id));
    let response = CreateApproverResponse {
        id: record.id.clone().into(),
        name: record.name.clone(),
        user: record.user_name.clone(),
        key: key.expose_secret().to_owned(),
    };
    let created = app
        .store
        .writer()
        .submit(CreateApprover {
            record,
            key_hash: key.sha256(),
            audit,
        })
        .await?;
    if !created {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            ErrorCode::ApproverExists,
            "an approver with this name exists",
        ));
    }
    Ok((StatusCode::CREATED, Json(response)))
}

refusals!(ListApproversRefusals {
    401 => [Unauthenticated],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// List approver keys
#[utoipa::path(
    get,
    path = "/v1/admin/approvers",
    operation_id = "listApprovers",
    tags = ["approvals", "admin"],
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "Approver keys (never the keys themselves).", body = ApproverList),
        ListApproversRefusals,
    ),
)]
pub async fn list_approvers(
    State(app): State<AppState>,
    _admin: AdminCaller,
) -> Result<Json<ApproverList>, ApiError> {
    let approvers = approvers::list(&app.store)
        .await?
        .into_iter()
        .map(wire)
        .collect();
    Ok(Json(ApproverList { approvers }))
}

refusals!(RevokeApproverRefusals {
    401 => [Unauthenticated],
    404 => [UnknownApprover],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Revoke an approver key
///
/// The key stops working at once, and its approvals stop counting: an approval it helped approve
/// that is not redeemed yet goes back to pending unless the other approvals meet the rules.
/// Revoking a revoked key is not an error.
#[utoipa::path(
    post,
    path = "/v1/admin/approvers/{id}/revoke",
    operation_id = "revokeApprover",
    tags = ["approvals", "admin"],
    security(("adminToken" = [])),
    params(IdPath),
    responses(
        (status = 200, description = "The key, revoked.", body = Approver),
        RevokeApproverRefusals,
    ),
)]
pub async fn revoke_approver(
    State(app): State<AppState>,
    _admin: AdminCaller,
    RequestId(rid): RequestId,
    Path(id): Path<String>,
) -> Result<Json<Approver>, ApiError> {
    let unknown = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            ErrorCode::UnknownApprover,
            "no such approver",
        )
    };
    if !is_id(&id) {
        return Err(unknown());
    }
    let mut audit = AuditEvent::new(events::APPROVER_REVOKED, "admin", "allow");
    audit.request_id = Some(rid);
    audit.detail = Some(format!("id={id}"));
    app.store
        .writer()
        .submit(RevokeApprover {
            id: id.clone(),
            audit,
            groups_of: {
                let policy = app.policy();
                Arc::new(move |user: &str| policy.groups_of(user).unwrap_or_default())
            },
        })
        .await?
        .ok_or_else(unknown)?;
    approvers::list(&app.store)
        .await?
        .into_iter()
        .find(|a| a.id == id)
        .map(|a| Json(wire(a)))
        .ok_or_else(unknown)
}
