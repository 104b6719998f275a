//! The webhook outbox: notifications written in the transaction that caused
//! them, delivered by a worker (`jobs/webhooks.rs`) until the receiver answers
//! 2xx. A crash between the commit and the delivery loses nothing; a receiver
//! that is down gets the notification when it is back, within the retry window.

use super::query::stmt;
use super::writer::{BoxFuture, WriteCtx, WriteOp};
use super::{col, Store, StoreError};

/// Attempts before a notification is given up (about a day with the backoff).
pub const MAX_ATTEMPTS: i64 = 20;

/// Queues `body` (JSON) for delivery, in the caller's transaction.
pub(crate) async fn enqueue(
    ctx: &mut WriteCtx<'_>,
    approval_id: &str,
    event: &str,
    body: &str,
) -> Result<(), sqlx::Error> {
    let now = ctx.now();
    let q = ctx.sql(
        "INSERT INTO webhook_outbox (id, approval_id, event, body, created_at, next_attempt_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    );
    stmt(&q)
        .bind(crate::ids::new_id())
        .bind(approval_id)
        .bind(event)
        .bind(body)
        .bind(now)
        .bind(now)
        .execute(&mut ctx.conn)
        .await?;
    Ok(())
}

#[derive(Debug, Clone)]
pub struct Due {
    pub id: String,
    pub event: String,
    pub body: String,
    pub attempts: i64,
}

/// Up to `limit` notifications due at `now`, oldest first.
pub async fn due(store: &Store, now: i64, limit: i64) -> Result<Vec<Due>, StoreError> {
    let q = store.sql(
        "SELECT id, event, body, attempts FROM webhook_outbox \
         WHERE delivered_at IS NULL AND attempts < $1 AND next_attempt_at <= $2 \
         ORDER BY next_attempt_at, id LIMIT $3",
    );
    let rows = sqlx::query(&q)
        .bind(MAX_ATTEMPTS)
        .bind(now)
        .bind(limit)
        .fetch_all(store.pool())
        .await?;
    rows.iter()
        .map(|r| {
            Ok(Due {
                id: col(r, "id")?,
                event: col(r, "event")?,
                body: col(r, "body")?,
                attempts: col(r, "attempts")?,
            })
        })
        .collect()
}

/// Records one delivery attempt: delivered, or failed with `error` and the
/// next attempt `retry_in` seconds from now.
pub struct Attempted {
    pub id: String,
    pub delivered: bool,
    pub error: Option<String>,
    pub retry_in: i64,
}

impl WriteOp for Attempted {
    type Output = ();
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let now = ctx.now();
            if self.delivered {
                let q = ctx.sql(
                    "UPDATE webhook_outbox SET attempts = attempts + 1, delivered_at = $1, \
                     last_error = NULL WHERE id = $2",
                );
                stmt(&q)
                    .bind(now)
                    .bind(&self.id)
                    .execute(&mut ctx.conn)
                    .await?;
            } else {
                let q = ctx.sql(
                    "UPDATE webhook_outbox SET attempts = attempts + 1, last_error = $1, \
                     next_attempt_at = $2 WHERE id = $3",
                );
                stmt(&q)
                    .bind(&self.error)
                    .bind(now + self.retry_in)
                    .bind(&self.id)
                    .execute(&mut ctx.conn)
                    .await?;
            }
            Ok(())
        })
    }
}

/// Whether this outbox holds anything undelivered (for tests and readiness).
pub async fn undelivered(store: &Store) -> Result<i64, StoreError> {
    let row = sqlx::query("SELECT COUNT(*) AS n FROM webhook_outbox WHERE delivered_at IS NULL")
        .fetch_one(store.pool())
        .await?;
    col(&row, "n")
}
