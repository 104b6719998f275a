//! Runs: one agent execution for one user and task, holding one run token.
//!
//! A run is active until it is ended or its expiry passes; both make every
//! capability in it inactive. Ending is idempotent: the first end revokes, a repeat
//! finds nothing left to revoke and says so.

use super::query::stmt;
use super::writer::{BoxFuture, WriteCtx, WriteOp};
use super::{col, Store, StoreError};
use crate::audit::{events, AuditEvent};
use std::collections::BTreeMap;
use tessera_client::types::RevokedCounts;

#[derive(Debug, Clone)]
pub struct RunRecord {
    pub id: String,
    pub runtime_id: String,
    pub runtime_name: String,
    pub user: String,
    pub task_id: String,
    pub task_kind: String,
    pub task_attributes: BTreeMap<String, String>,
    pub labels: Vec<String>,
    pub created_at: i64,
    pub expires_at: i64,
    pub ended_at: Option<i64>,
}

pub use super::run_state::RunState;

impl RunRecord {
    pub fn state(&self, now: i64) -> RunState {
        RunState::of(self.ended_at, self.expires_at, now)
    }
}

pub struct CreateRun {
    pub record: RunRecord,
    pub token_hash: String,
    pub audit: AuditEvent,
}

impl WriteOp for CreateRun {
    type Output = ();
    const GRANTS: bool = true;
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let r = &self.record;
            let attrs = serde_json::to_string(&r.task_attributes).unwrap_or_default();
            let labels = serde_json::to_string(&r.labels).unwrap_or_default();
            let q = ctx.sql(
                "INSERT INTO runs (id, token_hash, runtime_id, runtime_name, user_name, task_id, task_kind, \
                 task_attributes, labels, created_at, expires_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            );
            stmt(&q)
                .bind(&r.id)
                .bind(&self.token_hash)
                .bind(&r.runtime_id)
                .bind(&r.runtime_name)
                .bind(&r.user)
                .bind(&r.task_id)
                .bind(&r.task_kind)
                .bind(attrs)
                .bind(labels)
                .bind(r.created_at)
                .bind(r.expires_at)
                .execute(&mut ctx.conn)
                .await?;
            ctx.audit(&self.audit).await
        })
    }
}

/// Ends a run and revokes everything in it. `runtime_id` restricts the end to
/// runs of that runtime (admins pass `None`). Returns `None` when no such run is
/// visible to the caller.
pub struct EndRun {
    pub run_id: String,
    pub runtime_id: Option<String>,
    pub reason: &'static str,
    pub audit: AuditEvent,
}

impl WriteOp for EndRun {
    type Output = Option<RevokedCounts>;
    fn apply<'a>(
        &'a self,
        ctx: &'a mut WriteCtx<'_>,
    ) -> BoxFuture<'a, Result<Self::Output, sqlx::Error>> {
        Box::pin(async move {
            let now = ctx.now();
            let q =
                ctx.sql("SELECT runtime_id, ended_at, user_name, task_id FROM runs WHERE id = $1");
            let row = stmt(&q)
                .bind(&self.run_id)
                .fetch_optional(&mut ctx.conn)
                .await?;
            let visible = match &row {
                None => None,
                Some(row) => {
                    let owner: String = row.try_get("runtime_id")?;
                    let ended_at: Option<i64> = row.try_get("ended_at")?;
                    let user: String = row.try_get("user_name")?;
                    let task: String = row.try_get("task_id")?;
                    (self.runtime_id.is_none() || self.runtime_id.as_ref() == Some(&owner))
                        .then_some((ended_at, user, task))
                }
            };
            let Some((ended_at, user, task)) = visible else {
                // Probing for (or at) another runtime's run leaves a trace.
                let mut ev = self.audit.clone();
                ev.decision = "deny";
                ev.reason = Some("not_found".into());
                ctx.audit(&ev).await?;
                return Ok(None);
            };
            let mut counts = RevokedCounts::default();
            if ended_at.is_none() {
                let q = ctx.sql("UPDATE runs SET ended_at = $1, end_reason = $2 WHERE id = $3 AND ended_at IS NULL");
                stmt(&q)
                    .bind(now)
                    .bind(self.reason)
                    .bind(&self.run_id)
                    .execute(&mut ctx.conn)
                    .await?;
                counts = revoke_everything(ctx, &self.run_id, now, "run_ended").await?;
                let mut ev = self.audit.clone();
                ev.user = Some(user);
                ev.task_id = Some(task);
                ev.detail = Some(format!(
                    "capabilities={} leases={} pending={} approvals={}",
                    counts.capabilities, counts.leases, counts.pending, counts.approvals
                ));
                ctx.audit(&ev).await?;
            }
            Ok(Some(counts))
        })
    }
}

/// Ends up to `limit` runs that are past their expiry but not yet ended: each is
/// marked ended at its expiry, everything in it revoked, and one `run.expired`
/// row audited. Returns how many runs it ended. Runs past their expiry were
/// already refused everywhere; this makes their end durable, visible and
/// audited, and revokes their leases downstream.
pub struct ExpireRuns {
    pub limit: i64,
}

impl WriteOp for ExpireRuns {
    type Output = usize;
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<usize, sqlx::Error>> {
        Box::pin(async move {
            let now = ctx.now();
            let q = ctx.sql(
                "SELECT id, expires_at, user_name, task_id FROM runs \
                 WHERE ended_at IS NULL AND expires_at <= $1 ORDER BY expires_at LIMIT $2",
            );
            let rows = stmt(&q)
                .bind(now)
                .bind(self.limit)
                .fetch_all(&mut ctx.conn)
                .await?;
            for row in &rows {
                let expires_at: i64 = row.try_get("expires_at")?;
                let mut ev = AuditEvent::new(events::RUN_EXPIRED, "broker", "allow");
                ev.reason = Some("expired".into());
                // Ended at its expiry: that is when it stopped being usable.
                close_open_run(ctx, row, expires_at, "expired", "run_expired", ev).await?;
            }
            Ok(rows.len())
        })
    }
}

/// Ends one open run found by a sweep or a runtime disable (`row` has `id`,
/// `user_name`, `task_id`): marks it ended at `ended_at`, revokes everything in it
/// and appends `ev` completed with the run, user, task and what was revoked.
pub(crate) async fn close_open_run(
    ctx: &mut WriteCtx<'_>,
    row: &super::query::Row,
    ended_at: i64,
    end_reason: &'static str,
    revoke_reason: &'static str,
    mut ev: AuditEvent,
) -> Result<RevokedCounts, sqlx::Error> {
    let id: String = row.try_get("id")?;
    let q = ctx
        .sql("UPDATE runs SET ended_at = $1, end_reason = $2 WHERE id = $3 AND ended_at IS NULL");
    stmt(&q)
        .bind(ended_at)
        .bind(end_reason)
        .bind(&id)
        .execute(&mut ctx.conn)
        .await?;
    let now = ctx.now();
    let counts = revoke_everything(ctx, &id, now, revoke_reason).await?;
    ev.run_id = Some(id);
    ev.user = Some(row.try_get("user_name")?);
    ev.task_id = Some(row.try_get("task_id")?);
    ev.detail = Some(format!(
        "capabilities={} leases={} pending={}",
        counts.capabilities, counts.leases, counts.pending
    ));
    ctx.audit(&ev).await?;
    Ok(counts)
}

/// Revokes every capability and lease of a run; returns how many.
pub(crate) async fn revoke_everything(
    ctx: &mut WriteCtx<'_>,
    run_id: &str,
    now: i64,
    reason: &'static str,
) -> Result<RevokedCounts, sqlx::Error> {
    let mut counts = RevokedCounts::default();
    // Every capability the run was issued, committed before this batch.
    super::run_index::catch_up(ctx, None).await?;
    let q = format!(
        "UPDATE capabilities SET revoked_at = {}, revoke_reason = {} WHERE {} AND revoked_at IS NULL",
        super::placeholder(ctx.dialect, 1),
        super::placeholder(ctx.dialect, 2),
        super::run_index::of_run_3(ctx.dialect)
    );
    counts.capabilities = stmt(&q)
        .bind(now)
        .bind(reason)
        .bind(run_id)
        .execute(&mut ctx.conn)
        .await?
        .rows_affected();
    counts.pending =
        super::revocations::enqueue(ctx, super::revocations::Scope::Run(run_id), reason).await?;
    let q = ctx.sql("UPDATE leases SET revoked_at = $1 WHERE run_id = $2 AND revoked_at IS NULL");
    counts.leases = stmt(&q)
        .bind(now)
        .bind(run_id)
        .execute(&mut ctx.conn)
        .await?
        .rows_affected();
    counts.approvals = super::approvals::cancel_for_run(ctx, run_id, now).await?;
    Ok(counts)
}

/// The columns [`from_row`] reads, each after `prefix` (a table alias such as
/// `"r."` in a join, or `""`). A macro, so queries stay `&'static str`.
macro_rules! run_columns {
    ($p:literal) => {
        concat!(
            $p,
            "id, ",
            $p,
            "runtime_id, ",
            $p,
            "runtime_name, ",
            $p,
            "user_name, ",
            $p,
            "task_id, ",
            $p,
            "task_kind, ",
            $p,
            "task_attributes, ",
            $p,
            "labels, ",
            $p,
            "created_at, ",
            $p,
            "expires_at, ",
            $p,
            "ended_at"
        )
    };
}
pub(crate) use run_columns;

const RUN_COLUMNS: &str = run_columns!("");

pub(super) fn from_row(row: &sqlx::any::AnyRow) -> Result<RunRecord, StoreError> {
    let attrs: String = col(row, "task_attributes")?;
    let labels: String = col(row, "labels")?;
    Ok(RunRecord {
        id: col(row, "id")?,
        runtime_id: col(row, "runtime_id")?,
        runtime_name: col(row, "runtime_name")?,
        user: col(row, "user_name")?,
        task_id: col(row, "task_id")?,
        task_kind: col(row, "task_kind")?,
        task_attributes: serde_json::from_str(&attrs)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?,
        labels: serde_json::from_str(&labels).map_err(|e| StoreError::Corrupt(e.to_string()))?,
        created_at: col(row, "created_at")?,
        expires_at: col(row, "expires_at")?,
        ended_at: col(row, "ended_at")?,
    })
}

pub async fn find_by_token_hash(
    store: &Store,
    token_hash: &str,
) -> Result<Option<RunRecord>, StoreError> {
    let q = format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE token_hash = {}",
        store.sql("$1")
    );
    let row = sqlx::query(&q)
        .bind(token_hash)
        .fetch_optional(store.pool())
        .await?;
    row.as_ref().map(from_row).transpose()
}

pub async fn find(store: &Store, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
    let q = format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE id = {}",
        store.sql("$1")
    );
    let row = sqlx::query(&q)
        .bind(run_id)
        .fetch_optional(store.pool())
        .await?;
    row.as_ref().map(from_row).transpose()
}

/// Whether the run has ended, straight from the store (not from any cache).
pub async fn ended_at(store: &Store, run_id: &str) -> Result<Option<Option<i64>>, StoreError> {
    let q = store.sql("SELECT ended_at FROM runs WHERE id = $1");
    let row = sqlx::query(&q)
        .bind(run_id)
        .fetch_optional(store.pool())
        .await?;
    row.as_ref().map(|r| col(r, "ended_at")).transpose()
}

/// Why the run ended (`ended`, `expired`, `runtime_disabled`, `egress_denied`),
/// straight from the store; `None` while it has not (or no such run).
pub async fn end_reason(store: &Store, run_id: &str) -> Result<Option<String>, StoreError> {
    let q = store.sql("SELECT end_reason FROM runs WHERE id = $1");
    let row = sqlx::query(&q)
        .bind(run_id)
        .fetch_optional(store.pool())
        .await?;
    Ok(row
        .as_ref()
        .map(|r| col::<Option<String>>(r, "end_reason"))
        .transpose()?
        .flatten())
}

/// Which runs `GET /v1/admin/runs` lists; paged by run id (ids are time-ordered).
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub runtime_name: Option<String>,
    pub user: Option<String>,
    /// `Some(true)`: only runs not yet ended (an expired run not yet swept counts
    /// as open); `Some(false)`: only ended ones.
    pub open: Option<bool>,
    pub after_id: Option<String>,
    pub limit: i64,
}

pub async fn list(store: &Store, f: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
    let mut q = format!("SELECT {RUN_COLUMNS} FROM runs WHERE 1 = 1");
    let mut binds: Vec<&str> = Vec::new();
    let ph = |n: usize| super::placeholder(store.dialect(), n);
    for (column, value) in [("runtime_name", &f.runtime_name), ("user_name", &f.user)] {
        if let Some(v) = value {
            binds.push(v);
            q.push_str(&format!(" AND {column} = {}", ph(binds.len())));
        }
    }
    if let Some(after) = &f.after_id {
        binds.push(after);
        q.push_str(&format!(" AND id > {}", ph(binds.len())));
    }
    match f.open {
        Some(true) => q.push_str(" AND ended_at IS NULL"),
        Some(false) => q.push_str(" AND ended_at IS NOT NULL"),
        None => {}
    }
    q.push_str(&format!(" ORDER BY id LIMIT {}", f.limit.clamp(1, 1000)));
    let mut query = sqlx::query(&q);
    for b in binds {
        query = query.bind(b);
    }
    let rows = query.fetch_all(store.pool()).await?;
    rows.iter().map(from_row).collect()
}
