//! `/v1/admin/audit…`: reading and verifying the tamper-evident log (admin only).
//!
//! Every filter is validated against the grammar of the field it matches, so a
//! malformed filter is a clear 400 rather than a silently empty page.

use super::extract::{AdminCaller, ApiJson, ApiQuery, RequestId};
use crate::api::openapi::refusals;
use crate::app::AppState;
use crate::audit::query::{self, AuditFilter, MAX_PAGE};
use crate::clock::parse_rfc3339_ms;
use crate::error::ApiError;
use crate::ids::is_id;
use crate::names::is_user;
use axum::extract::State;
use axum::Json;
use tessera_client::types::ErrorCode;
use tessera_client::types::{
    AuditExportRecorded, AuditExportRequest, AuditPage, AuditQuery, AuditVerifyReport,
    CheckpointsRequest, CheckpointsResponse, LatestCheckpoint, SegmentCheckRequest,
    SegmentCheckResponse,
};

const DEFAULT_PAGE: i64 = 100;

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::bad_request(ErrorCode::InvalidQuery, message)
}

/// A filter names an event of the catalogue (`capability.issued`) or a family
/// some event belongs to (`capability.*`). Anything else could only ever match
/// nothing, which an operator would read as "nothing happened".
fn is_event_filter(s: &str) -> bool {
    match s.strip_suffix(".*") {
        Some(family) => crate::audit::events::ALL
            .iter()
            .any(|e| e.split_once('.').is_some_and(|(f, _)| f == family)),
        None => crate::audit::events::ALL.contains(&s),
    }
}

fn time_param(name: &str, value: Option<String>) -> Result<Option<i64>, ApiError> {
    value
        .map(|v| {
            parse_rfc3339_ms(&v).ok_or_else(|| {
                bad(format!(
                    "{name} must be an RFC 3339 time, e.g. 2026-11-29T10:00:00Z"
                ))
            })
        })
        .transpose()
}

fn into_filter(q: AuditQuery) -> Result<AuditFilter, ApiError> {
    if q.run.as_deref().is_some_and(|r| !is_id(r)) {
        return Err(bad("run must be a run id"));
    }
    if q.capability.as_deref().is_some_and(|c| !is_id(c)) {
        return Err(bad("capability must be a capability id"));
    }
    if q.user.as_deref().is_some_and(|u| !is_user(u)) {
        return Err(bad("user must be 1-128 of [A-Za-z0-9._@+-]"));
    }
    if q.event.as_deref().is_some_and(|e| !is_event_filter(e)) {
        return Err(bad(
            "event must be an event name or a family such as capability.* (docs/audit.md lists them)",
        ));
    }
    if q.decision
        .as_deref()
        .is_some_and(|d| !matches!(d, "allow" | "deny" | "error"))
    {
        return Err(bad("decision must be allow, deny or error"));
    }
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(bad(format!("limit must be 1-{MAX_PAGE}")));
    }
    let descending = match (q.order.as_deref(), q.after, q.before) {
        (_, Some(_), Some(_)) => return Err(bad("give after or before, not both")),
        (Some("asc") | None, _, None) => false,
        (Some("desc") | None, None, _) => true,
        (Some("asc" | "desc"), _, _) => {
            return Err(bad("after pages ascending, before descending"))
        }
        _ => return Err(bad("order must be asc or desc")),
    };
    Ok(AuditFilter {
        run_id: q.run.map(String::from),
        capability_id: q.capability.map(String::from),
        user: q.user,
        event: q.event,
        decision: q.decision,
        since_ms: time_param("since", q.since)?,
        until_ms: time_param("until", q.until)?,
        cursor: q.after.or(q.before),
        descending,
        limit,
    })
}

refusals!(ListAuditRefusals {
    400 => [InvalidQuery],
    401 => [Unauthenticated],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Read the audit log
///
/// Audit rows, filtered, ascending by sequence number unless `order=desc` or `before` is given.
/// Page with `next_cursor`. Malformed filters are a 400, never an empty page.
#[utoipa::path(
    get,
    path = "/v1/admin/audit",
    operation_id = "listAudit",
    tags = ["admin", "audit"],
    security(("adminToken" = [])),
    params(AuditQuery),
    responses(
        (status = 200, description = "A page of audit rows.", body = AuditPage),
        ListAuditRefusals,
    ),
)]
pub async fn list(
    State(app): State<AppState>,
    _admin: AdminCaller,
    ApiQuery(params): ApiQuery<AuditQuery>,
) -> Result<Json<AuditPage>, ApiError> {
    let filter = into_filter(params)?;
    let events = query::list(&app.store, &filter).await?;
    let next_cursor = (events.len() as i64 == filter.limit)
        .then(|| events.last().map(|e| e.seq))
        .flatten();
    Ok(Json(AuditPage {
        events,
        next_cursor,
    }))
}

refusals!(VerifyAuditRefusals {
    401 => [Unauthenticated],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Verify the audit chain
///
/// Walks the audit log from the genesis value, recomputing every row's link (HMAC-SHA256 under
/// the audit key; unkeyed SHA-256 for rows from before the chain was keyed), and reports the
/// first row that was edited, deleted, relinked, downgraded to an unkeyed link, linked with an
/// unknown key, or cut off. Always 200: `ok` says whether the chain verifies. A truncation of
/// the newest rows together with the head is only visible against checkpoints (`POST
/// /v1/admin/audit/checkpoints/check`).
#[utoipa::path(
    get,
    path = "/v1/admin/audit/verify",
    operation_id = "verifyAudit",
    tags = ["admin", "audit"],
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "Verification report", body = AuditVerifyReport),
        VerifyAuditRefusals,
    ),
)]
pub async fn verify(
    State(app): State<AppState>,
    _admin: AdminCaller,
) -> Result<Json<AuditVerifyReport>, ApiError> {
    let key = app
        .store
        .writer()
        .audit_key()
        .ok_or_else(ApiError::unavailable)?;
    Ok(Json(crate::audit::verify::verify(&app.store, key).await?))
}

/// Checkpoints checked per request (a long file is sent in several).
pub const MAX_CHECKPOINTS_PER_CHECK: usize = 100;

refusals!(CheckAuditCheckpointsRefusals {
    400 => [InvalidRequest, InvalidJson],
    401 => [Unauthenticated],
    413 => [BodyTooLarge],
    415 => [UnsupportedMediaType],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Check signed audit checkpoints against the store
///
/// For each checkpoint (compact JWS, `typ` `tsr-audit-checkpoint+jwt`, as written to
/// `audit.checkpoint_file`, standard output or the witness URL), whether the store still holds
/// the checkpointed row with the link it signed: `matches`, `changed`, `missing` (truncated or
/// deleted), `bad_signature` (not signed by any key this broker ever used), `malformed`. At
/// most 100 per request; `tessera audit verify --checkpoints FILE` sends a file in batches.
#[utoipa::path(
    post,
    path = "/v1/admin/audit/checkpoints/check",
    operation_id = "checkAuditCheckpoints",
    tags = ["admin", "audit"],
    security(("adminToken" = [])),
    request_body = CheckpointsRequest,
    responses(
        (status = 200, description = "One result per checkpoint, in order", body = CheckpointsResponse),
        CheckAuditCheckpointsRefusals,
    ),
)]
pub async fn check_checkpoints(
    State(app): State<AppState>,
    _admin: AdminCaller,
    ApiJson(req): ApiJson<CheckpointsRequest>,
) -> Result<Json<CheckpointsResponse>, ApiError> {
    if req.checkpoints.len() > MAX_CHECKPOINTS_PER_CHECK {
        return Err(ApiError::bad_request(
            ErrorCode::InvalidRequest,
            format!("at most {MAX_CHECKPOINTS_PER_CHECK} checkpoints per request"),
        ));
    }
    let keys = crate::jobs::checkpoints::verifying_keys(&app)
        .await
        .ok_or_else(ApiError::unavailable)?;
    let results =
        crate::audit::checkpoint::check(&app.store, &app.config.issuer, &keys, &req.checkpoints)
            .await?;
    Ok(Json(CheckpointsResponse { results }))
}

refusals!(RecordExportRefusals {
    400 => [InvalidRequest, InvalidJson],
    401 => [Unauthenticated],
    413 => [BodyTooLarge],
    415 => [UnsupportedMediaType],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Record an audit export through a checkpoint
///
/// Says that rows `first_seq..=last_seq` are now held outside the store, in a file ending at
/// the signed checkpoint of `last_seq` (`tessera audit export --through-checkpoint --output
/// FILE` sends it after the file is written and synced). The checkpoint must be signed by this
/// broker and match the stored row, and the export must start at or before the first row the
/// store keeps. Audited as `audit.exported`. With `retention.audit` set, rows up to `last_seq`
/// older than the period may then be pruned (docs/operations.md).
#[utoipa::path(
    post,
    path = "/v1/admin/audit/exports",
    operation_id = "recordAuditExport",
    tags = ["admin", "audit"],
    security(("adminToken" = [])),
    request_body = AuditExportRequest,
    responses(
        (status = 200, description = "Recorded", body = AuditExportRecorded),
        RecordExportRefusals,
    ),
)]
pub async fn record_export(
    State(app): State<AppState>,
    _admin: AdminCaller,
    RequestId(rid): RequestId,
    ApiJson(req): ApiJson<AuditExportRequest>,
) -> Result<Json<AuditExportRecorded>, ApiError> {
    let invalid = |m: &str| ApiError::bad_request(ErrorCode::InvalidRequest, m.to_owned());
    let hex64 = |h: &str| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit());
    if req.first_seq < 1 || req.last_seq < req.first_seq {
        return Err(invalid("first_seq must be at least 1 and at most last_seq"));
    }
    if !hex64(&req.sha256) || !hex64(&req.last_hash) {
        return Err(invalid("sha256 and last_hash are 64 hex digits"));
    }
    let keys = crate::jobs::checkpoints::verifying_keys(&app)
        .await
        .ok_or_else(ApiError::unavailable)?;
    let checked = crate::audit::checkpoint::check(
        &app.store,
        &app.config.issuer,
        &keys,
        std::slice::from_ref(&req.checkpoint),
    )
    .await?;
    let matches = checked
        .first()
        .is_some_and(|c| c.status == "matches" && c.seq == req.last_seq);
    if !matches {
        return Err(invalid(
            "the checkpoint is not this broker's signed checkpoint of row last_seq as stored",
        ));
    }
    let row = crate::store::audit::row_link(&app.store, req.last_seq)
        .await?
        .ok_or_else(|| invalid("row last_seq is not in the store"))?;
    if row.hash != req.last_hash {
        return Err(invalid("last_hash is not the stored link of row last_seq"));
    }
    // Never record (and so never let retention delete) rows that do not
    // verify: a tampered row must stay where `audit verify` sees it.
    let key = app
        .store
        .writer()
        .audit_key()
        .ok_or_else(ApiError::unavailable)?;
    if let Some(p) = crate::audit::verify::problem_through(&app.store, key, req.last_seq).await? {
        return Err(invalid(&format!(
            "the audit chain does not verify up to row last_seq (row {}: {}); run `tessera audit verify`",
            p.seq, p.kind
        )));
    }
    let first_kept = crate::store::audit::first_seq(&app.store)
        .await?
        .unwrap_or(1);
    if req.first_seq > first_kept {
        return Err(invalid(
            "the export must start at or before the first row the store keeps, or rows would be lost",
        ));
    }
    let id = crate::ids::new_id();
    app.store
        .writer()
        .submit(crate::store::retention::RecordAuditExport {
            id: id.clone(),
            first_seq: req.first_seq,
            last_seq: req.last_seq,
            last_hash: req.last_hash,
            checkpoint: req.checkpoint,
            sha256: req.sha256.to_ascii_lowercase(),
            request_id: Some(rid),
        })
        .await?;
    Ok(Json(AuditExportRecorded { id }))
}

refusals!(CheckSegmentRefusals {
    400 => [InvalidRequest, InvalidJson],
    401 => [Unauthenticated],
    413 => [BodyTooLarge],
    415 => [UnsupportedMediaType],
    503 => [StoreUnavailable],
});

/// Check rows of an exported audit segment
///
/// Recomputes each row's link with the audit key (rows pruned by retention are proved from
/// their export this way) and checks that each follows the one before, starting from
/// `prev_hash`. At most 1000 rows per request; `tessera audit verify --segments FILE` sends
/// an export in pages and chains them to the store's first kept row.
#[utoipa::path(
    post,
    path = "/v1/admin/audit/segments/check",
    operation_id = "checkAuditSegment",
    tags = ["admin", "audit"],
    security(("adminToken" = [])),
    request_body = SegmentCheckRequest,
    responses(
        (status = 200, description = "The first problem, if any", body = SegmentCheckResponse),
        CheckSegmentRefusals,
    ),
)]
pub async fn check_segment(
    State(app): State<AppState>,
    _admin: AdminCaller,
    ApiJson(req): ApiJson<SegmentCheckRequest>,
) -> Result<Json<SegmentCheckResponse>, ApiError> {
    if req.rows.len() > crate::audit::segments::MAX_ROWS {
        return Err(ApiError::bad_request(
            ErrorCode::InvalidRequest,
            format!(
                "at most {} rows per request",
                crate::audit::segments::MAX_ROWS
            ),
        ));
    }
    let key = app
        .store
        .writer()
        .audit_key()
        .ok_or_else(ApiError::unavailable)?;
    Ok(Json(crate::audit::segments::check(
        key,
        &req.prev_hash,
        &req.rows,
    )))
}

refusals!(LatestCheckpointRefusals {
    401 => [Unauthenticated],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// The newest audit checkpoint
///
/// The newest checkpoint the store holds, and whether the witness URL acknowledged it; `latest`
/// is null before the first. It is read from the store, which is what a checkpoint is meant to
/// check: compare it with a copy held elsewhere (`POST /v1/admin/audit/checkpoints/check`).
#[utoipa::path(
    get,
    path = "/v1/admin/audit/checkpoints/latest",
    operation_id = "latestAuditCheckpoint",
    tags = ["admin", "audit"],
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The newest stored checkpoint, or null", body = LatestCheckpoint),
        LatestCheckpointRefusals,
    ),
)]
pub async fn latest_checkpoint(
    State(app): State<AppState>,
    _admin: AdminCaller,
) -> Result<Json<LatestCheckpoint>, ApiError> {
    let latest = crate::audit::checkpoint::latest(&app.store).await?;
    Ok(Json(LatestCheckpoint { latest }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(f: impl FnOnce(&mut AuditQuery)) -> Result<AuditFilter, ApiError> {
        let mut p = AuditQuery::default();
        f(&mut p);
        into_filter(p)
    }

    #[test]
    fn filters_are_validated() {
        assert!(params(|_| {}).is_ok());
        assert!(params(|p| p.run = Some("'; DROP TABLE audit;--".into())).is_err());
        assert!(params(|p| p.user = Some("a b".into())).is_err());
        assert!(params(|p| p.event = Some("capability.*".into())).is_ok());
        assert!(params(|p| p.event = Some("capability.%".into())).is_err());
        assert!(params(|p| p.event = Some("run.ended".into())).is_ok());
        for unknown in ["nonsense", "capability.bogus", "nosuch.*", "capability"] {
            assert!(
                params(|p| p.event = Some(unknown.into())).is_err(),
                "{unknown}"
            );
        }
        assert!(params(|p| p.decision = Some("maybe".into())).is_err());
        assert!(params(|p| p.since = Some("yesterday".into())).is_err());
        assert!(params(|p| p.limit = Some(0)).is_err());
        assert!(params(|p| p.limit = Some(MAX_PAGE + 1)).is_err());
        assert!(params(|p| {
            p.after = Some(1);
            p.before = Some(9)
        })
        .is_err());
        assert!(params(|p| {
            p.after = Some(1);
            p.order = Some("desc".into())
        })
        .is_err());
    }

    #[test]
    fn before_pages_descending() {
        let f = params(|p| p.before = Some(10)).unwrap();
        assert!(f.descending);
        assert_eq!(f.cursor, Some(10));
        let f = params(|p| p.order = Some("desc".into())).unwrap();
        assert!(f.descending && f.cursor.is_none());
        assert!(!params(|_| {}).unwrap().descending);
    }
}
