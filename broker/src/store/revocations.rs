//! The revocation outbox: downstream objects (database users, …) that must be
//! removed, and the state of each removal.
//!
//! Why an outbox: revoking a lease in the broker's store is one transaction, but
//! removing its database user is a call to another system that can be down or
//! slow. So the store transaction that revokes a lease (run end, capability
//! revoke, expiry, failed issue) also writes a `revocations` row, and a worker
//! (`crate::jobs::revocation`) drives each row to completion — retried with backoff,
//! surviving restarts, visible when stuck. Claims go through the writer like every
//! write, so replicas sharing PostgreSQL never work on the same row at once: a
//! claim names the claiming instance and holds until `claim_until`, which that
//! instance's heartbeat renews (`store::instances`). A row whose claimant stopped,
//! died or stopped renewing is due again without waiting for any timeout.

use super::query::stmt;
use super::writer::{BoxFuture, WriteCtx, WriteOp};
use super::{col, Store, StoreError};
use crate::audit::{events, AuditEvent};

/// Which live leases a revocation covers.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    Run(&'a str),
    Capability(&'a str),
    Lease(&'a str),
    /// Live leases past their expiry at `now` (the reaper).
    ExpiredBy(i64),
}

/// Queues the downstream removal of the live leases in `scope` that have
/// something downstream. Call it in the transaction that revokes them, *before*
/// marking them revoked (it selects the leases that are still live).
pub async fn enqueue(
    ctx: &mut WriteCtx<'_>,
    scope: Scope<'_>,
    reason: &'static str,
) -> Result<u64, sqlx::Error> {
    let now = ctx.now();
    macro_rules! insert_where {
        ($cond:literal) => {
            concat!(
                "INSERT INTO revocations (lease_id, backend, downstream_ref, run_id, reason, \
                 created_at, attempts, next_attempt_at) \
                 SELECT id, backend, downstream_ref, run_id, $1, $2, 0, $2 FROM leases \
                 WHERE revoked_at IS NULL AND downstream_ref IS NOT NULL AND ",
                $cond,
                " ON CONFLICT (lease_id) DO NOTHING"
            )
        };
    }
    let q = ctx.sql(match scope {
        Scope::Run(_) => insert_where!("run_id = $3"),
        Scope::Capability(_) => insert_where!("capability_id = $3"),
        Scope::Lease(_) => insert_where!("id = $3"),
        Scope::ExpiredBy(_) => insert_where!("expires_at <= $3"),
    });
    let query = stmt(&q).bind(reason).bind(now);
    let query = match scope {
        Scope::Run(id) | Scope::Capability(id) | Scope::Lease(id) => query.bind(id.to_owned()),
        Scope::ExpiredBy(at) => query.bind(at),
    };
    Ok(query.execute(&mut ctx.conn).await?.rows_affected())
}

/// One claimed removal.
#[derive(Debug, Clone)]
pub struct Removal {
    pub lease_id: String,
    pub backend: String,
    pub downstream_ref: String,
    pub run_id: String,
    pub reason: String,
    /// Attempts including this one.
    pub attempts: i64,
}

/// Claims up to `limit` due jobs for `instance_id` until `now + claim_secs`,
/// so no other worker (or replica) takes them meanwhile. `next_attempt_at`
/// moves with the claim (so a broker of an older version, which knows only
/// that column, keeps off too); when the claim lapses both are in the past,
/// and a release by a stopping or dead claimant sets them to now.
pub struct ClaimRevocations {
    pub instance_id: String,
    pub limit: i64,
    pub claim_secs: i64,
}

impl WriteOp for ClaimRevocations {
    type Output = Vec<Removal>;
    fn apply<'a>(
        &'a self,
        ctx: &'a mut WriteCtx<'_>,
    ) -> BoxFuture<'a, Result<Vec<Removal>, sqlx::Error>> {
        Box::pin(async move {
            let now = ctx.now();
            let q = ctx.sql(
                "UPDATE revocations SET attempts = attempts + 1, claimed_by = $1, claim_until = $2, next_attempt_at = $2 \
                 WHERE lease_id IN (SELECT lease_id FROM revocations \
                   WHERE done_at IS NULL AND next_attempt_at <= $3 \
                   AND (claimed_by IS NULL OR claim_until <= $3) \
                   ORDER BY next_attempt_at LIMIT $4) \
                 RETURNING lease_id, backend, downstream_ref, run_id, reason, attempts",
            );
            let rows = stmt(&q)
                .bind(&self.instance_id)
                .bind(now + self.claim_secs)
                .bind(now)
                .bind(self.limit)
                .fetch_all(&mut ctx.conn)
                .await?;
            rows.iter()
                .map(|r| {
                    Ok(Removal {
                        lease_id: r.try_get("lease_id")?,
                        backend: r.try_get("backend")?,
                        downstream_ref: r.try_get("downstream_ref")?,
                        run_id: r.try_get("run_id")?,
                        reason: r.try_get("reason")?,
                        attempts: r.try_get::<i64>("attempts")?,
                    })
                })
                .collect()
        })
    }
}

/// The outcome of one claimed job.
#[derive(Debug, Clone)]
pub enum Outcome {
    Done,
    /// Retry at `retry_at` (unix seconds); `error` is kept and audited (never a secret).
    Failed {
        error: String,
        retry_at: i64,
    },
}

/// Records outcomes: done jobs are closed with a `lease.revoked` row, failed
/// ones rescheduled with a `lease.revocation_failed` row each.
pub struct FinishRevocations {
    /// The claimant: a failure is recorded only while it still holds the
    /// claim (another instance may have taken the job over meanwhile).
    pub instance_id: String,
    pub results: Vec<(Removal, Outcome)>,
}

impl WriteOp for FinishRevocations {
    type Output = ();
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let now = ctx.now();
            for (job, outcome) in &self.results {
                let mut ev = AuditEvent::new(events::LEASE_REVOKED, "broker", "allow");
                ev.run_id = Some(job.run_id.clone());
                ev.reason = Some(job.reason.clone());
                match outcome {
                    Outcome::Done => {
                        // Done is done, whoever held the claim; recorded once.
                        let q = ctx.sql(
                            "UPDATE revocations SET done_at = $1, last_error = NULL, claimed_by = NULL, claim_until = NULL \
                             WHERE lease_id = $2 AND done_at IS NULL",
                        );
                        let n = stmt(&q)
                            .bind(now)
                            .bind(&job.lease_id)
                            .execute(&mut ctx.conn)
                            .await?
                            .rows_affected();
                        if n == 0 {
                            continue;
                        }
                        ev.detail = Some(format!(
                            "lease={} backend={} ref={} attempts={}",
                            job.lease_id, job.backend, job.downstream_ref, job.attempts
                        ));
                    }
                    Outcome::Failed { error, retry_at } => {
                        let q = ctx.sql(
                            "UPDATE revocations SET next_attempt_at = $1, last_error = $2, claimed_by = NULL, claim_until = NULL \
                             WHERE lease_id = $3 AND done_at IS NULL AND claimed_by = $4",
                        );
                        let n = stmt(&q)
                            .bind(*retry_at)
                            .bind(error)
                            .bind(&job.lease_id)
                            .bind(&self.instance_id)
                            .execute(&mut ctx.conn)
                            .await?
                            .rows_affected();
                        if n == 0 {
                            // Taken over (or finished) by another instance.
                            continue;
                        }
                        ev.event = events::LEASE_REVOCATION_FAILED;
                        ev.decision = "error";
                        ev.detail = Some(format!(
                            "lease={} backend={} ref={} attempts={} retry_in={}s error={}",
                            job.lease_id,
                            job.backend,
                            job.downstream_ref,
                            job.attempts,
                            retry_at - now,
                            error
                        ));
                    }
                }
                ctx.audit(&ev).await?;
            }
            Ok(())
        })
    }
}

/// Puts a lease's removal back in the queue, even if it already ran.
///
/// Why: a lease can be revoked (run end, capability revoke) *while* its
/// downstream object is being created. The worker may then remove "nothing"
/// and close the job before the object appears. Whoever finishes creating it
/// and finds the lease revoked re-arms the job, so the late object goes too.
/// Removal is idempotent, so an unneeded re-run costs one downstream call.
pub async fn rearm(ctx: &mut WriteCtx<'_>, lease_id: &str) -> Result<u64, sqlx::Error> {
    let q = ctx.sql(
        "UPDATE revocations SET done_at = NULL, next_attempt_at = $1, claimed_by = NULL, claim_until = NULL \
         WHERE lease_id = $2 AND done_at IS NOT NULL",
    );
    Ok(stmt(&q)
        .bind(ctx.now())
        .bind(lease_id)
        .execute(&mut ctx.conn)
        .await?
        .rows_affected())
}

/// [`rearm`] as a write of its own.
pub struct RearmRevocation {
    pub lease_id: String,
}

impl WriteOp for RearmRevocation {
    type Output = u64;
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<u64, sqlx::Error>> {
        Box::pin(async move { rearm(ctx, &self.lease_id).await })
    }
}

/// The reaper: revokes live leases past their expiry and queues their removal.
/// Returns how many leases it revoked.
pub struct ExpireLeases;

impl WriteOp for ExpireLeases {
    type Output = u64;
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<u64, sqlx::Error>> {
        Box::pin(async move {
            let now = ctx.now();
            let queued = enqueue(ctx, Scope::ExpiredBy(now), "lease_expired").await?;
            if queued == 0 {
                return Ok(0);
            }
            let q = ctx.sql(
                "UPDATE leases SET revoked_at = $1 \
                 WHERE revoked_at IS NULL AND downstream_ref IS NOT NULL AND expires_at <= $1",
            );
            stmt(&q).bind(now).execute(&mut ctx.conn).await?;
            Ok(queued)
        })
    }
}

/// A revocation as administrators see it.
#[derive(Debug, Clone, serde::Serialize, sqlx::FromRow)]
pub struct RevocationRow {
    pub lease_id: String,
    pub backend: String,
    pub downstream_ref: String,
    pub run_id: String,
    pub reason: String,
    pub created_at: i64,
    pub attempts: i64,
    pub next_attempt_at: i64,
    pub last_error: Option<String>,
    pub done_at: Option<i64>,
}

/// Attempts after which a pending revocation counts as stuck.
pub const STUCK_AFTER_ATTEMPTS: i64 = 3;

/// Pending revocations (oldest first); with `stuck`, only those that failed at
/// least [`STUCK_AFTER_ATTEMPTS`] times.
pub async fn pending(
    store: &Store,
    stuck: bool,
    limit: i64,
) -> Result<Vec<RevocationRow>, StoreError> {
    let q = store.sql(
        "SELECT lease_id, backend, downstream_ref, run_id, reason, created_at, attempts, next_attempt_at, \
         last_error, done_at FROM revocations WHERE done_at IS NULL AND attempts >= $1 \
         ORDER BY created_at, lease_id LIMIT $2",
    );
    let rows = sqlx::query(&q)
        .bind(if stuck { STUCK_AFTER_ATTEMPTS } else { 0 })
        .bind(limit)
        .fetch_all(store.pool())
        .await?;
    rows.iter().map(super::decode).collect()
}

/// Whether any revocation is due at `now`: a read, so an idle worker never takes
/// the writer (nor, on PostgreSQL, the audit head lock) just to find nothing.
pub async fn any_due(store: &Store, now: i64) -> Result<bool, StoreError> {
    let q = store.sql(
        "SELECT lease_id FROM revocations WHERE done_at IS NULL AND next_attempt_at <= $1 \
         AND (claimed_by IS NULL OR claim_until <= $1) LIMIT 1",
    );
    let row = sqlx::query(&q)
        .bind(now)
        .fetch_optional(store.pool())
        .await?;
    Ok(row.is_some())
}

/// (pending, stuck) counts, for metrics.
pub async fn counts(store: &Store) -> Result<(i64, i64), StoreError> {
    let q = store.sql(
        "SELECT COUNT(*) AS pending, \
         COALESCE(SUM(CASE WHEN attempts >= $1 THEN 1 ELSE 0 END), 0) AS stuck \
         FROM revocations WHERE done_at IS NULL",
    );
    let row = sqlx::query(&q)
        .bind(STUCK_AFTER_ATTEMPTS)
        .fetch_one(store.pool())
        .await?;
    Ok((col(&row, "pending")?, col(&row, "stuck")?))
}

/// When the oldest downstream removal still pending was queued (Unix
/// seconds), if any is: readiness fails when it is older than a threshold.
pub async fn oldest_pending(store: &Store) -> Result<Option<i64>, StoreError> {
    let q = "SELECT MIN(created_at) AS oldest FROM revocations WHERE done_at IS NULL";
    let row = sqlx::query(q).fetch_one(store.pool()).await?;
    col(&row, "oldest")
}

/// The backends with removals waiting out a backoff: the worker asks each
/// whether it answers again, so a removal follows the server's return within
/// seconds instead of after a backoff of up to five minutes.
pub async fn backing_off(store: &Store, now: i64) -> Result<Vec<String>, StoreError> {
    let q = store.sql(
        "SELECT DISTINCT backend FROM revocations \
         WHERE done_at IS NULL AND attempts > 0 AND next_attempt_at > $1",
    );
    let rows = sqlx::query(&q).bind(now).fetch_all(store.pool()).await?;
    rows.iter().map(|r| col(r, "backend")).collect()
}

/// Makes every removal of `backend` still waiting out its backoff due now
/// (its server answers again). Returns how many.
pub struct RetryNow {
    pub backend: String,
}

impl WriteOp for RetryNow {
    type Output = u64;
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<u64, sqlx::Error>> {
        Box::pin(async move {
            let q = ctx.sql(
                "UPDATE revocations SET next_attempt_at = $1 \
                 WHERE backend = $2 AND done_at IS NULL AND next_attempt_at > $1",
            );
            let done = stmt(&q)
                .bind(ctx.now())
                .bind(self.backend.as_str())
                .execute(&mut ctx.conn)
                .await?;
            Ok(done.rows_affected())
        })
    }
}
