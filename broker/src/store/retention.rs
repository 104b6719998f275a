//! Retention: deleting what is old, never what is still needed, in small
//! transactions.
//!
//! Runs: a run that ended before the cutoff goes with its capabilities,
//! leases, done removals, approvals (and their votes and notifications) and
//! rate buckets — but only if nothing of it is still pending: no lease whose
//! downstream object has not been revoked, no removal waiting in the outbox,
//! no approval still open. The check is made again inside the deleting
//! transaction, so a removal queued meanwhile keeps its run.
//!
//! Audit: rows are deleted only up to a signed checkpoint that an exported
//! segment ends at ([`audit_prune_target`]), after an `audit.pruned` row in
//! the chain authorised it; the first kept row then stores its `prev_hash`
//! (the hash of the last deleted row), so the chain that remains still
//! verifies from its first row and the export proves what came before.
//!
//! Each op deletes a bounded batch, so the writer never holds the store for
//! long; the pruner (`jobs::retention`) submits batches until none is left.

use super::query::{stmt, Columns};
use super::run_index;
use super::sql::{in_list, placeholder};
use super::writer::{BoxFuture, WriteCtx, WriteOp};
use super::{col, Store, StoreError};
use crate::audit::{events, AuditEvent};

/// Runs deleted per transaction.
pub const RUNS_PER_BATCH: i64 = 100;
/// Audit rows deleted per transaction.
pub const AUDIT_ROWS_PER_BATCH: i64 = 5_000;

/// Nothing of the run is still pending (`r` is the run).
const NOTHING_PENDING: &str = "NOT EXISTS (SELECT 1 FROM leases l WHERE l.run_id = r.id \
       AND l.revoked_at IS NULL AND l.downstream_ref IS NOT NULL) \
     AND NOT EXISTS (SELECT 1 FROM revocations v WHERE v.run_id = r.id AND v.done_at IS NULL) \
     AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = r.id \
       AND a.status IN ('pending', 'approved'))";

/// Up to `limit` runs that ended before `ended_before` (Unix seconds) and
/// hold nothing pending, oldest first.
pub async fn prunable_runs(
    store: &Store,
    ended_before: i64,
    limit: i64,
) -> Result<Vec<String>, StoreError> {
    let (cutoff, most) = (
        placeholder(store.dialect(), 1),
        placeholder(store.dialect(), 2),
    );
    let q = format!(
        "SELECT r.id AS id FROM runs r WHERE r.ended_at IS NOT NULL AND r.ended_at < {cutoff} \
         AND {NOTHING_PENDING} ORDER BY r.ended_at LIMIT {most}"
    );
    let rows = sqlx::query(&q)
        .bind(ended_before)
        .bind(limit)
        .fetch_all(store.pool())
        .await?;
    rows.iter().map(|r| col(r, "id")).collect()
}

/// What one batch deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    pub runs: u64,
    pub capabilities: u64,
    pub leases: u64,
    pub revocations: u64,
    pub approvals: u64,
}

impl Pruned {
    pub fn add(&mut self, other: Pruned) {
        self.runs += other.runs;
        self.capabilities += other.capabilities;
        self.leases += other.leases;
        self.revocations += other.revocations;
        self.approvals += other.approvals;
    }
}

/// Deletes the runs `ids` that still qualify (ended before `ended_before`,
/// nothing pending) and everything that belongs to them; audited as one
/// `store.pruned` row.
pub struct PruneRuns {
    pub ids: Vec<String>,
    pub ended_before: i64,
}

impl WriteOp for PruneRuns {
    type Output = Pruned;
    fn apply<'a>(
        &'a self,
        ctx: &'a mut WriteCtx<'_>,
    ) -> BoxFuture<'a, Result<Pruned, sqlx::Error>> {
        Box::pin(async move {
            if self.ids.is_empty() {
                return Ok(Pruned::default());
            }
            let list = in_list(ctx.dialect, self.ids.len());
            // The cutoff is bound, not written into the text: a text per pass
            // would take a place in the writer's statement cache each time.
            let cutoff = placeholder(ctx.dialect, self.ids.len() + 1);
            let q = format!(
                "SELECT r.id AS id FROM runs r WHERE r.id IN ({list}) AND r.ended_at IS NOT NULL \
                 AND r.ended_at < {cutoff} AND {NOTHING_PENDING}"
            );
            let query = stmt(&q)
                .bind_all(self.ids.iter().map(String::as_str))
                .bind(self.ended_before);
            let mut ids = Vec::new();
            for row in query.fetch_all(&mut ctx.conn).await? {
                ids.push(row.column::<String>("id")?);
            }
            if ids.is_empty() {
                return Ok(Pruned::default());
            }
            // Every capability of these runs is in the run index.
            run_index::catch_up(ctx, None).await?;
            let list = in_list(ctx.dialect, ids.len());
            let approvals_of = format!("SELECT id FROM approvals WHERE run_id IN ({list})");
            // Children before parents (foreign keys).
            let statements = [
                format!("DELETE FROM approval_decisions WHERE approval_id IN ({approvals_of})"),
                format!("DELETE FROM webhook_outbox WHERE approval_id IN ({approvals_of})"),
                format!("DELETE FROM approvals WHERE run_id IN ({list})"),
                format!("DELETE FROM revocations WHERE run_id IN ({list})"),
                format!("DELETE FROM leases WHERE run_id IN ({list})"),
                if run_index::trails(ctx.dialect) {
                    // Only pairs whose capability is of that run: a wrong pair
                    // in the index (a table anyone with the file can write)
                    // deletes nothing of another run.
                    format!(
                        "DELETE FROM capabilities WHERE id IN (SELECT rc.capability_id \
                         FROM run_capabilities rc JOIN capabilities c \
                         ON c.id = rc.capability_id AND c.run_id = rc.run_id \
                         WHERE rc.run_id IN ({list}))"
                    )
                } else {
                    format!("DELETE FROM capabilities WHERE run_id IN ({list})")
                },
                format!("DELETE FROM runs WHERE id IN ({list})"),
            ];
            let mut counts = [0u64; 7];
            for (i, sql) in statements.iter().enumerate() {
                let query = stmt(sql).bind_all(ids.iter().map(String::as_str));
                counts[i] = query.execute(&mut ctx.conn).await?.rows_affected();
            }
            if run_index::trails(ctx.dialect) {
                let q = format!("DELETE FROM run_capabilities WHERE run_id IN ({list})");
                stmt(&q)
                    .bind_all(ids.iter().map(String::as_str))
                    .execute(&mut ctx.conn)
                    .await?;
            }
            // The run's rate buckets: `run:<id>` and `run:<id>:…`.
            let buckets = ctx
                .sql("DELETE FROM rate_limits WHERE bucket = $1 OR (bucket > $2 AND bucket < $3)");
            for id in &ids {
                stmt(&buckets)
                    .bind(format!("run:{id}"))
                    .bind(format!("run:{id}:"))
                    .bind(format!("run:{id};"))
                    .execute(&mut ctx.conn)
                    .await?;
            }
            let pruned = Pruned {
                approvals: counts[2],
                revocations: counts[3],
                leases: counts[4],
                capabilities: counts[5],
                runs: counts[6],
            };
            let mut ev = AuditEvent::new(events::STORE_PRUNED, "broker", "allow");
            ev.reason = Some("retention".into());
            ev.detail = Some(format!(
                "runs={} capabilities={} leases={} revocations={} approvals={} ended_before={}",
                pruned.runs,
                pruned.capabilities,
                pruned.leases,
                pruned.revocations,
                pruned.approvals,
                self.ended_before
            ));
            ctx.audit(&ev).await?;
            Ok(pruned)
        })
    }
}

/// A candidate for how far audit pruning may go: a checkpointed row, the
/// export said to hold it, and the `audit.exported` row that recorded that
/// export. Nothing here is trusted yet — the tables can be written by whoever
/// holds the database; the pruner checks the checkpoint's signature and time
/// and the links of every row up to the `audit.exported` one first.
#[derive(Debug, Clone)]
pub struct PruneCandidate {
    pub through: i64,
    pub checkpoint: String,
    pub export_id: String,
    /// The `audit.exported` row recording the export.
    pub exported_row: i64,
}

/// The highest row that a stored checkpoint names, that an export recorded
/// in the chain ends at or after (with no gap between the export and the
/// rows kept), and that was written before `older_than_ms`.
pub async fn audit_prune_target(
    store: &Store,
    older_than_ms: i64,
) -> Result<Option<PruneCandidate>, StoreError> {
    let q = format!(
        "SELECT c.seq AS seq, c.jws AS jws, e.id AS export_id, x.seq AS exported_row \
         FROM audit_checkpoints c \
         JOIN audit a ON a.seq = c.seq AND a.hash = c.hash \
         JOIN audit_exports e ON e.last_seq >= c.seq \
           AND e.first_seq <= COALESCE((SELECT MIN(seq) FROM audit), 1) \
         JOIN audit x ON x.event = '{}' AND x.detail LIKE 'id=' || e.id || ' %' \
         WHERE a.at_ms < {older_than_ms} \
         ORDER BY c.seq DESC, e.last_seq LIMIT 1",
        events::AUDIT_EXPORTED
    );
    let row = sqlx::query(&q).fetch_optional(store.pool()).await?;
    match row {
        None => Ok(None),
        Some(r) => Ok(Some(PruneCandidate {
            through: col(&r, "seq")?,
            checkpoint: col(&r, "jws")?,
            export_id: col(&r, "export_id")?,
            exported_row: col(&r, "exported_row")?,
        })),
    }
}

/// Deletes up to [`AUDIT_ROWS_PER_BATCH`] of the oldest audit rows, never
/// past `through`. The first batch towards a new `through` writes the
/// `audit.pruned` row that authorises it (its detail names `through`, the
/// checkpoint's row and the export); verification requires that row for a
/// chain that does not start at row 1. Returns how many rows were deleted.
pub struct PruneAudit {
    pub through: i64,
    pub export_id: String,
}

impl WriteOp for PruneAudit {
    type Output = u64;
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<u64, sqlx::Error>> {
        Box::pin(async move {
            // The run index is filled from audit rows: none is deleted unread.
            run_index::catch_up(ctx, None).await?;
            let state = stmt("SELECT through_seq FROM audit_prune WHERE id = 1")
                .fetch_optional(&mut ctx.conn)
                .await?;
            let authorised = match state {
                Some(row) => row.column::<i64>("through_seq")?,
                None => 0,
            };
            if authorised < self.through {
                let mut ev = AuditEvent::new(events::AUDIT_PRUNED, "broker", "allow");
                ev.reason = Some("retention".into());
                ev.detail = Some(format!(
                    "through={} export={}",
                    self.through, self.export_id
                ));
                ctx.audit(&ev).await?;
                let q = ctx.sql(
                    "INSERT INTO audit_prune (id, through_seq) VALUES (1, $1) \
                     ON CONFLICT (id) DO UPDATE SET through_seq = excluded.through_seq",
                );
                stmt(&q).bind(self.through).execute(&mut ctx.conn).await?;
            }
            let first = stmt("SELECT MIN(seq) AS first FROM audit")
                .fetch_one(&mut ctx.conn)
                .await?
                .column::<Option<i64>>("first")?;
            let Some(first) = first else { return Ok(0) };
            let upto = (first + AUDIT_ROWS_PER_BATCH - 1).min(self.through);
            if upto < first {
                return Ok(0);
            }
            let q = ctx.sql("SELECT hash FROM audit WHERE seq = $1");
            let last_hash: String = stmt(&q)
                .bind(upto)
                .fetch_one(&mut ctx.conn)
                .await?
                .column("hash")?;
            let q = ctx.sql("DELETE FROM audit WHERE seq <= $1");
            let deleted = stmt(&q).bind(upto).execute(&mut ctx.conn).await?;
            // The first kept row's link input no longer has a row to be
            // derived from: store it (a row that already stores one keeps it).
            let q = ctx.sql("UPDATE audit SET prev_hash = $1 WHERE seq = $2 AND prev_hash IS NULL");
            stmt(&q)
                .bind(last_hash.as_str())
                .bind(upto + 1)
                .execute(&mut ctx.conn)
                .await?;
            Ok(deleted.rows_affected())
        })
    }
}

/// Records an export an administrator confirmed (see [`audit_prune_target`]),
/// audited as `audit.exported`. The caller checked its checkpoint.
pub struct RecordAuditExport {
    pub id: String,
    pub first_seq: i64,
    pub last_seq: i64,
    pub last_hash: String,
    pub checkpoint: String,
    pub sha256: String,
    pub request_id: Option<String>,
}

impl WriteOp for RecordAuditExport {
    type Output = ();
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let q = ctx.sql(
                "INSERT INTO audit_exports (id, first_seq, last_seq, last_hash, checkpoint, \
                 sha256, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            );
            stmt(&q)
                .bind(self.id.as_str())
                .bind(self.first_seq)
                .bind(self.last_seq)
                .bind(self.last_hash.as_str())
                .bind(self.checkpoint.as_str())
                .bind(self.sha256.as_str())
                .bind(ctx.now())
                .execute(&mut ctx.conn)
                .await?;
            let mut ev = AuditEvent::new(events::AUDIT_EXPORTED, "admin", "allow");
            ev.request_id = self.request_id.clone();
            ev.detail = Some(format!(
                "id={} rows={}..{} checkpoint={} sha256={}",
                self.id, self.first_seq, self.last_seq, self.last_seq, self.sha256
            ));
            ctx.audit(&ev).await?;
            Ok(())
        })
    }
}
