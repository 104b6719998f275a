//! Runtimes: the orchestrators allowed to start runs, scoped by user and task-kind globs.

use super::query::stmt;
use super::writer::{BoxFuture, WriteCtx, WriteOp};
use super::{decode, Store, StoreError};
use crate::audit::{events, AuditEvent};
use tessera_client::types::RevokedCounts;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RuntimeRecord {
    pub id: String,
    pub name: String,
    pub users: String,
    pub task_kinds: String,
    pub client_cert_sha256: Option<String>,
    pub created_at: i64,
    pub disabled_at: Option<i64>,
}

/// Creates a runtime; its key exists only as `key_hash`.
pub struct CreateRuntime {
    pub record: RuntimeRecord,
    pub key_hash: String,
    pub audit: AuditEvent,
}

impl WriteOp for CreateRuntime {
    type Output = ();
    const GRANTS: bool = true;
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let r = &self.record;
            let q = ctx.sql(
                "INSERT INTO runtimes (id, name, key_hash, users, task_kinds, client_cert_sha256, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            );
            stmt(&q)
                .bind(&r.id)
                .bind(&r.name)
                .bind(&self.key_hash)
                .bind(&r.users)
                .bind(&r.task_kinds)
                .bind(&r.client_cert_sha256)
                .bind(ctx.now())
                .execute(&mut ctx.conn)
                .await?;
            ctx.audit(&self.audit).await
        })
    }
}

/// What disabling a runtime did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Disabled {
    /// False when it was already disabled (nothing was changed then).
    pub disabled: bool,
    pub runs_ended: u64,
    pub revoked: RevokedCounts,
}

/// Disables a runtime: its key stops working at once, and every run it started
/// that has not ended is ended with everything in it revoked (one `run.ended` row
/// each) — a runtime is disabled because it is no longer trusted, so nothing it
/// obtained may outlive that. `None`: no such runtime.
pub struct DisableRuntime {
    pub name: String,
    pub audit: AuditEvent,
}

impl WriteOp for DisableRuntime {
    type Output = Option<Disabled>;
    fn apply<'a>(
        &'a self,
        ctx: &'a mut WriteCtx<'_>,
    ) -> BoxFuture<'a, Result<Option<Disabled>, sqlx::Error>> {
        Box::pin(async move {
            let now = ctx.now();
            let q = ctx.sql("SELECT id, disabled_at FROM runtimes WHERE name = $1");
            let row = stmt(&q)
                .bind(&self.name)
                .fetch_optional(&mut ctx.conn)
                .await?;
            let Some(row) = row else {
                let mut ev = self.audit.clone();
                ev.decision = "deny";
                ev.reason = Some("not_found".into());
                ctx.audit(&ev).await?;
                return Ok(None);
            };
            let id: String = row.try_get("id")?;
            let disabled_at: Option<i64> = row.try_get("disabled_at")?;
            let mut out = Disabled::default();
            if disabled_at.is_none() {
                let q = ctx.sql("UPDATE runtimes SET disabled_at = $1 WHERE id = $2");
                stmt(&q).bind(now).bind(&id).execute(&mut ctx.conn).await?;
                out.disabled = true;
            }
            // Also on a repeat: a run started in a race with the first disable ends too.
            let q = ctx.sql(
                "SELECT id, user_name, task_id FROM runs WHERE runtime_id = $1 AND ended_at IS NULL",
            );
            let runs = stmt(&q).bind(&id).fetch_all(&mut ctx.conn).await?;
            for run in &runs {
                let mut ev = AuditEvent::new(events::RUN_ENDED, self.audit.actor.clone(), "allow");
                ev.reason = Some("runtime_disabled".into());
                ev.request_id = self.audit.request_id.clone();
                let counts =
                    super::runs::close_open_run(ctx, run, now, "runtime_disabled", "run_ended", ev)
                        .await?;
                out.runs_ended += 1;
                out.revoked.capabilities += counts.capabilities;
                out.revoked.leases += counts.leases;
                out.revoked.pending += counts.pending;
                out.revoked.approvals += counts.approvals;
            }
            let mut ev = self.audit.clone();
            if !out.disabled {
                ev.reason = Some("already_disabled".into());
            }
            ev.detail = Some(format!(
                "runtime={} runs_ended={} capabilities={} leases={}",
                self.name, out.runs_ended, out.revoked.capabilities, out.revoked.leases
            ));
            ctx.audit(&ev).await?;
            Ok(Some(out))
        })
    }
}

/// The enabled runtime whose key hashes to `key_hash`.
pub async fn find_by_key_hash(
    store: &Store,
    key_hash: &str,
) -> Result<Option<RuntimeRecord>, StoreError> {
    let q = store.sql(
        "SELECT id, name, users, task_kinds, client_cert_sha256, created_at, disabled_at FROM runtimes \
         WHERE key_hash = $1 AND disabled_at IS NULL",
    );
    let row = sqlx::query(&q)
        .bind(key_hash)
        .fetch_optional(store.pool())
        .await?;
    row.as_ref().map(decode).transpose()
}

pub async fn list(store: &Store) -> Result<Vec<RuntimeRecord>, StoreError> {
    let q =
        "SELECT id, name, users, task_kinds, client_cert_sha256, created_at, disabled_at FROM runtimes ORDER BY name";
    let rows = sqlx::query(q).fetch_all(store.pool()).await?;
    rows.iter().map(decode).collect()
}
