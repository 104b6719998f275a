//! The audit key: what makes the chain a MAC chain rather than a plain hash
//! chain. Generated once per deployment, stored only sealed by the KEK (the
//! AEAD's associated data binds it to its id and creation time), and installed
//! in the store's writer before any row is written.
//!
//! Why keyed: an unkeyed SHA-256 chain whose only anchor lives in the same
//! database can be rewritten by whoever can write that database — edit a row,
//! recompute every later hash, move the head. With a key the database owner
//! does not have, no row can be changed, added or removed without breaking the
//! chain at that row.

use crate::keys::Kek;
use crate::store::{col, Store, StoreError};
use ring::hmac;
use zeroize::Zeroizing;

/// One audit key, ready to compute links.
pub struct AuditKey {
    pub id: String,
    /// Unix seconds.
    pub created_at: i64,
    /// Rows up to this sequence number were written before the key existed
    /// and may be unkeyed; any later unkeyed row is a downgrade.
    pub unkeyed_until_seq: i64,
    key: hmac::Key,
}

impl std::fmt::Debug for AuditKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AuditKey({}, [redacted])", self.id)
    }
}

impl AuditKey {
    /// HMAC-SHA256 over `parts`, lowercase hex.
    pub fn mac(&self, parts: &[&[u8]]) -> String {
        let mut ctx = hmac::Context::with_key(&self.key);
        for p in parts {
            ctx.update(p);
        }
        crate::ids::hex(ctx.sign().as_ref())
    }

    #[cfg(test)]
    pub fn for_tests(id: &str) -> AuditKey {
        AuditKey {
            id: id.to_owned(),
            created_at: 0,
            unkeyed_until_seq: 0,
            key: hmac::Key::new(hmac::HMAC_SHA256, b"test audit key"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuditKeyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("audit key {0} cannot be opened with this key-encryption key")]
    Sealed(String),
}

fn aad(id: &str, created_at: i64, unkeyed_until_seq: i64) -> String {
    format!("audit-key:{id}:{created_at}:{unkeyed_until_seq}")
}

/// The deployment's audit key (the oldest that opens under `kek`), created
/// when there is none. Concurrent first starts may both create one; both then
/// pick the same oldest.
pub async fn load_or_create(store: &Store, kek: &Kek, now: i64) -> Result<AuditKey, AuditKeyError> {
    if let Some(key) = load(store, kek).await? {
        return Ok(key);
    }
    let id = format!("ak_{}", crate::ids::new_id());
    let secret = Zeroizing::new(crate::ids::random_bytes::<32>().to_vec());
    // Every row already written stays verifiable as unkeyed; none after it.
    let head: i64 = sqlx::query_scalar("SELECT seq FROM audit_head WHERE id = 1")
        .fetch_one(store.pool())
        .await
        .map_err(StoreError::from)?;
    let sealed = kek.seal(&secret, &aad(&id, now, head));
    let q = store.sql(
        "INSERT INTO audit_keys (id, sealed, created_at, unkeyed_until_seq) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (id) DO NOTHING",
    );
    sqlx::query(&q)
        .bind(&id)
        .bind(&sealed)
        .bind(now)
        .bind(head)
        .execute(store.pool())
        .await
        .map_err(StoreError::from)?;
    tracing::info!(key = %id, "created the audit key");
    load(store, kek).await?.ok_or(AuditKeyError::Sealed(id))
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
