//! Approvals, their decisions, and the approver keys that make them.
//!
//! Invariants, each enforced inside the writer's transaction:
//! - an approval is opened only for an active run, and a run has at most
//!   [`MAX_OPEN_PER_RUN`] open at once (a looping agent cannot flood approvers);
//!   the same request while one is open gets that one back;
//! - one decision per person (`voter` is the approver's user, or `admin`), and
//!   only while the approval is pending, unexpired and its run active: of a
//!   concurrent approve and deny exactly one decides;
//! - it is approved when every gate has its count of distinct admitted users
//!   (admission read from the policy in force when the decision is written),
//!   denied by any single denial;
//! - redeeming (in the issuance batch, [`redeem`]) sets `capability_id` once,
//!   for an approved, unexpired approval of the same run.

use super::query::stmt;
use super::writer::{BoxFuture, WriteCtx, WriteOp};
use super::{col, Store, StoreError};
use crate::audit::{events, AuditEvent};
use crate::grammar::approval_gate::{self, ApproverRule};
use std::sync::Arc;
use tessera_client::types::ApprovalStatus;

/// Most approvals one run may have open (pending, or approved and not redeemed).
pub const MAX_OPEN_PER_RUN: i64 = 16;

#[derive(Debug, Clone)]
pub struct ApprovalRecord {
    pub id: String,
    pub run_id: String,
    pub action: String,
    pub resource: String,
    /// The RFC 8785 canonical form.
    pub arguments: String,
    pub args_hash: String,
    pub policy: String,
    /// The gates, as `approval_gate::describe` writes them.
    pub approvers: String,
    pub status: ApprovalStatus,
    pub created_at: i64,
    pub expires_at: i64,
    pub decided_at: Option<i64>,
    pub capability_id: Option<String>,
}

/// An approval with what is shown of its run and its decisions.
#[derive(Debug, Clone)]
pub struct ApprovalView {
    pub record: ApprovalRecord,
    pub user: String,
    pub task_id: String,
    pub task_kind: String,
    pub runtime: String,
    pub decisions: Vec<DecisionRow>,
}

#[derive(Debug, Clone)]
pub struct DecisionRow {
    pub approver: String,
    pub user: Option<String>,
    pub decision: String,
    pub comment: Option<String>,
    pub at: i64,
}

/// The approval columns [`record_from`] reads (a macro, so queries stay `&'static str`).
macro_rules! approval_columns {
    () => {
        "a.id, a.run_id, a.action, a.resource, a.arguments, a.args_hash, a.policy, \
         a.approvers, a.status, a.created_at, a.expires_at, a.decided_at, a.capability_id"
    };
}

/// The run facts an [`ApprovalView`] shows.
macro_rules! view_columns {
    () => {
        "r.user_name, r.task_id, r.task_kind, r.runtime_name"
    };
}

fn record_from(row: &impl super::query::Columns) -> Result<ApprovalRecord, StoreError> {
    let status: String = col(row, "status")?;
    Ok(ApprovalRecord {
        id: col(row, "id")?,
        run_id: col(row, "run_id")?,
        action: col(row, "action")?,
        resource: col(row, "resource")?,
        arguments: col(row, "arguments")?,
        args_hash: col(row, "args_hash")?,
        policy: col(row, "policy")?,
        approvers: col(row, "approvers")?,
        status: ApprovalStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("approval status {status:?}")))?,
        created_at: col(row, "created_at")?,
        expires_at: col(row, "expires_at")?,
        decided_at: col(row, "decided_at")?,
        capability_id: col(row, "capability_id")?,
    })
}

impl ApprovalRecord {
    /// The status as of `now`: an open approval past its expiry is expired even
    /// before the sweeper writes it so.
    pub fn status_at(&self, now: i64) -> ApprovalStatus {
        let open = self.status == ApprovalStatus::Pending
            || (self.status == ApprovalStatus::Approved && self.capability_id.is_none());
        if open && now >= self.expires_at {
            ApprovalStatus::Expired
        } else {
            self.status
        }
    }
}

/// What asking for an approval did.
#[derive(Debug, Clone)]
pub enum Requested {
    Created(ApprovalRecord),
    /// The same request already has one open: that one.
    Existing(ApprovalRecord),
    RunInactive,
    TooMany,
    /// The same request was denied in this run: asking again does not reopen it.
    Denied(ApprovalRecord),
    /// The run is over its rate: nothing was opened or found.
    RateLimited {
        retry_after_us: i64,
    },
}

/// Opens an approval (or finds the open one for the same request), with its
/// `approval.requested` row and, when `notify` holds a body, its webhook.
pub struct RequestApproval {
    pub record: ApprovalRecord,
    pub audit: AuditEvent,
    pub notify: Option<String>,
    /// Charged first, like every request a door decides: a tool that loops on
    /// a pending approval is throttled like one that loops on refusals.
    pub rate: Vec<super::charges::RateCharge>,
}

impl WriteOp for RequestApproval {
    type Output = Requested;
    fn apply<'a>(
        &'a self,
        ctx: &'a mut WriteCtx<'_>,
    ) -> BoxFuture<'a, Result<Requested, sqlx::Error>> {
        Box::pin(async move {
            let now = ctx.now();
            let r = &self.record;
            let q = ctx.sql("SELECT ended_at, expires_at FROM runs WHERE id = $1");
            let run = stmt(&q)
                .bind(&r.run_id)
                .fetch_optional(&mut ctx.conn)
                .await?;
            let active = match &run {
                Some(row) => {
                    let state = super::run_state::RunState::of(
                        row.try_get("ended_at")?,
                        row.try_get("expires_at")?,
                        now,
                    );
                    state == super::run_state::RunState::Active
                }
                None => false,
            };
            if !active {
                return Ok(Requested::RunInactive);
            }
            if let Err(retry_after_us) = super::charges::rate_only(ctx, &self.rate).await? {
                return Ok(Requested::RateLimited { retry_after_us });
            }
            let q = ctx.sql(concat!(
                "SELECT ",
                approval_columns!(),
                " FROM approvals a WHERE a.run_id = $1 AND a.expires_at > $2 \
                 AND (a.status = 'pending' OR (a.status = 'approved' AND a.capability_id IS NULL))"
            ));
            let open = stmt(&q)
                .bind(&r.run_id)
                .bind(now)
                .fetch_all(&mut ctx.conn)
                .await?;
            for row in &open {
                let existing = record_from(row).map_err(|e| sqlx::Error::Decode(e.into()))?;
                if existing.action == r.action
                    && existing.resource == r.resource
                    && existing.args_hash == r.args_hash
                    && existing.approvers == r.approvers
                {
                    return Ok(Requested::Existing(existing));
                }
            }
            // A denial stands for the rest of the run: an agent that asks again and
            // again must not wear approvers down.
            let q = ctx.sql(concat!(
                "SELECT ",
                approval_columns!(),
                " FROM approvals a WHERE a.run_id = $1 AND a.action = $2 AND a.resource = $3 \
                 AND a.args_hash = $4 AND a.status = 'denied' LIMIT 1"
            ));
            let denied = stmt(&q)
                .bind(&r.run_id)
                .bind(&r.action)
                .bind(&r.resource)
                .bind(&r.args_hash)
                .fetch_optional(&mut ctx.conn)
                .await?;
            if let Some(row) = denied {
                let record = record_from(&row).map_err(|e| sqlx::Error::Decode(e.into()))?;
                return Ok(Requested::Denied(record));
            }
            if open.len() as i64 >= MAX_OPEN_PER_RUN {
                return Ok(Requested::TooMany);
            }
            let q = ctx.sql(
                "INSERT INTO approvals (id, run_id, action, resource, arguments, args_hash, policy, \
                 approvers, status, created_at, expires_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending', $9, $10)",
            );
            stmt(&q)
                .bind(&r.id)
                .bind(&r.run_id)
                .bind(&r.action)
                .bind(&r.resource)
                .bind(&r.arguments)
                .bind(&r.args_hash)
                .bind(&r.policy)
                .bind(&r.approvers)
                .bind(r.created_at)
                .bind(r.expires_at)
                .execute(&mut ctx.conn)
                .await?;
            ctx.audit(&self.audit).await?;
            if let Some(body) = &self.notify {
                super::webhooks::enqueue(ctx, &r.id, events::APPROVAL_REQUESTED, body).await?;
            }
            Ok(Requested::Created(r.clone()))
        })
    }
}

/// Who decides: an approver key (with its user), or an administrator.
#[derive(Debug, Clone)]
pub enum Voter {
    Approver { name: String, user: String },
    Admin,
}

impl Voter {
    fn key(&self) -> String {
        match self {
            Voter::Approver { user, .. } => format!("user:{user}"),
            Voter::Admin => "admin".into(),
        }
    }

    pub fn actor(&self) -> String {
        match self {
            Voter::Approver { name, .. } => format!("approver:{name}"),
            Voter::Admin => "admin".into(),
        }
    }
}

/// The groups of a user under the policy in force (for gate admission).
pub type GroupsOf = Arc<dyn Fn(&str) -> Vec<String> + Send + Sync>;

/// What a decision did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// Recorded; the approval's status after it.
    Recorded(ApprovalStatus),
    Unknown,
    /// Not pending any more (or expired, or its run is no longer active).
    AlreadyDecided(ApprovalStatus),
    AlreadyVoted,
}

/// One approver's (or an administrator's) decision on approval `id`. The
/// caller has checked admission and four-eyes against the record it read; the
/// rules and the votes are read again here, inside the transaction.
pub struct Decide {
    pub id: String,
    pub voter: Voter,
    pub approve: bool,
    pub comment: Option<String>,
    pub groups_of: GroupsOf,
    pub audit: AuditEvent,
}

impl WriteOp for Decide {
    type Output = Decided;
    fn apply<'a>(
        &'a self,
        ctx: &'a mut WriteCtx<'_>,
    ) -> BoxFuture<'a, Result<Decided, sqlx::Error>> {
        Box::pin(async move {
            let now = ctx.now();
            let q = ctx.sql(concat!(
                "SELECT ",
                approval_columns!(),
                ", r.ended_at AS run_ended_at, r.expires_at AS run_expires_at \
                 FROM approvals a JOIN runs r ON r.id = a.run_id WHERE a.id = $1"
            ));
            let Some(row) = stmt(&q)
                .bind(&self.id)
                .fetch_optional(&mut ctx.conn)
                .await?
            else {
                return Ok(Decided::Unknown);
            };
            let record = record_from(&row).map_err(|e| sqlx::Error::Decode(e.into()))?;
            let run_state = super::run_state::RunState::of(
                row.try_get("run_ended_at")?,
                row.try_get("run_expires_at")?,
                now,
            );
            let status = record.status_at(now);
            if status != ApprovalStatus::Pending {
                return Ok(Decided::AlreadyDecided(status));
            }
            if run_state != super::run_state::RunState::Active {
                return Ok(Decided::AlreadyDecided(ApprovalStatus::Cancelled));
            }
            let (approver, user) = match &self.voter {
                Voter::Approver { name, user } => (name.clone(), Some(user.clone())),
                Voter::Admin => ("admin".to_owned(), None),
            };
            let q = ctx.sql(
                "INSERT INTO approval_decisions (approval_id, voter, approver, user_name, decision, \
                 comment, decided_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                 ON CONFLICT (approval_id, voter) DO NOTHING",
            );
            let inserted = stmt(&q)
                .bind(&self.id)
                .bind(self.voter.key())
                .bind(&approver)
                .bind(&user)
                .bind(if self.approve { "approve" } else { "deny" })
                .bind(&self.comment)
                .bind(now)
                .execute(&mut ctx.conn)
                .await?
                .rows_affected();
            if inserted == 0 {
                return Ok(Decided::AlreadyVoted);
            }
            let mut ev = self.audit.clone();
            let new_status = if !self.approve {
                Some(ApprovalStatus::Denied)
            } else {
                let users = approving_users(ctx, &self.id).await?;
                let gates = approval_gate::parse_described(&record.approvers)
                    .map_err(|e| sqlx::Error::Decode(e.into()))?;
                let met = gates_met(&gates, &users, &*self.groups_of);
                ev.detail = Some(format!(
                    "approval={} approvers={} approving={}",
                    self.id,
                    record.approvers,
                    users.len()
                ));
                met.then_some(ApprovalStatus::Approved)
            };
            if let Some(status) = new_status {
                let q = ctx.sql(
                    "UPDATE approvals SET status = $1, decided_at = $2 WHERE id = $3 AND status = 'pending'",
                );
                stmt(&q)
                    .bind(status.as_str())
                    .bind(now)
                    .bind(&self.id)
                    .execute(&mut ctx.conn)
                    .await?;
                ev.event = match status {
                    ApprovalStatus::Approved => events::APPROVAL_APPROVED,
                    _ => events::APPROVAL_DENIED,
                };
                ev.decision = if status == ApprovalStatus::Approved {
                    "allow"
                } else {
                    "deny"
                };
            } else {
                ev.event = events::APPROVAL_VOTED;
            }
            if ev.detail.is_none() {
                ev.detail = Some(format!("approval={}", self.id));
            }
            ctx.audit(&ev).await?;
            Ok(Decided::Recorded(
                new_status.unwrap_or(ApprovalStatus::Pending),
            ))
        })
    }
}

/// The users whose approval of `approval_id` counts: by a key not revoked since.
pub(crate) async fn approving_users(
    ctx: &mut WriteCtx<'_>,
    approval_id: &str,
) -> Result<Vec<String>, sqlx::Error> {
    let q = ctx.sql(
        "SELECT d.user_name FROM approval_decisions d JOIN approvers k ON k.name = d.approver \
         WHERE d.approval_id = $1 AND d.decision = 'approve' AND k.revoked_at IS NULL",
    );
    stmt(&q)
        .bind(approval_id)
        .fetch_all(&mut ctx.conn)
        .await?
        .iter()
        .map(|r| r.try_get("user_name"))
        .collect()
}

/// After approver key `name` was revoked: every approval it helped approve
/// that is not yet redeemed is counted again without it, and goes back to
/// pending when the rules are no longer met. Returns those ids.
pub(crate) async fn recount_without(
    ctx: &mut WriteCtx<'_>,
    name: &str,
    groups_of: &(dyn Fn(&str) -> Vec<String> + Send + Sync),
) -> Result<Vec<String>, sqlx::Error> {
    let now = ctx.now();
    let q = ctx.sql(
        "SELECT a.id, a.approvers FROM approvals a JOIN approval_decisions d ON d.approval_id = a.id \
         WHERE d.approver = $1 AND d.decision = 'approve' AND a.status = 'approved' \
         AND a.capability_id IS NULL AND a.expires_at > $2",
    );
    let rows = stmt(&q)
        .bind(name)
        .bind(now)
        .fetch_all(&mut ctx.conn)
        .await?;
    let mut reopened = Vec::new();
    for row in &rows {
        let id: String = row.try_get("id")?;
        let rules: String = row.try_get("approvers")?;
        let gates =
            approval_gate::parse_described(&rules).map_err(|e| sqlx::Error::Decode(e.into()))?;
        let users = approving_users(ctx, &id).await?;
        if !gates_met(&gates, &users, groups_of) {
            let q = ctx.sql(
                "UPDATE approvals SET status = 'pending', decided_at = NULL \
                 WHERE id = $1 AND status = 'approved' AND capability_id IS NULL",
            );
            stmt(&q).bind(&id).execute(&mut ctx.conn).await?;
            reopened.push(id);
        }
    }
    Ok(reopened)
}

/// Whether every gate has its count of distinct approving users it admits.
pub fn gates_met(
    gates: &[(ApproverRule, u32)],
    approving: &[String],
    groups_of: &(dyn Fn(&str) -> Vec<String> + Send + Sync),
) -> bool {
    let mut people: Vec<&String> = approving.iter().collect();
    people.sort();
    people.dedup();
    gates.iter().all(|(rule, required)| {
        let admitted = people
            .iter()
            .filter(|u| rule.admits(u, &groups_of(u)))
            .count();
        admitted as u32 >= *required
    })
}

/// Marks up to `limit` open approvals past their expiry as expired, one
/// `approval.expired` row each; returns how many.
pub struct ExpireApprovals {
    pub limit: i64,
}

impl WriteOp for ExpireApprovals {
    type Output = usize;
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<usize, sqlx::Error>> {
        Box::pin(async move {
            let now = ctx.now();
            let q = ctx.sql(
                "SELECT a.id, a.run_id, a.action, a.resource, a.status, r.user_name, r.task_id \
                 FROM approvals a JOIN runs r ON r.id = a.run_id WHERE a.expires_at <= $1 \
                 AND (a.status = 'pending' OR (a.status = 'approved' AND a.capability_id IS NULL)) \
                 ORDER BY a.expires_at LIMIT $2",
            );
            let rows = stmt(&q)
                .bind(now)
                .bind(self.limit)
                .fetch_all(&mut ctx.conn)
                .await?;
            let update = ctx.sql(
                "UPDATE approvals SET status = 'expired', decided_at = COALESCE(decided_at, $1) \
                 WHERE id = $2",
            );
            for row in &rows {
                let id: String = row.try_get("id")?;
                stmt(&update)
                    .bind(now)
                    .bind(&id)
                    .execute(&mut ctx.conn)
                    .await?;
                let was: String = row.try_get("status")?;
                let mut ev = AuditEvent::new(events::APPROVAL_EXPIRED, "broker", "deny");
                ev.reason = Some(format!("{was}_expired"));
                ev.run_id = Some(row.try_get("run_id")?);
                ev.user = Some(row.try_get("user_name")?);
                ev.task_id = Some(row.try_get("task_id")?);
                ev.action = Some(row.try_get("action")?);
                ev.resource = Some(row.try_get("resource")?);
                ev.detail = Some(format!("approval={id}"));
                ctx.audit(&ev).await?;
            }
            Ok(rows.len())
        })
    }
}

/// Cancels a run's open approvals (its run ended); returns how many. Counted in
/// the `run.ended` row that caused it.
pub(crate) async fn cancel_for_run(
    ctx: &mut WriteCtx<'_>,
    run_id: &str,
    now: i64,
) -> Result<u64, sqlx::Error> {
    let q = ctx.sql(
        "UPDATE approvals SET status = 'cancelled', decided_at = $1 WHERE run_id = $2 \
         AND (status = 'pending' OR (status = 'approved' AND capability_id IS NULL))",
    );
    Ok(stmt(&q)
        .bind(now)
        .bind(run_id)
        .execute(&mut ctx.conn)
        .await?
        .rows_affected())
}

fn view_from(row: &sqlx::any::AnyRow) -> Result<ApprovalView, StoreError> {
    Ok(ApprovalView {
        record: record_from(row)?,
        user: col(row, "user_name")?,
        task_id: col(row, "task_id")?,
        task_kind: col(row, "task_kind")?,
        runtime: col(row, "runtime_name")?,
        decisions: Vec::new(),
    })
}

async fn with_decisions(
    store: &Store,
    mut views: Vec<ApprovalView>,
) -> Result<Vec<ApprovalView>, StoreError> {
    let q = store.sql(
        "SELECT approver, user_name, decision, comment, decided_at FROM approval_decisions \
         WHERE approval_id = $1 ORDER BY decided_at, voter",
    );
    for v in &mut views {
        let rows = sqlx::query(&q)
            .bind(&v.record.id)
            .fetch_all(store.pool())
            .await?;
        for row in &rows {
            v.decisions.push(DecisionRow {
                approver: col(row, "approver")?,
                user: col(row, "user_name")?,
                decision: col(row, "decision")?,
                comment: col(row, "comment")?,
                at: col(row, "decided_at")?,
            });
        }
    }
    Ok(views)
}

/// Approval `id` with its run's facts and its decisions.
pub async fn get(store: &Store, id: &str) -> Result<Option<ApprovalView>, StoreError> {
    let q = store.sql(concat!(
        "SELECT ",
        approval_columns!(),
        ", ",
        view_columns!(),
        " FROM approvals a JOIN runs r ON r.id = a.run_id WHERE a.id = $1"
    ));
    let row = sqlx::query(&q)
        .bind(id)
        .fetch_optional(store.pool())
        .await?;
    let Some(row) = row else { return Ok(None) };
    Ok(with_decisions(store, vec![view_from(&row)?]).await?.pop())
}

/// Which approvals to list.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// `None`: every status. `Pending` lists only the unexpired.
    pub status: Option<ApprovalStatus>,
    pub run_id: Option<String>,
    pub limit: i64,
}

/// Approvals, newest first.
pub async fn list(
    store: &Store,
    filter: &ListFilter,
    now: i64,
) -> Result<Vec<ApprovalView>, StoreError> {
    let mut sql = concat!(
        "SELECT ",
        approval_columns!(),
        ", ",
        view_columns!(),
        " FROM approvals a JOIN runs r ON r.id = a.run_id WHERE 1 = 1"
    )
    .to_owned();
    let dialect = store.dialect();
    let mut n = 0;
    let mut next = || {
        n += 1;
        super::placeholder(dialect, n)
    };
    let status_clause = match filter.status {
        None => String::new(),
        Some(ApprovalStatus::Pending) => {
            format!(" AND a.status = 'pending' AND a.expires_at > {}", next())
        }
        Some(ApprovalStatus::Expired) => format!(
            " AND (a.status = 'expired' OR (a.expires_at <= {} AND (a.status = 'pending' \
             OR (a.status = 'approved' AND a.capability_id IS NULL))))",
            next()
        ),
        // A fixed word of the enum, never caller text.
        Some(s) => format!(" AND a.status = '{}'", s.as_str()),
    };
    sql.push_str(&status_clause);
    if filter.run_id.is_some() {
        sql.push_str(&format!(" AND a.run_id = {}", next()));
    }
    sql.push_str(&format!(
        " ORDER BY a.created_at DESC, a.id DESC LIMIT {}",
        next()
    ));
    let mut query = sqlx::query(&sql);
    if matches!(
        filter.status,
        Some(ApprovalStatus::Pending | ApprovalStatus::Expired)
    ) {
        query = query.bind(now);
    }
    if let Some(run) = &filter.run_id {
        query = query.bind(run);
    }
    let rows = query.bind(filter.limit).fetch_all(store.pool()).await?;
    let views = rows.iter().map(view_from).collect::<Result<Vec<_>, _>>()?;
    with_decisions(store, views).await
}
