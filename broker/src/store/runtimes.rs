//! Runtimes: the orchestrators allowed to start runs, scoped by user and task-kind globs.

use super::writer::{BoxFuture, WriteCtx, WriteOp};
use super::{col, Store, StoreError};
use crate::audit::AuditEvent;

#[derive(Debug, Clone)]
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
            sqlx::query(&q)
                .bind(&r.id)
                .bind(&r.name)
                .bind(&self.key_hash)
                .bind(&r.users)
                .bind(&r.task_kinds)
                .bind(&r.client_cert_sha256)
                .bind(ctx.now())
                .execute(&mut *ctx.conn)
                .await?;
            ctx.audit(&self.audit).await
        })
    }
}

fn from_row(row: &sqlx::any::AnyRow) -> Result<RuntimeRecord, StoreError> {
    Ok(RuntimeRecord {
        id: col(row, "id")?,
        name: col(row, "name")?,
        users: col(row, "users")?,
        task_kinds: col(row, "task_kinds")?,
        client_cert_sha256: col(row, "client_cert_sha256")?,
        created_at: col(row, "created_at")?,
        disabled_at: col(row, "disabled_at")?,
    })
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
    row.as_ref().map(from_row).transpose()
}

pub async fn list(store: &Store) -> Result<Vec<RuntimeRecord>, StoreError> {
    let q =
        "SELECT id, name, users, task_kinds, client_cert_sha256, created_at, disabled_at FROM runtimes ORDER BY name";
    let rows = sqlx::query(q).fetch_all(store.pool()).await?;
    rows.iter().map(from_row).collect()
}
