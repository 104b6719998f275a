//! Capabilities and the leases exchanged for them.
//!
//! Invariants enforced here, in the same transaction as the change:
//! - a capability is only recorded while its run is active (checked inside the
//!   writer's transaction, after any run end in the same batch, so a concurrent
//!   run end cannot be overtaken);
//! - `uses_left` only goes down by one per exchange and never below zero
//!   (`UPDATE … WHERE uses_left > 0`, plus a CHECK constraint);
//! - a revoked capability, or one whose run ended or expired, exchanges nothing;
//! - rate limits are GCRA buckets read and written inside the writer's
//!   transaction (batches are serialised, across replicas too).

pub use super::charges::RateCharge;
use super::charges::{Charge, Charged, RefusedAs};
use super::query::stmt;
use super::runs::{run_columns, RunRecord, RunState};
use super::sql::ROWS_PER_INSERT;
use super::writer::{BatchedOp, BoxFuture, WriteCtx, WriteOp, Writer};
use super::{col, Store, StoreError};
use crate::audit::{events, AuditEvent};
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct CapabilityRecord {
    pub id: String,
    pub run_id: String,
    pub kid: String,
    pub action: String,
    pub resource: String,
    pub backend: String,
    pub policies: String,
    pub issued_at: i64,
    pub expires_at: i64,
    pub uses: u32,
    /// Seconds a hold lasts without renewal (`None`: no hold).
    pub hold_secs: Option<i64>,
    /// Issuing it revokes the run's other live capabilities in this slot.
    pub slot: Option<String>,
    /// The arguments it is issued for (RFC 8785 canonical form) and their hash.
    pub arguments: Option<String>,
    pub args_hash: Option<String>,
    /// The approval redeemed for it, and the gates that approval met.
    pub approval: Option<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IssueOutcome {
    Issued,
    RunInactive(RunState),
    RateLimited {
        retry_after_us: i64,
    },
    /// The approval to redeem is no longer approved-and-unredeemed (redeemed by a
    /// concurrent request, expired, or cancelled since it was read).
    ApprovalUnavailable,
    /// Not recorded: its audit row does not name it and its run (a bug in
    /// the caller; nothing was charged or written).
    Unrecordable,
}

/// A capability to record, with its rate charges and its `capability.issued`
/// row. A decision that issues nothing is a [`super::decisions::RecordDecision`].
pub struct IssueCapability {
    pub record: CapabilityRecord,
    pub rate: Vec<RateCharge>,
    /// The `capability.issued` event; the store's own refusals (an ended run,
    /// a rate, a redeemed approval) reuse it as `capability.denied` or
    /// `capability.rate_limited`. Shared with the writer's audit row.
    pub audit: Arc<AuditEvent>,
}

/// Issuances are applied in bulk, all of a batch's together (see [`apply_issuances`]).
impl BatchedOp for IssueCapability {
    type Output = IssueOutcome;

    fn grants(&self) -> bool {
        true
    }

    fn apply_batch<'a>(
        ctx: &'a mut WriteCtx<'_>,
        ops: &'a [&'a Self],
    ) -> BoxFuture<'a, Result<Vec<IssueOutcome>, sqlx::Error>> {
        Box::pin(apply_issuances(ctx, ops))
    }
}

impl Writer {
    /// Records a capability with the batch's other issuances (see
    /// [`apply_issuances`]); returns only after its transaction committed.
    pub async fn record_issuance(&self, op: IssueCapability) -> Result<IssueOutcome, StoreError> {
        self.submit_batched(op).await
    }
}

/// Applies a batch's issuances together: the charges (run, rate, approval,
/// audit) through [`super::charges::apply`], then multi-row INSERTs for the
/// capabilities charged. Returns one outcome per op, in order.
async fn apply_issuances(
    ctx: &mut WriteCtx<'_>,
    ops: &[&IssueCapability],
) -> Result<Vec<IssueOutcome>, sqlx::Error> {
    let mut outcomes: Vec<Option<IssueOutcome>> = Vec::with_capacity(ops.len());
    let mut charged: Vec<Charge<'_>> = Vec::with_capacity(ops.len());
    for op in ops {
        let r = &op.record;
        // The run index is filled from this row (store::run_index): one that
        // does not name its capability would leave it unindexed, so it is
        // refused alone, before anything is charged or recorded.
        if op.audit.capability_id.as_deref() != Some(r.id.as_str())
            || op.audit.run_id.as_deref() != Some(r.run_id.as_str())
            || op.audit.event != events::CAPABILITY_ISSUED
        {
            debug_assert!(false, "an issuance's audit row names another capability");
            outcomes.push(Some(IssueOutcome::Unrecordable));
            continue;
        }
        outcomes.push(None);
        charged.push(Charge {
            rate: &op.rate,
            audit: &op.audit,
            redeems: r
                .approval
                .as_ref()
                .map(|(approval, _)| (approval.as_str(), r.id.as_str())),
            refused_as: RefusedAs::CAPABILITY,
        });
    }
    let mut results = super::charges::apply(ctx, &charged).await?.into_iter();
    let mut issued: Vec<usize> = Vec::new();
    for (i, slot) in outcomes.iter_mut().enumerate() {
        if slot.is_some() {
            continue;
        }
        *slot = Some(match results.next() {
            Some(Charged::Applied) => {
                issued.push(i);
                IssueOutcome::Issued
            }
            Some(Charged::RunInactive(state)) => IssueOutcome::RunInactive(state),
            Some(Charged::RateLimited { retry_after_us }) => {
                IssueOutcome::RateLimited { retry_after_us }
            }
            Some(Charged::ApprovalUnavailable) | None => IssueOutcome::ApprovalUnavailable,
        });
    }

    for chunk in issued.chunks(ROWS_PER_INSERT) {
        let q = format!(
            "INSERT INTO capabilities (id, run_id, kid, action, resource, backend, policies, \
             issued_at, expires_at, uses, uses_left, hold_secs, lapses_at, slot, arguments, \
             args_hash, approval_id) VALUES {}",
            super::sql::values_placeholders(ctx.dialect, chunk.len(), 17)
        );
        let mut query = stmt(&q);
        for r in chunk.iter().map(|&i| &ops[i].record) {
            query = query
                .bind(&r.id)
                .bind(&r.run_id)
                .bind(&r.kid)
                .bind(&r.action)
                .bind(&r.resource)
                .bind(&r.backend)
                .bind(&r.policies)
                .bind(r.issued_at)
                .bind(r.expires_at)
                .bind(i64::from(r.uses))
                .bind(i64::from(r.uses))
                .bind(r.hold_secs)
                .bind(r.hold_secs.map(|h| lapse_at(r.issued_at, h)))
                .bind(&r.slot)
                .bind(&r.arguments)
                .bind(&r.args_hash)
                .bind(r.approval.as_ref().map(|(id, _)| id.clone()));
        }
        query.execute(&mut ctx.conn).await?;
    }
    supersede(ctx, ops, &issued).await?;
    Ok(outcomes
        .into_iter()
        .map(|o| o.unwrap_or(IssueOutcome::Unrecordable))
        .collect())
}

#[derive(Debug, Clone)]
pub struct LeaseRecord {
    pub id: String,
    pub capability_id: String,
    pub run_id: String,
    pub backend: String,
    pub kind: String,
    pub expires_at: i64,
    /// What the backend will create downstream (see `Backend::downstream_ref`).
    pub downstream_ref: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsumeOutcome {
    Consumed {
        uses_left: u32,
    },
    Unknown,
    Revoked,
    Expired,
    /// Its hold was not renewed in time (the sweeper is revoking it).
    Lapsed,
    RunInactive(RunState),
    Exhausted,
}

/// Whether a hold that lapses at `lapses_at` has lapsed at `now`.
pub fn lapsed(lapses_at: Option<i64>, now: i64) -> bool {
    lapses_at.is_some_and(|at| now >= at)
}

impl ConsumeOutcome {
    pub fn reason(&self) -> &'static str {
        match self {
            ConsumeOutcome::Consumed { .. } => "ok",
            ConsumeOutcome::Unknown => "capability_unknown",
            ConsumeOutcome::Revoked => "capability_revoked",
            ConsumeOutcome::Expired => "capability_expired",
            ConsumeOutcome::Lapsed => "capability_lapsed",
            ConsumeOutcome::RunInactive(RunState::Expired) => "run_expired",
            ConsumeOutcome::RunInactive(_) => "run_ended",
            ConsumeOutcome::Exhausted => "uses_exhausted",
        }
    }
}

/// Takes one use of a capability and records the lease it buys, atomically.
pub struct ConsumeUse {
    pub lease: LeaseRecord,
    pub audit: AuditEvent,
}

impl WriteOp for ConsumeUse {
    type Output = ConsumeOutcome;
    const GRANTS: bool = true;
    fn apply<'a>(
        &'a self,
        ctx: &'a mut WriteCtx<'_>,
    ) -> BoxFuture<'a, Result<ConsumeOutcome, sqlx::Error>> {
        Box::pin(async move {
            let l = &self.lease;
            let now = ctx.now();
            let q = ctx.sql(
                "SELECT c.expires_at, c.revoked_at, c.lapses_at, r.ended_at, r.expires_at AS run_expires_at \
                 FROM capabilities c JOIN runs r ON r.id = c.run_id WHERE c.id = $1 AND c.run_id = $2",
            );
            let row = stmt(&q)
                .bind(&l.capability_id)
                .bind(&l.run_id)
                .fetch_optional(&mut ctx.conn)
                .await?;
            let refused = match row {
                None => Some(ConsumeOutcome::Unknown),
                Some(row) => {
                    let run = RunState::of(
                        row.try_get("ended_at")?,
                        row.try_get("run_expires_at")?,
                        now,
                    );
                    let revoked: Option<i64> = row.try_get("revoked_at")?;
                    let expires_at: i64 = row.try_get("expires_at")?;
                    if run != RunState::Active {
                        Some(ConsumeOutcome::RunInactive(run))
                    } else if revoked.is_some() {
                        Some(ConsumeOutcome::Revoked)
                    } else if now >= expires_at {
                        Some(ConsumeOutcome::Expired)
                    } else if lapsed(row.try_get("lapses_at")?, now) {
                        Some(ConsumeOutcome::Lapsed)
                    } else {
                        None
                    }
                }
            };
            let outcome = match refused {
                Some(o) => o,
                None => {
                    let q = ctx.sql(
                        "UPDATE capabilities SET uses_left = uses_left - 1 \
                         WHERE id = $1 AND uses_left > 0 AND revoked_at IS NULL RETURNING uses_left",
                    );
                    let left = stmt(&q)
                        .bind(&l.capability_id)
                        .fetch_optional(&mut ctx.conn)
                        .await?;
                    match left {
                        None => ConsumeOutcome::Exhausted,
                        Some(row) => {
                            let left: i64 = row.try_get("uses_left")?;
                            let q = ctx.sql(
                                "INSERT INTO leases (id, capability_id, run_id, backend, kind, created_at, expires_at, downstream_ref) \
                                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                            );
                            stmt(&q)
                                .bind(&l.id)
                                .bind(&l.capability_id)
                                .bind(&l.run_id)
                                .bind(&l.backend)
                                .bind(&l.kind)
                                .bind(now)
                                .bind(l.expires_at)
                                .bind(&l.downstream_ref)
                                .execute(&mut ctx.conn)
                                .await?;
                            ConsumeOutcome::Consumed {
                                uses_left: u32::try_from(left).unwrap_or(0),
                            }
                        }
                    }
                }
            };
            let mut ev = self.audit.clone();
            if !matches!(outcome, ConsumeOutcome::Consumed { .. }) {
                ev.event = events::EXCHANGE_REFUSED;
                ev.decision = "deny";
                ev.reason = Some(outcome.reason().to_owned());
            }
            ctx.audit(&ev).await?;
            Ok(outcome)
        })
    }
}

/// Who asks to revoke a capability: the run that holds it, or an admin.
#[derive(Debug, Clone)]
pub enum Revoker {
    Run(String),
    Admin,
}

/// Revokes one capability and its leases. `None`: not visible to the revoker;
/// `Some(false)`: it was already revoked.
pub struct RevokeCapability {
    pub capability_id: String,
    pub by: Revoker,
    pub audit: AuditEvent,
    /// Stored as the capability's `revoke_reason`: `revoked` (asked for), or
    /// `policy_changed` (the policy in force would no longer issue it).
    pub reason: &'static str,
    /// Audit a no-op (not found, already revoked) too: true when someone asked.
    pub audit_noop: bool,
}

impl WriteOp for RevokeCapability {
    type Output = Option<bool>;
    fn apply<'a>(
        &'a self,
        ctx: &'a mut WriteCtx<'_>,
    ) -> BoxFuture<'a, Result<Option<bool>, sqlx::Error>> {
        Box::pin(async move {
            let q = ctx.sql("SELECT run_id, revoked_at FROM capabilities WHERE id = $1");
            let row = stmt(&q)
                .bind(&self.capability_id)
                .fetch_optional(&mut ctx.conn)
                .await?;
            let visible = match &row {
                None => None,
                Some(row) => {
                    let run_id: String = row.try_get("run_id")?;
                    match &self.by {
                        Revoker::Run(own) if *own != run_id => None,
                        _ => Some((run_id, row.try_get::<Option<i64>>("revoked_at")?)),
                    }
                }
            };
            let Some((run_id, revoked_at)) = visible else {
                if self.audit_noop {
                    let mut ev = self.audit.clone();
                    ev.decision = "deny";
                    ev.reason = Some("not_found".into());
                    ctx.audit(&ev).await?;
                }
                return Ok(None);
            };
            if revoked_at.is_some() {
                if self.audit_noop {
                    let mut ev = self.audit.clone();
                    ev.run_id = Some(run_id);
                    ev.reason = Some("already_revoked".into());
                    ctx.audit(&ev).await?;
                }
                return Ok(Some(false));
            }
            revoke_one(ctx, &self.capability_id, self.reason, "capability_revoked").await?;
            let mut ev = self.audit.clone();
            ev.run_id = Some(run_id);
            ctx.audit(&ev).await?;
            Ok(Some(true))
        })
    }
}

/// For every slot a capability of this batch was issued in, revokes the
/// run's other live capabilities in that slot: the last one issued wins.
async fn supersede(
    ctx: &mut WriteCtx<'_>,
    ops: &[&IssueCapability],
    issued: &[usize],
) -> Result<(), sqlx::Error> {
    let mut last: HashMap<(&str, &str), (&str, &AuditEvent)> = HashMap::new();
    for &i in issued {
        let r = &ops[i].record;
        if let Some(slot) = &r.slot {
            last.insert(
                (r.run_id.as_str(), slot.as_str()),
                (r.id.as_str(), &ops[i].audit),
            );
        }
    }
    if last.is_empty() {
        // The usual batch: no slot, nothing to read.
        return Ok(());
    }
    let q = ctx.sql(
        "SELECT id FROM capabilities WHERE run_id = $1 AND slot = $2 AND id <> $3 AND revoked_at IS NULL",
    );
    for ((run_id, slot), (winner, issued_ev)) in last {
        let rows = stmt(&q)
            .bind(run_id)
            .bind(slot)
            .bind(winner)
            .fetch_all(&mut ctx.conn)
            .await?;
        for row in rows {
            let id: String = row.try_get("id")?;
            revoke_one(ctx, &id, "superseded", "superseded").await?;
            let mut ev = issued_ev.clone();
            ev.event = events::CAPABILITY_REVOKED;
            ev.decision = "allow";
            ev.reason = Some("superseded".into());
            ev.detail = Some(format!("superseded_by={winner}"));
            ev.capability_id = Some(id);
            ctx.audit(&ev).await?;
        }
    }
    Ok(())
}

/// Marks a live capability revoked (`reason` stored with it), queues the
/// downstream removal of its leases (`outbox_reason`) and revokes them.
pub(crate) async fn revoke_one(
    ctx: &mut WriteCtx<'_>,
    capability_id: &str,
    reason: &'static str,
    outbox_reason: &'static str,
) -> Result<(), sqlx::Error> {
    let now = ctx.now();
    let q = ctx.sql(
        "UPDATE capabilities SET revoked_at = $1, revoke_reason = $2 WHERE id = $3 AND revoked_at IS NULL",
    );
    stmt(&q)
        .bind(now)
        .bind(reason)
        .bind(capability_id)
        .execute(&mut ctx.conn)
        .await?;
    super::revocations::enqueue(
        ctx,
        super::revocations::Scope::Capability(capability_id),
        outbox_reason,
    )
    .await?;
    let q = ctx
        .sql("UPDATE leases SET revoked_at = $1 WHERE capability_id = $2 AND revoked_at IS NULL");
    stmt(&q)
        .bind(now)
        .bind(capability_id)
        .execute(&mut ctx.conn)
        .await?;
    Ok(())
}

/// What introspection needs to know about a capability, read fresh from the store.
#[derive(Debug, Clone)]
pub struct CapabilityStatus {
    pub run_id: String,
    pub runtime_id: String,
    pub revoked_at: Option<i64>,
    pub expires_at: i64,
    pub lapses_at: Option<i64>,
    pub uses_left: u32,
    pub run_state: RunState,
}

impl CapabilityStatus {
    /// Not revoked, not expired, run active: what the leases it bought live by.
    pub fn is_alive(&self, now: i64) -> bool {
        self.revoked_at.is_none()
            && now < self.expires_at
            && !lapsed(self.lapses_at, now)
            && self.run_state == RunState::Active
    }

    /// Alive and still exchangeable: what introspection calls active.
    pub fn is_active(&self, now: i64) -> bool {
        self.is_alive(now) && self.uses_left > 0
    }
}

/// Marks a reserved lease as failed when the backend could not issue it.
pub struct FailLease {
    pub lease_id: String,
    pub audit: AuditEvent,
}

impl WriteOp for FailLease {
    type Output = ();
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            // Whatever the backend managed to create before failing is removed too.
            super::revocations::enqueue(
                ctx,
                super::revocations::Scope::Lease(&self.lease_id),
                "issue_failed",
            )
            .await?;
            // Revoked meanwhile and already settled: whatever the failed issue left
            // behind must still go.
            super::revocations::rearm(ctx, &self.lease_id).await?;
            let q =
                ctx.sql("UPDATE leases SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL");
            stmt(&q)
                .bind(ctx.now())
                .bind(&self.lease_id)
                .execute(&mut ctx.conn)
                .await?;
            ctx.audit(&self.audit).await
        })
    }
}

pub async fn status(
    store: &Store,
    capability_id: &str,
    now: i64,
) -> Result<Option<CapabilityStatus>, StoreError> {
    let q = store.sql(
        "SELECT c.run_id, r.runtime_id, c.revoked_at, c.expires_at, c.lapses_at, c.uses_left, r.ended_at, \
         r.expires_at AS run_expires_at FROM capabilities c JOIN runs r ON r.id = c.run_id WHERE c.id = $1",
    );
    let row = sqlx::query(&q)
        .bind(capability_id)
        .fetch_optional(store.pool())
        .await?;
    row.map(|row| {
        let uses_left: i64 = col(&row, "uses_left")?;
        Ok(CapabilityStatus {
            run_id: col(&row, "run_id")?,
            runtime_id: col(&row, "runtime_id")?,
            revoked_at: col(&row, "revoked_at")?,
            expires_at: col(&row, "expires_at")?,
            lapses_at: col(&row, "lapses_at")?,
            uses_left: u32::try_from(uses_left).unwrap_or(0),
            run_state: RunState::of(col(&row, "ended_at")?, col(&row, "run_expires_at")?, now),
        })
    })
    .transpose()
}

/// Whether a lease (and with it the downstream token) is still live.
pub async fn lease_revoked(
    store: &Store,
    lease_id: &str,
) -> Result<Option<Option<i64>>, StoreError> {
    let q = store.sql("SELECT revoked_at FROM leases WHERE id = $1");
    let row = sqlx::query(&q)
        .bind(lease_id)
        .fetch_optional(store.pool())
        .await?;
    row.as_ref().map(|r| col(r, "revoked_at")).transpose()
}

#[derive(Debug, Clone)]
pub struct CapabilityRow {
    pub id: String,
    pub action: String,
    pub resource: String,
    pub issued_at: i64,
    pub expires_at: i64,
    pub uses: u32,
    pub uses_left: u32,
    pub revoked_at: Option<i64>,
}

pub async fn list_for_run(store: &Store, run_id: &str) -> Result<Vec<CapabilityRow>, StoreError> {
    let q = format!(
        "SELECT id, action, resource, issued_at, expires_at, uses, uses_left, revoked_at \
         FROM capabilities WHERE {} ORDER BY issued_at, id",
        super::run_index::of_run_1(store.dialect())
    );
    let rows = sqlx::query(&q).bind(run_id).fetch_all(store.pool()).await?;
    rows.iter()
        .map(|row| {
            let uses: i64 = col(row, "uses")?;
            let left: i64 = col(row, "uses_left")?;
            Ok(CapabilityRow {
                id: col(row, "id")?,
                action: col(row, "action")?,
                resource: col(row, "resource")?,
                issued_at: col(row, "issued_at")?,
                expires_at: col(row, "expires_at")?,
                uses: u32::try_from(uses).unwrap_or(0),
                uses_left: u32::try_from(left).unwrap_or(0),
                revoked_at: col(row, "revoked_at")?,
            })
        })
        .collect()
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LeaseRow {
    pub id: String,
    pub capability_id: String,
    pub backend: String,
    pub kind: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub revoked_at: Option<i64>,
}

pub async fn leases_for_run(store: &Store, run_id: &str) -> Result<Vec<LeaseRow>, StoreError> {
    let q = store.sql(
        "SELECT id, capability_id, backend, kind, created_at, expires_at, revoked_at \
         FROM leases WHERE run_id = $1 ORDER BY created_at, id",
    );
    let rows = sqlx::query(&q).bind(run_id).fetch_all(store.pool()).await?;
    rows.iter().map(super::decode).collect()
}

/// A capability as the store recorded it at issuance, its fields that never
/// change: what a token's claims are compared with, and what re-authorization
/// evaluates (with its run).
#[derive(Debug, Clone)]
pub struct HeldCapability {
    pub id: String,
    pub run_id: String,
    pub action: String,
    pub resource: String,
    pub issued_at: i64,
    pub expires_at: i64,
    pub uses: u32,
    /// The canonical arguments and their hash (`args`), when it has them.
    pub arguments: Option<String>,
    pub args_hash: Option<String>,
    /// The gates the approval redeemed for it met, when one was.
    pub approved_for: Option<String>,
}

impl From<&CapabilityRecord> for HeldCapability {
    fn from(r: &CapabilityRecord) -> Self {
        HeldCapability {
            id: r.id.clone(),
            run_id: r.run_id.clone(),
            action: r.action.clone(),
            resource: r.resource.clone(),
            issued_at: r.issued_at,
            expires_at: r.expires_at,
            uses: r.uses,
            arguments: r.arguments.clone(),
            args_hash: r.args_hash.clone(),
            approved_for: r.approval.as_ref().map(|(_, gates)| gates.clone()),
        }
    }
}

/// The capability columns [`held_from_row`] reads, renamed apart from the run's
/// (a macro, so queries stay `&'static str`).
macro_rules! held_columns {
    () => {
        "c.id AS cap_id, c.action AS cap_action, c.resource AS cap_resource, \
         c.issued_at AS cap_issued_at, c.expires_at AS cap_expires_at, c.uses AS cap_uses, \
         c.arguments AS cap_arguments, c.args_hash AS cap_args_hash, ap.approvers AS cap_approved_for"
    };
}

/// The joins [`held_columns`] needs (its run, and the approval redeemed for it).
macro_rules! held_joins {
    () => {
        " FROM capabilities c JOIN runs r ON r.id = c.run_id \
         LEFT JOIN approvals ap ON ap.id = c.approval_id"
    };
}

/// A capability and its run, from one row of `capabilities c JOIN runs r`.
fn held_from_row(row: &sqlx::any::AnyRow) -> Result<(HeldCapability, RunRecord), StoreError> {
    let run = super::runs::from_row(row)?;
    let uses: i64 = col(row, "cap_uses")?;
    let held = HeldCapability {
        id: col(row, "cap_id")?,
        run_id: run.id.clone(),
        action: col(row, "cap_action")?,
        resource: col(row, "cap_resource")?,
        issued_at: col(row, "cap_issued_at")?,
        expires_at: col(row, "cap_expires_at")?,
        uses: u32::try_from(uses).unwrap_or(0),
        arguments: col(row, "cap_arguments")?,
        args_hash: col(row, "cap_args_hash")?,
        approved_for: col(row, "cap_approved_for")?,
    };
    Ok((held, run))
}

/// The capability row `id` and its run, from the store, in one read.
pub async fn held(
    store: &Store,
    id: &str,
) -> Result<Option<(HeldCapability, RunRecord)>, StoreError> {
    let q = store.sql(concat!(
        "SELECT ",
        held_columns!(),
        ", ",
        run_columns!("r."),
        held_joins!(),
        " WHERE c.id = $1"
    ));
    let row = sqlx::query(&q)
        .bind(id)
        .fetch_optional(store.pool())
        .await?;
    row.as_ref().map(held_from_row).transpose()
}

/// Every capability that is not revoked, not expired, and whose run is active at
/// `now`, with its run: what a policy reload must re-authorize.
pub async fn live(store: &Store, now: i64) -> Result<Vec<(HeldCapability, RunRecord)>, StoreError> {
    let q = store.sql(concat!(
        "SELECT ",
        held_columns!(),
        ", ",
        run_columns!("r."),
        held_joins!(),
        " WHERE c.revoked_at IS NULL AND c.expires_at > $1 AND r.ended_at IS NULL \
         AND r.expires_at > $2 ORDER BY c.id"
    ));
    let rows = sqlx::query(&q)
        .bind(now)
        .bind(now)
        .fetch_all(store.pool())
        .await?;
    rows.iter().map(held_from_row).collect()
}

/// When a hold of `hold_secs` taken at `now` (whole seconds, rounded down)
/// lapses: one second later than the sum, so a hold is never shorter than asked.
pub fn lapse_at(now: i64, hold_secs: i64) -> i64 {
    now + hold_secs + 1
}
