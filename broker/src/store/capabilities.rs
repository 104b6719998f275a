//! Capabilities and the leases exchanged for them.
//!
//! Invariants enforced here, in the same transaction as the change:
//! - a capability is only recorded while its run is active (checked under the
//!   writer's transaction, so a concurrent run end cannot be overtaken);
//! - `uses_left` only goes down by one per exchange and never below zero
//!   (`UPDATE … WHERE uses_left > 0`, plus a CHECK constraint);
//! - a revoked capability, or one whose run ended or expired, exchanges nothing;
//! - rate limits are one atomic GCRA upsert per issuance.

use super::runs::RunState;
use super::writer::{BoxFuture, WriteCtx, WriteOp};
use super::{col, Dialect, Store, StoreError};
use crate::audit::AuditEvent;
use sqlx::Row;

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
}

/// One GCRA charge (microseconds): `bucket` may take one request every
/// `interval_us`, with bursts up to `window_us` worth.
#[derive(Debug, Clone)]
pub struct RateCharge {
    pub bucket: String,
    pub interval_us: i64,
    pub window_us: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IssueOutcome {
    Issued,
    RunInactive(RunState),
    RateLimited { retry_after_us: i64 },
}

pub struct IssueCapability {
    pub record: CapabilityRecord,
    pub rate: Vec<RateCharge>,
    /// The `capability.issued` event; refusals reuse it with another decision.
    pub audit: AuditEvent,
}

async fn run_state(ctx: &mut WriteCtx<'_>, run_id: &str) -> Result<Option<RunState>, sqlx::Error> {
    let q = match ctx.dialect {
        Dialect::Sqlite => "SELECT ended_at, expires_at FROM runs WHERE id = ?1",
        Dialect::Postgres => "SELECT ended_at, expires_at FROM runs WHERE id = $1 FOR SHARE",
    };
    let row = sqlx::query(q)
        .bind(run_id)
        .fetch_optional(&mut *ctx.conn)
        .await?;
    Ok(match row {
        None => None,
        Some(r) => Some(RunState::of(
            r.try_get("ended_at")?,
            r.try_get("expires_at")?,
            ctx.now(),
        )),
    })
}

/// Charges one request to a GCRA bucket; `Some(retry_after_us)` when over the rate.
async fn charge(ctx: &mut WriteCtx<'_>, rate: &RateCharge) -> Result<Option<i64>, sqlx::Error> {
    let q = ctx.sql(
        "INSERT INTO rate_limits (bucket, tat_us) VALUES ($1, $2 + $3) \
         ON CONFLICT (bucket) DO UPDATE SET \
           tat_us = (CASE WHEN rate_limits.tat_us > $2 THEN rate_limits.tat_us ELSE $2 END) + $3 \
         WHERE (CASE WHEN rate_limits.tat_us > $2 THEN rate_limits.tat_us ELSE $2 END) + $3 - $4 <= $2 \
         RETURNING tat_us",
    );
    let now = ctx.now_ms * 1000;
    let admitted = sqlx::query(&q)
        .bind(&rate.bucket)
        .bind(now)
        .bind(rate.interval_us)
        .bind(rate.window_us)
        .fetch_optional(&mut *ctx.conn)
        .await?;
    if admitted.is_some() {
        return Ok(None);
    }
    let q = ctx.sql("SELECT tat_us FROM rate_limits WHERE bucket = $1");
    let tat: i64 = sqlx::query(&q)
        .bind(&rate.bucket)
        .fetch_one(&mut *ctx.conn)
        .await?
        .try_get("tat_us")?;
    Ok(Some(
        (tat.max(now) + rate.interval_us - rate.window_us - now).max(1),
    ))
}

impl WriteOp for IssueCapability {
    type Output = IssueOutcome;
    fn apply<'a>(
        &'a self,
        ctx: &'a mut WriteCtx<'_>,
    ) -> BoxFuture<'a, Result<IssueOutcome, sqlx::Error>> {
        Box::pin(async move {
            let r = &self.record;
            match run_state(ctx, &r.run_id).await? {
                Some(RunState::Active) => {}
                other => {
                    let state = other.unwrap_or(RunState::Ended);
                    let mut ev = self.audit.clone();
                    ev.event = "capability.denied";
                    ev.decision = "deny";
                    ev.capability_id = None;
                    ev.reason = Some(format!("run_{}", state.as_str()));
                    ctx.audit(&ev).await?;
                    return Ok(IssueOutcome::RunInactive(state));
                }
            }
            for rate in &self.rate {
                if let Some(retry_after_us) = charge(ctx, rate).await? {
                    let mut ev = self.audit.clone();
                    ev.event = "capability.rate_limited";
                    ev.decision = "deny";
                    ev.capability_id = None;
                    ev.reason = Some("rate_limited".into());
                    ctx.audit(&ev).await?;
                    return Ok(IssueOutcome::RateLimited { retry_after_us });
                }
            }
            let q = ctx.sql(
                "INSERT INTO capabilities (id, run_id, kid, action, resource, backend, policies, \
                 issued_at, expires_at, uses, uses_left) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)",
            );
            sqlx::query(&q)
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
                .execute(&mut *ctx.conn)
                .await?;
            ctx.audit(&self.audit).await?;
            Ok(IssueOutcome::Issued)
        })
    }
}

#[derive(Debug, Clone)]
pub struct LeaseRecord {
    pub id: String,
    pub capability_id: String,
    pub run_id: String,
    pub backend: String,
    pub kind: String,
    pub expires_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsumeOutcome {
    Consumed { uses_left: u32 },
    Unknown,
    Revoked,
    Expired,
    RunInactive(RunState),
    Exhausted,
}

impl ConsumeOutcome {
    pub fn reason(&self) -> &'static str {
        match self {
            ConsumeOutcome::Consumed { .. } => "ok",
            ConsumeOutcome::Unknown => "capability_unknown",
            ConsumeOutcome::Revoked => "capability_revoked",
            ConsumeOutcome::Expired => "capability_expired",
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
    fn apply<'a>(
        &'a self,
        ctx: &'a mut WriteCtx<'_>,
    ) -> BoxFuture<'a, Result<ConsumeOutcome, sqlx::Error>> {
        Box::pin(async move {
            let l = &self.lease;
            let now = ctx.now();
            let q = ctx.sql(
                "SELECT c.expires_at, c.revoked_at, r.ended_at, r.expires_at AS run_expires_at \
                 FROM capabilities c JOIN runs r ON r.id = c.run_id WHERE c.id = $1 AND c.run_id = $2",
            );
            let row = sqlx::query(&q)
                .bind(&l.capability_id)
                .bind(&l.run_id)
                .fetch_optional(&mut *ctx.conn)
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
                    let left = sqlx::query(&q)
                        .bind(&l.capability_id)
                        .fetch_optional(&mut *ctx.conn)
                        .await?;
                    match left {
                        None => ConsumeOutcome::Exhausted,
                        Some(row) => {
                            let left: i64 = row.try_get("uses_left")?;
                            let q = ctx.sql(
                                "INSERT INTO leases (id, capability_id, run_id, backend, kind, created_at, expires_at) \
                                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                            );
                            sqlx::query(&q)
                                .bind(&l.id)
                                .bind(&l.capability_id)
                                .bind(&l.run_id)
                                .bind(&l.backend)
                                .bind(&l.kind)
                                .bind(now)
                                .bind(l.expires_at)
                                .execute(&mut *ctx.conn)
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
                ev.event = "exchange.refused";
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
}

impl WriteOp for RevokeCapability {
    type Output = Option<bool>;
    fn apply<'a>(
        &'a self,
        ctx: &'a mut WriteCtx<'_>,
    ) -> BoxFuture<'a, Result<Option<bool>, sqlx::Error>> {
        Box::pin(async move {
            let q = ctx.sql("SELECT run_id, revoked_at FROM capabilities WHERE id = $1");
            let Some(row) = sqlx::query(&q)
                .bind(&self.capability_id)
                .fetch_optional(&mut *ctx.conn)
                .await?
            else {
                return Ok(None);
            };
            let run_id: String = row.try_get("run_id")?;
            if let Revoker::Run(own) = &self.by {
                if *own != run_id {
                    return Ok(None);
                }
            }
            let revoked_at: Option<i64> = row.try_get("revoked_at")?;
            if revoked_at.is_some() {
                return Ok(Some(false));
            }
            let now = ctx.now();
            let q = ctx.sql(
                "UPDATE capabilities SET revoked_at = $1, revoke_reason = 'revoked' WHERE id = $2 AND revoked_at IS NULL",
            );
            sqlx::query(&q)
                .bind(now)
                .bind(&self.capability_id)
                .execute(&mut *ctx.conn)
                .await?;
            let q = ctx.sql(
                "UPDATE leases SET revoked_at = $1 WHERE capability_id = $2 AND revoked_at IS NULL",
            );
            sqlx::query(&q)
                .bind(now)
                .bind(&self.capability_id)
                .execute(&mut *ctx.conn)
                .await?;
            let mut ev = self.audit.clone();
            ev.run_id = Some(run_id);
            ctx.audit(&ev).await?;
            Ok(Some(true))
        })
    }
}

/// What introspection needs to know about a capability, read fresh from the store.
#[derive(Debug, Clone)]
pub struct CapabilityStatus {
    pub run_id: String,
    pub runtime_id: String,
    pub revoked_at: Option<i64>,
    pub expires_at: i64,
    pub uses_left: u32,
    pub run_state: RunState,
}

impl CapabilityStatus {
    pub fn is_active(&self, now: i64) -> bool {
        self.revoked_at.is_none() && now < self.expires_at && self.run_state == RunState::Active
    }
}

pub async fn status(
    store: &Store,
    capability_id: &str,
    now: i64,
) -> Result<Option<CapabilityStatus>, StoreError> {
    let q = store.sql(
        "SELECT c.run_id, r.runtime_id, c.revoked_at, c.expires_at, c.uses_left, r.ended_at, \
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
    let q = store.sql(
        "SELECT id, action, resource, issued_at, expires_at, uses, uses_left, revoked_at \
         FROM capabilities WHERE run_id = $1 ORDER BY issued_at, id",
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

#[derive(Debug, Clone)]
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
    rows.iter()
        .map(|row| {
            Ok(LeaseRow {
                id: col(row, "id")?,
                capability_id: col(row, "capability_id")?,
                backend: col(row, "backend")?,
                kind: col(row, "kind")?,
                created_at: col(row, "created_at")?,
                expires_at: col(row, "expires_at")?,
                revoked_at: col(row, "revoked_at")?,
            })
        })
        .collect()
}
