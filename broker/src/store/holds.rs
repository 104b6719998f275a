//! Holds: capabilities that lapse unless their holder keeps renewing them.
//!
//! Why: `tessera exec` revokes what it obtained when its command exits, but a
//! process that is killed (by the command it runs, or a supervisor's SIGKILL)
//! revokes nothing. A capability asked for with a hold carries `lapses_at`;
//! the holder renews it while it is alive, and the expiry sweeper revokes
//! every capability whose hold lapsed — leases and downstream users included,
//! through the same outbox as any revocation. The exchange refuses a lapsed
//! capability at once (`capability_lapsed`), before the sweeper gets to it.
//!
//! A lapsed hold cannot be renewed: renewal only moves `lapses_at` of a live
//! capability whose hold has not yet lapsed, so a holder that was silent too
//! long learns it lost what it held instead of reviving it.

use super::query::stmt;
use super::writer::{BoxFuture, WriteCtx, WriteOp};
use crate::audit::{events, AuditEvent};

pub use super::capabilities::lapse_at;

/// Renews the holds of `ids` (of the run `run_id`); returns each renewed id
/// with its new `lapses_at`. An id missing from the answer was not renewed:
/// unknown, another run's, without a hold, revoked, expired, or lapsed.
pub struct RenewHolds {
    pub run_id: String,
    pub ids: Vec<String>,
}

impl WriteOp for RenewHolds {
    type Output = Vec<(String, i64)>;
    fn apply<'a>(
        &'a self,
        ctx: &'a mut WriteCtx<'_>,
    ) -> BoxFuture<'a, Result<Vec<(String, i64)>, sqlx::Error>> {
        Box::pin(async move {
            let now = ctx.now();
            let q = ctx.sql(
                "UPDATE capabilities SET lapses_at = $1 + hold_secs + 1 \
                 WHERE id = $2 AND run_id = $3 AND revoked_at IS NULL AND hold_secs IS NOT NULL \
                 AND lapses_at > $4 AND expires_at > $5 RETURNING lapses_at",
            );
            let mut renewed = Vec::with_capacity(self.ids.len());
            for id in &self.ids {
                let row = stmt(&q)
                    .bind(now)
                    .bind(id)
                    .bind(&self.run_id)
                    .bind(now)
                    .bind(now)
                    .fetch_optional(&mut ctx.conn)
                    .await?;
                if let Some(row) = row {
                    renewed.push((id.clone(), row.try_get("lapses_at")?));
                }
            }
            Ok(renewed)
        })
    }
}

/// Revokes up to `limit` capabilities whose hold has lapsed, each with a
/// `capability.lapsed` audit row; returns how many.
pub struct LapseHolds {
    pub limit: i64,
}

impl WriteOp for LapseHolds {
    type Output = usize;
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<usize, sqlx::Error>> {
        Box::pin(async move {
            let now = ctx.now();
            let q = ctx.sql(
                "SELECT c.id, c.run_id, c.action, c.resource, c.lapses_at, r.user_name, r.task_id \
                 FROM capabilities c JOIN runs r ON r.id = c.run_id \
                 WHERE c.lapses_at IS NOT NULL AND c.revoked_at IS NULL AND c.lapses_at <= $1 \
                 ORDER BY c.lapses_at LIMIT $2",
            );
            let rows = stmt(&q)
                .bind(now)
                .bind(self.limit)
                .fetch_all(&mut ctx.conn)
                .await?;
            for row in &rows {
                let id: String = row.try_get("id")?;
                super::capabilities::revoke_one(ctx, &id, "hold_lapsed", "hold_lapsed").await?;
                let mut ev = AuditEvent::new(events::CAPABILITY_LAPSED, "broker", "allow");
                ev.reason = Some("hold_lapsed".into());
                ev.capability_id = Some(id);
                ev.run_id = Some(row.try_get("run_id")?);
                ev.user = Some(row.try_get("user_name")?);
                ev.task_id = Some(row.try_get("task_id")?);
                ev.action = Some(row.try_get("action")?);
                ev.resource = Some(row.try_get("resource")?);
                let lapses_at: i64 = row.try_get("lapses_at")?;
                ev.detail = Some(format!("lapsed_at={lapses_at}"));
                ctx.audit(&ev).await?;
            }
            Ok(rows.len())
        })
    }
}
