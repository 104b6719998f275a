//! Broker instances and the revocation claims they hold (see [`crate::instance`]).
//!
//! Every write goes through the writer like all others; the heartbeat renews
//! the instance row and the lease of every claim it holds in one statement each.

use super::query::stmt;
use super::writer::{BoxFuture, WriteCtx, WriteOp};
use super::{col, decode, Store, StoreError};
pub use crate::instance::InstanceRow;
use crate::instance::{Instance, CLAIM_LEASE_SECS};

/// Records this process as a live instance.
pub struct RegisterInstance(pub Instance);

impl WriteOp for RegisterInstance {
    type Output = ();
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let now = ctx.now();
            let q = ctx.sql(
                "INSERT INTO broker_instances (id, machine, pid, pid_start, started_at, heartbeat_at) \
                 VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (id) DO UPDATE SET heartbeat_at = $5, stopped_at = NULL",
            );
            stmt(&q)
                .bind(&self.0.id)
                .bind(&self.0.machine)
                .bind(self.0.pid)
                .bind(&self.0.pid_start)
                .bind(now)
                .execute(&mut ctx.conn)
                .await?;
            Ok(())
        })
    }
}

/// Renews the instance's heartbeat and the lease of every claim it holds.
pub struct Heartbeat {
    pub instance_id: String,
}

impl WriteOp for Heartbeat {
    type Output = ();
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let now = ctx.now();
            // Alive: also after another instance wrongly took this one for
            // dead (a late heartbeat); its claims were released then, and
            // its finishes are fenced on still holding them.
            let q = ctx.sql(
                "UPDATE broker_instances SET heartbeat_at = $1, stopped_at = NULL WHERE id = $2",
            );
            stmt(&q)
                .bind(now)
                .bind(&self.instance_id)
                .execute(&mut ctx.conn)
                .await?;
            // Only claims still in force are renewed; the retry time moves
            // with the claim, so a broker that knows only next_attempt_at
            // (an older version) also keeps off.
            let q = ctx.sql(
                "UPDATE revocations SET claim_until = $1, next_attempt_at = $1 \
                 WHERE claimed_by = $2 AND done_at IS NULL AND claim_until > $3",
            );
            stmt(&q)
                .bind(now + CLAIM_LEASE_SECS)
                .bind(&self.instance_id)
                .bind(now)
                .execute(&mut ctx.conn)
                .await?;
            Ok(())
        })
    }
}

/// Gives up every claim held by `instances` (due again at once); with `stop`,
/// also marks them stopped. Returns how many claims were released.
pub struct ReleaseClaims {
    /// Each instance with the heartbeat its judge saw (`None`: no row, or
    /// the instance itself stopping). An instance whose heartbeat moved on
    /// since is alive after all and keeps its claims.
    pub instances: Vec<(String, Option<i64>)>,
    pub stop: bool,
}

impl WriteOp for ReleaseClaims {
    type Output = u64;
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<u64, sqlx::Error>> {
        Box::pin(async move {
            let now = ctx.now();
            let mut released = 0;
            for (id, seen) in &self.instances {
                if let Some(seen) = seen {
                    let q = ctx.sql("SELECT heartbeat_at FROM broker_instances WHERE id = $1");
                    let now_beat: Option<i64> =
                        match stmt(&q).bind(id).fetch_optional(&mut ctx.conn).await? {
                            Some(row) => row.try_get("heartbeat_at")?,
                            None => None,
                        };
                    if now_beat.is_some_and(|b| b > *seen) {
                        continue;
                    }
                }
                let q = ctx.sql(
                    "UPDATE revocations SET claimed_by = NULL, claim_until = NULL, next_attempt_at = $1 \
                     WHERE claimed_by = $2 AND done_at IS NULL",
                );
                released += stmt(&q)
                    .bind(now)
                    .bind(id)
                    .execute(&mut ctx.conn)
                    .await?
                    .rows_affected();
                let q = if self.stop {
                    ctx.sql("UPDATE broker_instances SET stopped_at = $1 WHERE id = $2")
                } else {
                    // A dead instance's row stays as a record until retention
                    // removes it; the claims were what mattered.
                    ctx.sql("UPDATE broker_instances SET stopped_at = COALESCE(stopped_at, $1) WHERE id = $2")
                };
                stmt(&q).bind(now).bind(id).execute(&mut ctx.conn).await?;
            }
            Ok(released)
        })
    }
}

/// The instances that hold unfinished claims (other than `except`), with
/// their rows (`None` when an instance left no row at all).
pub async fn claimants(
    store: &Store,
    except: &str,
) -> Result<Vec<(String, Option<InstanceRow>)>, StoreError> {
    let q = store.sql(
        "SELECT DISTINCT r.claimed_by AS claimed_by, i.id AS id, i.machine AS machine, i.pid AS pid, \
         i.pid_start AS pid_start, i.heartbeat_at AS heartbeat_at, i.stopped_at AS stopped_at \
         FROM revocations r LEFT JOIN broker_instances i ON i.id = r.claimed_by \
         WHERE r.done_at IS NULL AND r.claimed_by IS NOT NULL AND r.claimed_by <> $1",
    );
    let rows = sqlx::query(&q).bind(except).fetch_all(store.pool()).await?;
    rows.iter()
        .map(|r| {
            let claimed_by: String = col(r, "claimed_by")?;
            // The LEFT JOIN found no instance row: its columns are all null.
            let id: Option<String> = col(r, "id")?;
            let row = match id {
                None => None,
                Some(_) => Some(decode::<InstanceRow>(r)?),
            };
            Ok((claimed_by, row))
        })
        .collect()
}

/// What this instance enforces, for `GET /v1/admin/status` on any replica.
pub struct ReportStatus {
    pub instance_id: String,
    pub policy_version: i64,
    pub policy_sha256: String,
    pub signing_kid: String,
    pub software: String,
    pub listen: String,
}

impl WriteOp for ReportStatus {
    type Output = ();
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let q = ctx.sql(
                "UPDATE broker_instances SET policy_version = $1, policy_sha256 = $2, \
                 signing_kid = $3, software = $4, listen = $5 WHERE id = $6",
            );
            stmt(&q)
                .bind(self.policy_version)
                .bind(&self.policy_sha256)
                .bind(&self.signing_kid)
                .bind(&self.software)
                .bind(&self.listen)
                .bind(&self.instance_id)
                .execute(&mut ctx.conn)
                .await?;
            Ok(())
        })
    }
}

/// An instance with what it last reported (`GET /v1/admin/status`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StatusRow {
    pub id: String,
    pub machine: String,
    pub pid: i64,
    pub started_at: i64,
    pub heartbeat_at: i64,
    pub software: Option<String>,
    pub listen: Option<String>,
    pub policy_version: Option<i64>,
    pub policy_sha256: Option<String>,
    pub signing_kid: Option<String>,
}

/// Instances not stopped that beat since `since`, oldest first.
pub async fn running(store: &Store, since: i64) -> Result<Vec<StatusRow>, StoreError> {
    let q = store.sql(
        "SELECT id, machine, pid, started_at, heartbeat_at, software, listen, policy_version, \
         policy_sha256, signing_kid FROM broker_instances \
         WHERE stopped_at IS NULL AND heartbeat_at >= $1 ORDER BY started_at, id",
    );
    let rows = sqlx::query(&q).bind(since).fetch_all(store.pool()).await?;
    rows.iter().map(decode).collect()
}
