//! Approver keys: who may decide approvals. A key is kept only as its SHA-256,
//! like a runtime key; it names the user (from entities.json) whose decisions
//! it makes, and a revoked key stops working at once.
//!
//! Seam: an approver is a (name, user) pair however it authenticated; an OIDC
//! sign-in would resolve to the same pair without a key row.

use super::query::stmt;
use super::writer::{BoxFuture, WriteCtx, WriteOp};
use super::{decode, Store, StoreError};
use crate::audit::AuditEvent;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ApproverRecord {
    pub id: String,
    pub name: String,
    pub user_name: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

/// Creates an approver key; false when the name is taken.
pub struct CreateApprover {
    pub record: ApproverRecord,
    pub key_hash: String,
    pub audit: AuditEvent,
}

impl WriteOp for CreateApprover {
    type Output = bool;
    const GRANTS: bool = true;
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<bool, sqlx::Error>> {
        Box::pin(async move {
            let r = &self.record;
            let q = ctx.sql(
                "INSERT INTO approvers (id, name, user_name, key_hash, created_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO NOTHING",
            );
            let inserted = stmt(&q)
                .bind(&r.id)
                .bind(&r.name)
                .bind(&r.user_name)
                .bind(&self.key_hash)
                .bind(r.created_at)
                .execute(&mut ctx.conn)
                .await?
                .rows_affected();
            if inserted == 1 {
                ctx.audit(&self.audit).await?;
            }
            Ok(inserted == 1)
        })
    }
}

/// Revokes approver key `id`: `None` when unknown, `Some(false)` when it was
/// already revoked. Its approvals stop counting: an approved approval it made
/// that is not redeemed yet goes back to pending unless the others suffice
/// (`groups_of`: membership under the policy in force).
pub struct RevokeApprover {
    pub id: String,
    pub audit: AuditEvent,
    pub groups_of: super::approvals::GroupsOf,
}

impl WriteOp for RevokeApprover {
    type Output = Option<bool>;
    fn apply<'a>(
        &'a self,
        ctx: &'a mut WriteCtx<'_>,
    ) -> BoxFuture<'a, Result<Option<bool>, sqlx::Error>> {
        Box::pin(async move {
            let q = ctx.sql("SELECT name, revoked_at FROM approvers WHERE id = $1");
            let Some(row) = stmt(&q)
                .bind(&self.id)
                .fetch_optional(&mut ctx.conn)
                .await?
            else {
                return Ok(None);
            };
            let revoked_at: Option<i64> = row.try_get("revoked_at")?;
            if revoked_at.is_some() {
                return Ok(Some(false));
            }
            let name: String = row.try_get("name")?;
            let q = ctx.sql("UPDATE approvers SET revoked_at = $1 WHERE id = $2");
            stmt(&q)
                .bind(ctx.now())
                .bind(&self.id)
                .execute(&mut ctx.conn)
                .await?;
            let reopened = super::approvals::recount_without(ctx, &name, &*self.groups_of).await?;
            let mut ev = self.audit.clone();
            if !reopened.is_empty() {
                ev.detail = Some(format!(
                    "{} reopened={}",
                    ev.detail.as_deref().unwrap_or_default(),
                    reopened.join(",")
                ));
            }
            ctx.audit(&ev).await?;
            Ok(Some(true))
        })
    }
}

/// The live (not revoked) approver whose key hashes to `key_hash`.
pub async fn find_by_key_hash(
    store: &Store,
    key_hash: &str,
) -> Result<Option<ApproverRecord>, StoreError> {
    let q = store.sql(
        "SELECT id, name, user_name, created_at, revoked_at FROM approvers \
         WHERE key_hash = $1 AND revoked_at IS NULL",
    );
    let row = sqlx::query(&q)
        .bind(key_hash)
        .fetch_optional(store.pool())
        .await?;
    row.as_ref().map(decode).transpose()
}

pub async fn list(store: &Store) -> Result<Vec<ApproverRecord>, StoreError> {
    let q = "SELECT id, name, user_name, created_at, revoked_at FROM approvers ORDER BY name";
    let rows = sqlx::query(q).fetch_all(store.pool()).await?;
    rows.iter().map(decode).collect()
}
