//! Signing keys at rest: public half in clear, private half sealed under the KEK.
//!
//! Rotation retires every active key (it stays published until `publish_until`,
//! the moment the last token it could have signed expires) and inserts the new
//! one, in one transaction, so replicas reading the table agree on the active key.

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
}

pub async fn load_all(store: &Store) -> Result<Vec<KeyRow>, StoreError> {
    let q = "SELECT kid, public_key, sealed_private_key, created_at, retired_at, publish_until \
             FROM signing_keys ORDER BY created_at, kid";
    let rows = sqlx::query(q).fetch_all(store.pool()).await?;
    rows.iter().map(decode).collect()
}

/// Inserts a new active key; with `retire_until` set, first retires every active
/// key, keeping it published until that Unix second. Returns the retired kids.
pub struct InsertKey {
    pub row: KeyRow,
    pub retire_until: Option<i64>,
    pub audit: AuditEvent,
}

impl WriteOp for InsertKey {
    type Output = Vec<String>;
    fn apply<'a>(
        &'a self,
        ctx: &'a mut WriteCtx<'_>,
    ) -> BoxFuture<'a, Result<Vec<String>, sqlx::Error>> {
        Box::pin(async move {
            let mut retired = Vec::new();
            if let Some(until) = self.retire_until {
                let rows = stmt("SELECT kid FROM signing_keys WHERE retired_at IS NULL")
                    .fetch_all(&mut ctx.conn)
                    .await?;
                for r in rows {
                    retired.push(r.try_get::<String>("kid")?);
                }
                let q = ctx.sql("UPDATE signing_keys SET retired_at = $1, publish_until = $2 WHERE retired_at IS NULL");
                stmt(&q)
                    .bind(ctx.now())
                    .bind(until)
                    .execute(&mut ctx.conn)
                    .await?;
            }
            let r = &self.row;
            let q = ctx.sql(
                "INSERT INTO signing_keys (kid, public_key, sealed_private_key, created_at) VALUES ($1, $2, $3, $4)",
            );
            stmt(&q)
                .bind(&r.kid)
                .bind(&r.public_key)
                .bind(&r.sealed_private_key)
                .bind(r.created_at)
                .execute(&mut ctx.conn)
                .await?;
            let mut ev = self.audit.clone();
            ev.detail = Some(format!("kid={} retired={}", r.kid, retired.join(",")));
            ctx.audit(&ev).await?;
            Ok(retired)
        })
    }
}
