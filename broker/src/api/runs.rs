//! `/v1/runs`: runtimes start, inspect and end runs.
//!
//! A runtime may start runs only for the users and task kinds its scope allows,
//! and may only see or end its own runs (another runtime's run is a 404, not a
//! 403, so run ids cannot be probed). Ending revokes every capability and lease
//! in the run in the same transaction that marks it ended.

use super::extract::{AdminCaller, ApiJson, ApiQuery, RequestId, RuntimeCaller, RuntimeOrAdmin};
use crate::api::openapi::{refusals, IdPath};
use crate::app::AppState;
use crate::audit::{events, AuditEvent};
use crate::clock::rfc3339;
use crate::error::ApiError;
use crate::grammar::parse_duration;
use crate::ids::{is_id, new_id};
use crate::names::{self, GlobList};
use crate::policy::admit;
use crate::secret::RunToken;
use crate::store::capabilities::{leases_for_run, list_for_run};
use crate::store::runs::{self, CreateRun, EndRun, RunRecord};
use crate::store::writer::AppendAudit;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use tessera_client::types::ErrorCode;
use tessera_client::types::RunListQuery;
use tessera_client::types::{
    CapabilitySummary, CreateRunRequest, CreateRunResponse, EndRunResponse, LeaseSummary, RunList,
    RunSummary, RunView, Task,
};

fn validate(req: &CreateRunRequest) -> Result<(), ApiError> {
    admit::check_run(&admit::RunFields {
        user: &req.user,
        task_id: &req.task.id,
        task_kind: &req.task.kind,
        task_attributes: &req.task.attributes,
        labels: &req.labels,
    })
    .map_err(|r| ApiError::bad_request(r.code, r.message))
}

refusals!(CreateRunRefusals {
    400 => [InvalidRequest, InvalidJson, InvalidUser, InvalidTask, InvalidLabels, InvalidTtl],
    401 => [Unauthenticated],
    403 => [RuntimeScope],
    413 => [BodyTooLarge],
    415 => [UnsupportedMediaType],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Start a run
///
/// A runtime starts a run on behalf of a user for a task. The runtime's scope (`users`,
/// `task_kinds` globs) must allow the user and task kind, otherwise `403 runtime_scope`
/// (audited). `ttl` defaults to the server's default run ttl (1h unless configured) and may not
/// exceed the maximum run ttl (24h unless configured). The run token is returned exactly once;
/// only its SHA-256 is stored.
#[utoipa::path(
    post,
    path = "/v1/runs",
    operation_id = "createRun",
    tags = ["runs"],
    security(("runtimeKey" = [])),
    request_body(content = CreateRunRequest, example = json!({"user": "alice", "task": {"id": "t-1", "kind": "summarize", "attributes": {}}, "ttl": "30m", "labels": []})),
    responses(
        (status = 201, description = "Run started.", body = CreateRunResponse),
        CreateRunRefusals,
    ),
)]
pub async fn create(
    State(app): State<AppState>,
    RuntimeCaller(rt): RuntimeCaller,
    RequestId(rid): RequestId,
    ApiJson(req): ApiJson<CreateRunRequest>,
) -> Result<(StatusCode, Json<CreateRunResponse>), ApiError> {
    validate(&req)?;
    let limits = &app.config.limits;
    let ttl = match &req.ttl {
        None => limits.default_run_ttl,
        Some(t) => parse_duration(t)
            .map_err(|e| ApiError::bad_request(ErrorCode::InvalidTtl, e.to_string()))?,
    };
    if ttl > limits.max_run_ttl {
        return Err(ApiError::bad_request(
            ErrorCode::InvalidTtl,
            format!(
                "run ttl exceeds the server maximum of {}",
                crate::grammar::format_duration(limits.max_run_ttl)
            ),
        ));
    }
    let users = GlobList::parse(&rt.users);
    let kinds = GlobList::parse(&rt.task_kinds);
    let in_scope = users.is_some_and(|g| g.matches(&req.user))
        && kinds.is_some_and(|g| g.matches(&req.task.kind));
    let mut audit = AuditEvent::new(events::RUN_STARTED, format!("runtime:{}", rt.name), "allow");
    audit.user = Some(req.user.clone());
    audit.request_id = Some(rid);
    if !in_scope {
        audit.event = events::RUN_DENIED;
        audit.decision = "deny";
        audit.reason = Some("runtime_scope".into());
        audit.task_id = Some(req.task.id.clone());
        audit.detail = Some(format!("task_kind={}", req.task.kind));
        app.store.writer().submit(AppendAudit(audit)).await?;
        return Err(ApiError::forbidden(
            ErrorCode::RuntimeScope,
            "this runtime may not start runs for that user or task kind",
        ));
    }
    let now = app.clock.now();
    let token = RunToken::generate();
    let record = RunRecord {
        id: new_id(),
        runtime_id: rt.id.clone(),
        runtime_name: rt.name.clone(),
        user: req.user,
        task_id: req.task.id,
        task_kind: req.task.kind,
        task_attributes: req.task.attributes,
        labels: req.labels,
        created_at: now,
        expires_at: now + ttl.as_secs() as i64,
        ended_at: None,
    };
    audit.run_id = Some(record.id.clone());
    audit.task_id = Some(record.task_id.clone());
    audit.detail = Some(format!("task={} kind={}", record.task_id, record.task_kind));
    let response = CreateRunResponse {
        run_id: record.id.clone().into(),
        run_token: token.expose_secret().to_owned(),
        expires_at: rfc3339(record.expires_at),
    };
    app.store
        .writer()
        .submit(CreateRun {
            record,
            token_hash: token.sha256(),
            audit,
        })
        .await?;
    Ok((StatusCode::CREATED, Json(response)))
}

async fn visible_run(
    app: &AppState,
    caller: &RuntimeOrAdmin,
    id: &str,
) -> Result<RunRecord, ApiError> {
    if !is_id(id) {
        return Err(ApiError::not_found("run"));
    }
    let run = runs::find(&app.store, id)
        .await?
        .ok_or_else(|| ApiError::not_found("run"))?;
    match caller.runtime_id() {
        Some(rt) if rt != run.runtime_id => Err(ApiError::not_found("run")),
        _ => Ok(run),
    }
}

refusals!(GetRunRefusals {
    401 => [Unauthenticated],
    404 => [NotFound],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Show a run
///
/// The run with its capabilities (never their tokens), leases and revocation state. A runtime
/// sees only its own runs; the admin sees all.
#[utoipa::path(
    get,
    path = "/v1/runs/{id}",
    operation_id = "getRun",
    tags = ["runs"],
    security(("runtimeKey" = []), ("adminToken" = [])),
    params(IdPath),
    responses(
        (status = 200, description = "The run.", body = RunView),
        GetRunRefusals,
    ),
)]
pub async fn show(
    State(app): State<AppState>,
    caller: RuntimeOrAdmin,
    Path(id): Path<String>,
) -> Result<Json<RunView>, ApiError> {
    let run = visible_run(&app, &caller, &id).await?;
    let now = app.clock.now();
    let caps = list_for_run(&app.store, &run.id).await?;
    let leases = leases_for_run(&app.store, &run.id).await?;
    let run_state = run.state(now);
    let end_reason = match run_state {
        runs::RunState::Active => None,
        runs::RunState::Expired => Some("expired".to_owned()),
        runs::RunState::Ended => runs::end_reason(&app.store, &run.id).await?,
    };
    Ok(Json(RunView {
        run_id: run.id.into(),
        user: run.user,
        task: Task {
            id: run.task_id,
            kind: run.task_kind,
            attributes: run.task_attributes,
        },
        runtime_id: run.runtime_id.into(),
        labels: run.labels,
        created_at: rfc3339(run.created_at),
        expires_at: rfc3339(run.expires_at),
        ended_at: run.ended_at.map(rfc3339),
        state: run_state.as_str().to_owned(),
        end_reason,
        capabilities: caps
            .into_iter()
            .map(|c| {
                let state = if c.revoked_at.is_some() {
                    "revoked"
                } else if run_state != runs::RunState::Active {
                    "inactive"
                } else if now >= c.expires_at {
                    "expired"
                } else if c.uses_left == 0 {
                    "exhausted"
                } else {
                    "active"
                };
                CapabilitySummary {
                    capability_id: c.id.into(),
                    action: c.action,
                    resource: c.resource,
                    issued_at: rfc3339(c.issued_at),
                    expires_at: rfc3339(c.expires_at),
                    uses: c.uses,
                    uses_left: c.uses_left,
                    revoked_at: c.revoked_at.map(rfc3339),
                    state: state.to_owned(),
                }
            })
            .collect(),
        leases: leases
            .into_iter()
            .map(|l| LeaseSummary {
                lease_id: l.id.into(),
                capability_id: l.capability_id.into(),
                backend: l.backend,
                kind: l.kind,
                created_at: rfc3339(l.created_at),
                expires_at: rfc3339(l.expires_at),
                revoked_at: l.revoked_at.map(rfc3339),
            })
            .collect(),
    }))
}

refusals!(EndRunRefusals {
    401 => [Unauthenticated],
    404 => [NotFound],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// End a run and revoke everything in it
///
/// Marks the run ended and, in the same transaction, revokes every capability and lease in it.
/// Ending an already ended run is not an error and revokes nothing twice (the counts are zero).
/// A runtime may end only its own runs; the admin may end any. No request body.
#[utoipa::path(
    post,
    path = "/v1/runs/{id}/end",
    operation_id = "endRun",
    tags = ["runs"],
    security(("runtimeKey" = []), ("adminToken" = [])),
    params(IdPath),
    responses(
        (status = 200, description = "The run is ended; counts of what this call revoked.", body = EndRunResponse),
        EndRunRefusals,
    ),
)]
pub async fn end(
    State(app): State<AppState>,
    caller: RuntimeOrAdmin,
    RequestId(rid): RequestId,
    Path(id): Path<String>,
) -> Result<Json<EndRunResponse>, ApiError> {
    if !is_id(&id) {
        return Err(ApiError::not_found("run"));
    }
    let mut audit = AuditEvent::new(events::RUN_ENDED, caller.actor(), "allow");
    audit.run_id = Some(id.clone());
    audit.request_id = Some(rid);
    let counts = app
        .store
        .writer()
        .submit(EndRun {
            run_id: id.clone(),
            runtime_id: caller.runtime_id().map(str::to_owned),
            reason: "ended",
            audit,
        })
        .await?
        .ok_or_else(|| ApiError::not_found("run"))?;
    // Its CA and placeholders die with it, here at once (the gateway also
    // drops them within a second of an end on another replica).
    app.injection.forget(&id);
    app.revocation_wakeup.notify_one();
    Ok(Json(EndRunResponse {
        run_id: id.into(),
        revoked: counts,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn req(user: &str, kind: &str, labels: Vec<String>) -> CreateRunRequest {
        CreateRunRequest {
            user: user.into(),
            task: Task {
                id: "t-1".into(),
                kind: kind.into(),
                attributes: BTreeMap::new(),
            },
            ttl: None,
            labels,
        }
    }

    #[test]
    fn validation_codes() {
        assert!(validate(&req("alice", "summarize", vec![])).is_ok());
        assert_eq!(
            validate(&req("al'ice", "summarize", vec![]))
                .unwrap_err()
                .code,
            ErrorCode::InvalidUser
        );
        assert_eq!(
            validate(&req("alice", "Sum", vec![])).unwrap_err().code,
            ErrorCode::InvalidTask
        );
        assert_eq!(
            validate(&req("alice", "s", vec!["bad label".into()]))
                .unwrap_err()
                .code,
            ErrorCode::InvalidLabels
        );
    }
}

refusals!(ListRunsRefusals {
    400 => [InvalidQuery],
    401 => [Unauthenticated],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// List runs
///
/// Runs filtered by runtime, user and state, ordered and paged by run id (ids are
/// time-ordered).
#[utoipa::path(
    get,
    path = "/v1/admin/runs",
    operation_id = "listRuns",
    tags = ["admin", "runs"],
    security(("adminToken" = [])),
    params(RunListQuery),
    responses(
        (status = 200, description = "A page of runs.", body = RunList),
        ListRunsRefusals,
    ),
)]
pub async fn list(
    State(app): State<AppState>,
    _admin: AdminCaller,
    ApiQuery(p): ApiQuery<RunListQuery>,
) -> Result<Json<RunList>, ApiError> {
    let bad = |m: &str| ApiError::bad_request(ErrorCode::InvalidQuery, m.to_owned());
    if p.runtime
        .as_deref()
        .is_some_and(|r| !super::admin::is_runtime_name(r))
    {
        return Err(bad("runtime must be a runtime name"));
    }
    if p.user.as_deref().is_some_and(|u| !names::is_user(u)) {
        return Err(bad("user must be 1-128 of [A-Za-z0-9._@+-]"));
    }
    if p.after.as_deref().is_some_and(|a| !is_id(a)) {
        return Err(bad("after must be a run id"));
    }
    let open = match p.state.as_deref() {
        None | Some("open") => Some(true),
        Some("ended") => Some(false),
        Some("all") => None,
        Some(_) => return Err(bad("state must be open, ended or all")),
    };
    let limit = p.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(bad("limit must be 1-1000"));
    }
    let records = runs::list(
        &app.store,
        &runs::RunFilter {
            runtime_name: p.runtime,
            user: p.user,
            open,
            after_id: p.after.map(String::from),
            limit,
        },
    )
    .await?;
    let now = app.clock.now();
    let next_cursor = (records.len() as i64 == limit)
        .then(|| records.last().map(|r| r.id.clone()))
        .flatten();
    let runs = records
        .into_iter()
        .map(|r| RunSummary {
            state: r.state(now).as_str().to_owned(),
            run_id: r.id.into(),
            user: r.user,
            task: Task {
                id: r.task_id,
                kind: r.task_kind,
                attributes: r.task_attributes,
            },
            runtime: r.runtime_name,
            labels: r.labels,
            created_at: rfc3339(r.created_at),
            expires_at: rfc3339(r.expires_at),
            ended_at: r.ended_at.map(rfc3339),
        })
        .collect();
    Ok(Json(RunList { runs, next_cursor }))
}
