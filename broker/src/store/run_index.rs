//! Which capabilities belong to a run: an index written behind the issuances.
//!
//! Ending a run revokes its capabilities, retention deletes them with the run,
//! an operator lists them: all three find a run's capabilities by run. An
//! index on `capabilities(run_id)` did that, but a run's entries sit together
//! while many runs issue at once, so every group commit changed one index page
//! per distinct run in its batch — on SQLite, whole 4 KiB pages written to the
//! WAL and again at each checkpoint, most of the bytes an issuance cost
//! (docs/performance.md: the same build without that index issued a quarter
//! more).
//!
//! `run_capabilities` holds the same pairs, filled from the audit: the row that
//! records an issued capability is written in the capability's transaction,
//! carries its id, and the audit's `seq` is commit order. [`catch_up`] reads
//! the audit rows after `run_capabilities_mark.through_seq`, inserts the pairs
//! of the capabilities they name (the run taken from the capability row) and
//! moves the mark, in one transaction: a page per run per catch-up rather than
//! per commit. It runs every [`INTERVAL`] (the `run_index` job), and inside
//! the transaction of whatever needs a run's complete list first: ending a
//! run, pruning runs, pruning audit rows (which it reads). A read outside the
//! writer ([`of_run_1`]) adds the audit rows after the mark itself, in
//! the same statement, so no capability is ever missing from its run's list.
//!
//! Why the audit and not a list of its own: it is already written, in commit
//! order, with the capability's id; a second list would put back a write per
//! issuance. `apply_issuances` refuses to record a capability whose audit row
//! does not name it and its run.
//!
//! SQLite only. PostgreSQL logs an index entry, not a page: measured, it ran
//! no faster without `capabilities(run_id)` and 12% slower with this table
//! (docs/performance.md), so it keeps the index, nothing trails, and every
//! query here has its PostgreSQL form on `run_id`.

use super::query::{stmt, Columns};
use super::writer::{BoxFuture, WriteCtx, WriteOp};
use super::Dialect;
use std::time::Duration;

/// How often the `run_index` job catches up. What it leaves is read from the
/// audit by every reader, so this bounds that extra work, not correctness.
pub const INTERVAL: Duration = Duration::from_millis(250);

/// Audit rows one job catch-up reads at most, so it never holds the writer
/// long; the job submits another at once when it was cut short.
pub const JOB_ROWS: i64 = 20_000;

/// Whether this store's run index trails the issuances (SQLite) or is
/// `capabilities(run_id)` itself (PostgreSQL).
pub fn trails(dialect: Dialect) -> bool {
    dialect == Dialect::Sqlite
}

/// `capabilities` rows of run `?1`/`$1` (the dialect's placeholder) for a
/// read outside the writer: on SQLite the index and the ids named by audit
/// rows after its mark (the `run_id` test keeps this run's own).
pub fn of_run_1(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => {
            "run_id = ?1 AND id IN (SELECT capability_id FROM run_capabilities WHERE run_id = ?1 \
             UNION ALL SELECT a.capability_id FROM audit a \
             WHERE a.seq > (SELECT through_seq FROM run_capabilities_mark WHERE id = 1) \
             AND a.capability_id IS NOT NULL)"
        }
        Dialect::Postgres => "run_id = $1",
    }
}

/// `capabilities` rows of run `?3`/`$3` inside the writer, after [`catch_up`].
pub fn of_run_3(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => {
            "id IN (SELECT capability_id FROM run_capabilities WHERE run_id = ?3) AND run_id = ?3"
        }
        Dialect::Postgres => "run_id = $3",
    }
}

/// Indexes the capabilities named by audit rows after the mark, up to `limit`
/// rows (all when `None`), and moves the mark past them; returns the new mark.
///
/// Reads committed audit rows only (the batch's own are written at its end),
/// so it must run before any issuance of its batch: every op that calls it is
/// a [`WriteOp`], applied before the batched kinds, and it fails rather than
/// run after one.
pub async fn catch_up(ctx: &mut WriteCtx<'_>, limit: Option<i64>) -> Result<i64, sqlx::Error> {
    if !trails(ctx.dialect) {
        return Ok(0);
    }
    if ctx.buffers_an_issuance() {
        // An issuance earlier in this batch: its capability would be missed.
        return Err(sqlx::Error::Protocol(
            "the run index caught up after an issuance in the same batch".into(),
        ));
    }
    let mark = stmt("SELECT through_seq FROM run_capabilities_mark WHERE id = 1")
        .fetch_one(&mut ctx.conn)
        .await?
        .column::<i64>("through_seq")?;
    let top = stmt("SELECT MAX(seq) AS top FROM audit")
        .fetch_one(&mut ctx.conn)
        .await?
        .column::<Option<i64>>("top")?
        .unwrap_or(mark);
    let upto = match limit {
        Some(n) => top.min(mark.saturating_add(n)),
        None => top,
    };
    if upto <= mark {
        return Ok(mark);
    }
    let q = ctx.sql(
        "INSERT INTO run_capabilities (run_id, capability_id) \
         SELECT c.run_id, c.id FROM audit a JOIN capabilities c ON c.id = a.capability_id \
         WHERE a.seq > $1 AND a.seq <= $2 \
         ON CONFLICT (run_id, capability_id) DO NOTHING",
    );
    stmt(&q)
        .bind(mark)
        .bind(upto)
        .execute(&mut ctx.conn)
        .await?;
    let q = ctx.sql("UPDATE run_capabilities_mark SET through_seq = $1 WHERE id = 1");
    stmt(&q).bind(upto).execute(&mut ctx.conn).await?;
    Ok(upto)
}

/// One catch-up of at most `rows` audit rows (the job's: [`JOB_ROWS`]);
/// returns the new mark.
pub struct CatchUp {
    pub rows: i64,
}

impl WriteOp for CatchUp {
    type Output = i64;
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<i64, sqlx::Error>> {
        Box::pin(catch_up(ctx, Some(self.rows)))
    }
}
