//! `/v1/approvals` and `/v1/admin/approvals`: the human decision between a
//! permit with `@approval` and the capability it allows (approver keys:
//! `approvers.rs`).
//!
//! Who may do what, and why:
//! - the run that asked reads its own approvals (and long-polls them); it can
//!   neither decide nor see another run's;
//! - an approver key decides (approve or deny) an approval whose gates admit
//!   its user under the policy in force, never one asked for its own user
//!   (four-eyes); a runtime key or a run token is never an approver;
//! - the administrator lists, reads and denies (cancels) approvals; the admin
//!   token approves nothing, since an approval must name a person.

use super::extract::{AdminCaller, ApiJson, ApiQuery, ApproverCaller, RequestId, RunOrApprover};
use super::refusals;
use crate::api::openapi::{refusals, IdPath};
use crate::app::AppState;
use crate::audit::{events, AuditEvent};
use crate::clock::rfc3339;
use crate::error::ApiError;
use crate::grammar::parse_duration;
use crate::ids::is_id;
use crate::policy::approval_gate;
use crate::store::approvals::{self, ApprovalView, Decide, Decided, ListFilter, Voter};
use crate::store::approvers::ApproverRecord;
use axum::extract::{Path, State};
use axum::Json;
use std::sync::Arc;
use std::time::Duration;
use tessera_client::types::{
    Approval, ApprovalDecision, ApprovalList, ApprovalListQuery, ApprovalStatus, ApprovalWaitQuery,
    DecideApprovalRequest, ErrorCode,
};

/// Longest long-poll; also kept below the request timeout.
const MAX_WAIT: Duration = Duration::from_secs(60);
/// How often a long-poll re-reads the store (a decision on another replica).
const POLL_EVERY: Duration = Duration::from_secs(1);

use crate::grant::approval::rules;

fn wire(view: &ApprovalView, now: i64) -> Approval {
    let r = &view.record;
    Approval {
        approval_id: r.id.clone().into(),
        status: r.status_at(now),
        run_id: r.run_id.clone().into(),
        user: view.user.clone(),
        task_id: view.task_id.clone(),
        task_kind: view.task_kind.clone(),
        runtime: view.runtime.clone(),
        action: r.action.clone(),
        resource: r.resource.clone(),
        arguments: serde_json::from_str(&r.arguments).unwrap_or(serde_json::Value::Null),
        args: r.args_hash.clone(),
        policy: r.policy.clone(),
        approvers: rules(&r.approvers),
        decisions: view
            .decisions
            .iter()
            .map(|d| ApprovalDecision {
                approver: d.approver.clone(),
                user: d.user.clone(),
                decision: d.decision.clone(),
                comment: d.comment.clone(),
                at: rfc3339(d.at),
            })
            .collect(),
        created_at: rfc3339(r.created_at),
        expires_at: rfc3339(r.expires_at),
        decided_at: r.decided_at.map(rfc3339),
        capability_id: r.capability_id.clone(),
    }
}

/// Whether `approver` may decide `view` (under the policy in force), and if
/// not, why.
fn may_decide(
    app: &AppState,
    approver: &ApproverRecord,
    view: &ApprovalView,
) -> Result<(), ApiError> {
    if approver.user_name == view.user {
        return Err(ApiError::forbidden(
            ErrorCode::SelfApproval,
            "four-eyes: a request made for your own user needs someone else",
        ));
    }
    let groups = app
        .policy()
        .groups_of(&approver.user_name)
        .unwrap_or_default();
    let gates = approval_gate::parse_described(&view.record.approvers).unwrap_or_default();
    if gates
        .iter()
        .any(|(rule, _)| rule.admits(&approver.user_name, &groups))
    {
        Ok(())
    } else {
        Err(ApiError::forbidden(
            ErrorCode::NotAnApprover,
            "the approval's rules do not name you",
        ))
    }
}

/// An approver sees what they may decide, and what they decided.
fn visible_to(app: &AppState, approver: &ApproverRecord, view: &ApprovalView) -> bool {
    may_decide(app, approver, view).is_ok()
        || view
            .decisions
            .iter()
            .any(|d| d.user.as_deref() == Some(&approver.user_name))
}

fn wait_of(app: &AppState, q: &ApprovalWaitQuery) -> Result<Option<Duration>, ApiError> {
    let Some(text) = &q.wait else { return Ok(None) };
    let asked = parse_duration(text)
        .map_err(|e| ApiError::bad_request(ErrorCode::InvalidQuery, format!("wait: {e}")))?;
    let cap = MAX_WAIT.min(
        app.config
            .http
            .request_timeout
            .saturating_sub(Duration::from_secs(2)),
    );
    Ok(Some(asked.min(cap)))
}

refusals!(GetApprovalRefusals {
    400 => [InvalidQuery],
    401 => [Unauthenticated],
    404 => [UnknownApproval],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Read (and wait for) an approval
///
/// The run that asked for it (run token) or an approver it names (approver key) reads an
/// approval: who asked, the full arguments, the rules, the decisions so far. With `wait`, the
/// answer is held until the approval is no longer pending, or that long (at most 60s, and
/// below the server's request timeout).
#[utoipa::path(
    get,
    path = "/v1/approvals/{id}",
    operation_id = "getApproval",
    tags = ["approvals"],
    security(("runToken" = []), ("approverKey" = [])),
    params(IdPath, ApprovalWaitQuery),
    responses(
        (status = 200, description = "The approval.", body = Approval),
        GetApprovalRefusals,
    ),
)]
pub async fn show(
    State(app): State<AppState>,
    caller: RunOrApprover,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<ApprovalWaitQuery>,
) -> Result<Json<Approval>, ApiError> {
    if !is_id(&id) {
        return Err(refusals::unknown_approval());
    }
    let wait = wait_of(&app, &q)?;
    let deadline = tokio::time::Instant::now() + wait.unwrap_or_default();
    let mut changed = app.approvals_changed.subscribe();
    loop {
        let view = approvals::get(&app.store, &id)
            .await?
            .filter(|v| match &caller {
                RunOrApprover::Run(run) => v.record.run_id == run.id,
                RunOrApprover::Approver(a) => visible_to(&app, a, v),
            })
            .ok_or_else(refusals::unknown_approval)?;
        let now = app.clock.now();
        let mut approval = wire(&view, now);
        if let RunOrApprover::Run(_) = &caller {
            // The sandbox learns where its request stands, not which policy held
            // it nor who the approvers are (people it could try to deceive).
            approval.policy = String::new();
            for d in &mut approval.decisions {
                d.approver = "approver".to_owned();
                d.user = None;
                d.comment = None;
            }
        }
        if approval.status != ApprovalStatus::Pending || tokio::time::Instant::now() >= deadline {
            return Ok(Json(approval));
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let mut stopping = app.stopping.subscribe();
        tokio::select! {
            _ = changed.changed() => {}
            _ = tokio::time::sleep(left.min(POLL_EVERY)) => {}
            // A broker that is stopping answers what it knows now.
            _ = stopping.wait_for(|s| *s) => return Ok(Json(approval)),
        }
    }
}

fn list_filter(q: &ApprovalListQuery) -> Result<ListFilter, ApiError> {
    let status = match q.status.as_deref() {
        None => Some(ApprovalStatus::Pending),
        Some("all") => None,
        Some(s) => Some(ApprovalStatus::parse(s).ok_or_else(|| {
            ApiError::bad_request(
                ErrorCode::InvalidQuery,
                "status: pending, approved, denied, expired, cancelled or all",
            )
        })?),
    };
    if let Some(run) = &q.run_id {
        if !is_id(run) {
            return Err(ApiError::bad_request(
                ErrorCode::InvalidQuery,
                "run_id: a lowercase UUID",
            ));
        }
    }
    let limit = q.limit.unwrap_or(100);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::bad_request(
            ErrorCode::InvalidQuery,
            "limit: 1 to 500",
        ));
    }
    Ok(ListFilter {
        status,
        run_id: q.run_id.clone().map(String::from),
        limit,
    })
}

refusals!(ListApprovalsRefusals {
    400 => [InvalidQuery],
    401 => [Unauthenticated],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Approvals an approver may decide
///
/// The approvals (pending by default) whose rules name this approver's user, newest first;
/// never those asked for the approver's own user.
#[utoipa::path(
    get,
    path = "/v1/approvals",
    operation_id = "listMyApprovals",
    tags = ["approvals"],
    security(("approverKey" = [])),
    params(ApprovalListQuery),
    responses(
        (status = 200, description = "Approvals, newest first.", body = ApprovalList),
        ListApprovalsRefusals,
    ),
)]
pub async fn list_mine(
    State(app): State<AppState>,
    ApproverCaller(approver): ApproverCaller,
    ApiQuery(q): ApiQuery<ApprovalListQuery>,
) -> Result<Json<ApprovalList>, ApiError> {
    let mut filter = list_filter(&q)?;
    let want = filter.limit;
    filter.limit = 500;
    let now = app.clock.now();
    let views = approvals::list(&app.store, &filter, now).await?;
    let approvals = views
        .iter()
        .filter(|v| visible_to(&app, &approver, v))
        .take(want as usize)
        .map(|v| wire(v, now))
        .collect();
    Ok(Json(ApprovalList { approvals }))
}

refusals!(DecideRefusals {
    400 => [InvalidRequest, InvalidJson],
    401 => [Unauthenticated],
    403 => [SelfApproval, NotAnApprover],
    404 => [UnknownApproval],
    409 => [ApprovalDecided, AlreadyVoted],
    413 => [BodyTooLarge],
    415 => [UnsupportedMediaType],
    500 => [Internal],
    503 => [StoreUnavailable],
});

fn comment_of(req: &DecideApprovalRequest) -> Result<Option<String>, ApiError> {
    match &req.comment {
        Some(c)
            if c.chars().count() > 1000
                || c.chars().any(crate::names::misleads) =>
        {
            Err(ApiError::bad_request(
                ErrorCode::InvalidRequest,
                "comment: at most 1000 characters; no control (but tab and newline), bidirectional \
                 or invisible characters",
            ))
        }
        Some(c) if c.trim().is_empty() => Ok(None),
        other => Ok(other.clone()),
    }
}

/// Records `voter`'s decision on `view` (read by the caller; the writer
/// re-reads what it decides on inside its transaction).
async fn decide(
    app: &AppState,
    view: ApprovalView,
    voter: Voter,
    approve: bool,
    comment: Option<String>,
    rid: String,
) -> Result<Json<Approval>, ApiError> {
    let id = view.record.id.as_str();
    let policy = app.policy();
    let groups_of: approvals::GroupsOf =
        Arc::new(move |user: &str| policy.groups_of(user).unwrap_or_default());
    let mut audit = AuditEvent::new(
        if approve {
            events::APPROVAL_VOTED
        } else {
            events::APPROVAL_DENIED
        },
        voter.actor(),
        if approve { "allow" } else { "deny" },
    );
    audit.run_id = Some(view.record.run_id.clone());
    audit.user = Some(view.user.clone());
    audit.task_id = Some(view.task_id.clone());
    audit.action = Some(view.record.action.clone());
    audit.resource = Some(view.record.resource.clone());
    audit.request_id = Some(rid);
    // The comment is the approver's own words: kept short in the audit row.
    audit.reason = comment
        .as_deref()
        .map(|c| c.chars().take(200).collect::<String>());
    let outcome = app
        .store
        .writer()
        .submit(Decide {
            id: id.to_owned(),
            voter,
            approve,
            comment,
            groups_of,
            audit,
        })
        .await?;
    if !matches!(outcome, Decided::Recorded(_)) {
        return Err(refusals::decision(&outcome));
    }
    app.approvals_changed
        .send_modify(|n| *n = n.wrapping_add(1));
    let view = approvals::get(&app.store, id)
        .await?
        .ok_or_else(refusals::unknown_approval)?;
    Ok(Json(wire(&view, app.clock.now())))
}

async fn approver_decides(
    app: AppState,
    approver: Arc<ApproverRecord>,
    id: String,
    req: DecideApprovalRequest,
    approve: bool,
    rid: String,
) -> Result<Json<Approval>, ApiError> {
    if !is_id(&id) {
        return Err(refusals::unknown_approval());
    }
    let comment = comment_of(&req)?;
    let view = approvals::get(&app.store, &id)
        .await?
        .ok_or_else(refusals::unknown_approval)?;
    may_decide(&app, &approver, &view)?;
    let voter = Voter::Approver {
        name: approver.name.clone(),
        user: approver.user_name.clone(),
    };
    decide(&app, view, voter, approve, comment, rid).await
}

/// Approve
///
/// Records this approver's approval. The approval is approved when every rule has its count of
/// distinct approving users (`2 of group:finance` needs two people); until then it stays
/// pending. The run's own user can never approve (four-eyes).
#[utoipa::path(
    post,
    path = "/v1/approvals/{id}/approve",
    operation_id = "approveApproval",
    tags = ["approvals"],
    security(("approverKey" = [])),
    params(IdPath),
    request_body(content = DecideApprovalRequest, example = json!({"comment": "matches the change ticket"})),
    responses(
        (status = 200, description = "The approval after the decision.", body = Approval),
        DecideRefusals,
    ),
)]
pub async fn approve(
    State(app): State<AppState>,
    ApproverCaller(approver): ApproverCaller,
    RequestId(rid): RequestId,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<DecideApprovalRequest>,
) -> Result<Json<Approval>, ApiError> {
    approver_decides(app, approver, id, req, true, rid).await
}

/// Deny
///
/// Denies the approval: one denial by anyone its rules name is final.
#[utoipa::path(
    post,
    path = "/v1/approvals/{id}/deny",
    operation_id = "denyApproval",
    tags = ["approvals"],
    security(("approverKey" = [])),
    params(IdPath),
    request_body(content = DecideApprovalRequest, example = json!({"comment": "not during the freeze"})),
    responses(
        (status = 200, description = "The approval after the decision.", body = Approval),
        DecideRefusals,
    ),
)]
pub async fn deny(
    State(app): State<AppState>,
    ApproverCaller(approver): ApproverCaller,
    RequestId(rid): RequestId,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<DecideApprovalRequest>,
) -> Result<Json<Approval>, ApiError> {
    approver_decides(app, approver, id, req, false, rid).await
}

/// List approvals
///
/// Every approval (pending by default), newest first, with the full arguments and decisions.
#[utoipa::path(
    get,
    path = "/v1/admin/approvals",
    operation_id = "listApprovals",
    tags = ["approvals", "admin"],
    security(("adminToken" = [])),
    params(ApprovalListQuery),
    responses(
        (status = 200, description = "Approvals, newest first.", body = ApprovalList),
        ListApprovalsRefusals,
    ),
)]
pub async fn admin_list(
    State(app): State<AppState>,
    _admin: AdminCaller,
    ApiQuery(q): ApiQuery<ApprovalListQuery>,
) -> Result<Json<ApprovalList>, ApiError> {
    let filter = list_filter(&q)?;
    let now = app.clock.now();
    let views = approvals::list(&app.store, &filter, now).await?;
    Ok(Json(ApprovalList {
        approvals: views.iter().map(|v| wire(v, now)).collect(),
    }))
}

refusals!(AdminShowRefusals {
    401 => [Unauthenticated],
    404 => [UnknownApproval],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Read an approval
#[utoipa::path(
    get,
    path = "/v1/admin/approvals/{id}",
    operation_id = "getApprovalAdmin",
    tags = ["approvals", "admin"],
    security(("adminToken" = [])),
    params(IdPath),
    responses(
        (status = 200, description = "The approval.", body = Approval),
        AdminShowRefusals,
    ),
)]
pub async fn admin_show(
    State(app): State<AppState>,
    _admin: AdminCaller,
    Path(id): Path<String>,
) -> Result<Json<Approval>, ApiError> {
    if !is_id(&id) {
        return Err(refusals::unknown_approval());
    }
    let view = approvals::get(&app.store, &id)
        .await?
        .ok_or_else(refusals::unknown_approval)?;
    Ok(Json(wire(&view, app.clock.now())))
}

refusals!(AdminDenyRefusals {
    400 => [InvalidRequest, InvalidJson],
    401 => [Unauthenticated],
    404 => [UnknownApproval],
    409 => [ApprovalDecided, AlreadyVoted],
    413 => [BodyTooLarge],
    415 => [UnsupportedMediaType],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Deny an approval (administrator)
///
/// An administrator cancels a pending approval: recorded as a denial by `admin`. The admin
/// token cannot approve: an approval must name a person.
#[utoipa::path(
    post,
    path = "/v1/admin/approvals/{id}/deny",
    operation_id = "denyApprovalAdmin",
    tags = ["approvals", "admin"],
    security(("adminToken" = [])),
    params(IdPath),
    request_body(content = DecideApprovalRequest),
    responses(
        (status = 200, description = "The approval after the decision.", body = Approval),
        AdminDenyRefusals,
    ),
)]
pub async fn admin_deny(
    State(app): State<AppState>,
    _admin: AdminCaller,
    RequestId(rid): RequestId,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<DecideApprovalRequest>,
) -> Result<Json<Approval>, ApiError> {
    if !is_id(&id) {
        return Err(refusals::unknown_approval());
    }
    let comment = comment_of(&req)?;
    let view = approvals::get(&app.store, &id)
        .await?
        .ok_or_else(refusals::unknown_approval)?;
    decide(&app, view, Voter::Admin, false, comment, rid).await
}
