//! Signing keys at rest: public half in clear, private half sealed under the KEK.
//!
//! Rotation inserts the new key with the moment it starts signing
//! (`signs_from`, later than every replica's next key refresh) and schedules
//! every key not yet retired to stop signing then (`retired_at`) and to stay
//! published until `publish_until`, the moment the last token it could have
//! signed expires — in one transaction, so replicas reading the table agree on
//! which key signs when. `signs_from` NULL (rows from before it existed) means
//! from `created_at`.

use super::query::stmt;
use super::writer::{BoxFuture, WriteCtx, WriteOp};
use super::{decode, Store, StoreError};
use crate::audit::AuditEvent;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct KeyRow {
    pub kid: String,
    pub public_key: String,
    pub sealed_private_key: String,
    pub created_at: i64,
    pub retired_at: Option<i64>,
    pub publish_until: Option<i64>,
    pub signs_from: Option<i64>,
}

pub async fn load_all(store: &Store) -> Result<Vec<KeyRow>, StoreError> {
    let q = "SELECT kid, public_key, sealed_private_key, created_at, retired_at, publish_until, signs_from \
             FROM signing_keys ORDER BY created_at, kid";
    let rows = sqlx::query(q).fetch_all(store.pool()).await?;
    rows.iter().map(decode).collect()
}

/// Inserts a new key. With `retire` = `(prepublish, keep)` (seconds), the new
/// key signs from `prepublish` after the commit's time, and every key not yet
/// retired stops signing then and stays published `keep` longer; returns their
/// kids and the new key's `signs_from`. The times are taken inside the
/// transaction, so a commit that comes late still leaves the whole
/// pre-publication to the other replicas' refresh. Without it (the first key), the
/// insert is skipped when a key not retired exists: replicas starting together
/// on an empty store create one key, not one each (batches of all replicas are
/// serialised on the audit head, see [`super::writer`]).
pub struct InsertKey {
    pub row: KeyRow,
    pub retire: Option<(i64, i64)>,
    /// Kids of rows that do not open under the KEK: not a reason to skip
    /// the first key (a junk row must not keep a broker from starting).
    pub not_ours: Vec<String>,
    pub audit: AuditEvent,
}

impl WriteOp for InsertKey {
    type Output = (Vec<String>, i64);
    fn apply<'a>(
        &'a self,
        ctx: &'a mut WriteCtx<'_>,
    ) -> BoxFuture<'a, Result<(Vec<String>, i64), sqlx::Error>> {
        Box::pin(async move {
            let mut retired = Vec::new();
            let now = ctx.now();
            let signs_from = now + self.retire.map_or(0, |(prepublish, _)| prepublish);
            let live = stmt("SELECT kid FROM signing_keys WHERE retired_at IS NULL")
                .fetch_all(&mut ctx.conn)
                .await?;
            let mut kids = Vec::with_capacity(live.len());
            for r in &live {
                kids.push(r.try_get::<String>("kid")?);
            }
            match self.retire {
                None if kids.iter().any(|k| !self.not_ours.contains(k)) => {
                    return Ok((retired, signs_from))
                }
                None => {}
                Some((_, keep)) => {
                    retired = kids;
                    let q = ctx.sql("UPDATE signing_keys SET retired_at = $1, publish_until = $2 WHERE retired_at IS NULL");
                    stmt(&q)
                        .bind(signs_from)
                        .bind(signs_from + keep)
                        .execute(&mut ctx.conn)
                        .await?;
                }
            }
            let r = &self.row;
            let q = ctx.sql(
                "INSERT INTO signing_keys (kid, public_key, sealed_private_key, created_at, signs_from) \
                 VALUES ($1, $2, $3, $4, $5)",
            );
            stmt(&q)
                .bind(&r.kid)
                .bind(&r.public_key)
                .bind(&r.sealed_private_key)
                .bind(now)
                .bind(signs_from)
                .execute(&mut ctx.conn)
                .await?;
            let mut ev = self.audit.clone();
            ev.detail = Some(format!(
                "kid={} signs_from={signs_from} retired={}",
                r.kid,
                retired.join(",")
            ));
            ctx.audit(&ev).await?;
            Ok((retired, signs_from))
        })
    }
}
