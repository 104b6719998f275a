//! Loading and creating the audit key ([`super::key::AuditKey`]): sealed by the
//! KEK in `audit_keys`, created once per deployment through the writer.
//!
//! Why apart from the key itself: the writer holds an [`AuditKey`] to chain
//! rows, so the key type cannot import the writer back; only this file, which
//! runs at start before the writer takes any row, does.

use super::key::AuditKey;
use crate::keys::Kek;
use crate::store::query::stmt;
use crate::store::writer::{BoxFuture, WriteCtx, WriteOp};
use crate::store::{col, Store, StoreError};
use ring::hmac;
use zeroize::Zeroizing;

#[derive(Debug, thiserror::Error)]
pub enum AuditKeyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("audit key {0} cannot be opened with this key-encryption key")]
    Sealed(String),
    #[error("the audit log has keyed rows but no audit key opens under this key-encryption key: the key was removed from the store, or this is not the deployment's KEK")]
    Missing,
}

fn aad(id: &str, created_at: i64, unkeyed_until_seq: i64) -> String {
    format!("audit-key:{id}:{created_at}:{unkeyed_until_seq}")
}

/// The deployment's audit key (the oldest that opens under `kek`), created
/// when there is none. Creation goes through the writer and inserts only into
/// an empty table, so replicas starting together end up with the same key.
///
/// A new key lets unkeyed only the rows an older broker wrote (the head when
/// the migration ran, `audit_unkeyed_prefix`), not whatever the head is now:
/// deleting the key row and rewriting the log as unkeyed does not turn it into
/// a legitimate unkeyed prefix. If any row is already keyed but no key opens,
/// the start is refused: the key was removed, or this is the wrong KEK.
pub async fn load_or_create(store: &Store, kek: &Kek, now: i64) -> Result<AuditKey, AuditKeyError> {
    if let Some(key) = load(store, kek).await? {
        return Ok(key);
    }
    if crate::store::audit::any_keyed_row(store).await? {
        return Err(AuditKeyError::Missing);
    }
    let until: i64 = sqlx::query_scalar("SELECT until_seq FROM audit_unkeyed_prefix WHERE id = 1")
        .fetch_optional(store.pool())
        .await
        .map_err(StoreError::from)?
        .unwrap_or(0);
    let id = format!("ak_{}", crate::ids::new_id());
    let secret = Zeroizing::new(crate::ids::random_bytes::<32>().to_vec());
    let sealed = kek.seal(&secret, &aad(&id, now, until));
    let created = store
        .writer()
        .submit(CreateAuditKey {
            id: id.clone(),
            sealed,
            created_at: now,
            unkeyed_until_seq: until,
        })
        .await?;
    if created {
        if until > 0 {
            tracing::warn!(key = %id, unkeyed_rows = until,
                "created the audit key; the rows written before the chain was keyed verify only as unkeyed");
        } else {
            tracing::info!(key = %id, "created the audit key");
        }
    }
    load(store, kek).await?.ok_or(AuditKeyError::Sealed(id))
}

/// Inserts the first audit key, unless one exists.
struct CreateAuditKey {
    id: String,
    sealed: String,
    created_at: i64,
    unkeyed_until_seq: i64,
}

impl WriteOp for CreateAuditKey {
    type Output = bool;
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<bool, sqlx::Error>> {
        Box::pin(async move {
            let q = ctx.sql(
                "INSERT INTO audit_keys (id, sealed, created_at, unkeyed_until_seq) \
                 SELECT $1, $2, $3, $4 WHERE NOT EXISTS (SELECT 1 FROM audit_keys)",
            );
            let n = stmt(&q)
                .bind(&self.id)
                .bind(&self.sealed)
                .bind(self.created_at)
                .bind(self.unkeyed_until_seq)
                .execute(&mut ctx.conn)
                .await?
                .rows_affected();
            Ok(n == 1)
        })
    }
}

async fn load(store: &Store, kek: &Kek) -> Result<Option<AuditKey>, AuditKeyError> {
    let rows = sqlx::query(
        "SELECT id, sealed, created_at, unkeyed_until_seq FROM audit_keys ORDER BY created_at, id",
    )
    .fetch_all(store.pool())
    .await
    .map_err(StoreError::from)?;
    let mut unopened = None;
    for row in &rows {
        let id: String = col(row, "id")?;
        let sealed: String = col(row, "sealed")?;
        let created_at: i64 = col(row, "created_at")?;
        let unkeyed_until_seq: i64 = col(row, "unkeyed_until_seq")?;
        match kek.open(&sealed, &aad(&id, created_at, unkeyed_until_seq)) {
            Ok(secret) => {
                return Ok(Some(AuditKey {
                    key: hmac::Key::new(hmac::HMAC_SHA256, &secret),
                    id,
                    created_at,
                    unkeyed_until_seq,
                }))
            }
            Err(_) => {
                // A row planted without the KEK (or with its time edited) is
                // not a key; say so, and do not let it stop the broker.
                tracing::error!(key = %id, "audit key row does not open under this KEK; ignored");
                unopened.get_or_insert(id);
            }
        }
    }
    match unopened {
        // Rows exist but none is ours: refuse rather than start a second chain
        // that would make the first unverifiable.
        Some(id) if !rows.is_empty() => Err(AuditKeyError::Sealed(id)),
        _ => Ok(None),
    }
}
