//! Taking the audit chain's signed checkpoints and delivering them to the
//! witness: the two background jobs of [`crate::audit::checkpoint`].
//!
//! Why in `jobs`: they run on the application's clock, configuration and
//! signing keys ([`App`]); what a checkpoint is, and checking one, stays in
//! `audit`, which imports neither the application nor its jobs.

use crate::app::App;
use crate::audit::checkpoint::{CheckpointClaims, WitnessRecord, CHECKPOINT_TYP};
use crate::clock::rfc3339_ms;
use crate::keys::{jwt, KeySet};
use crate::store::query::stmt;
use crate::store::writer::{BoxFuture, WriteCtx, WriteOp};
use crate::store::{col, StoreError};
use secrecy::ExposeSecret;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

/// Checkpoints delivered per witness pass.
const WITNESS_BATCH: i64 = 100;

/// Records a checkpoint (once per sequence number, whichever replica signs it).
struct InsertCheckpoint {
    claims: CheckpointClaims,
    jws: String,
}

impl WriteOp for InsertCheckpoint {
    type Output = bool;
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<bool, sqlx::Error>> {
        Box::pin(async move {
            let q = ctx.sql(
                "INSERT INTO audit_checkpoints (seq, hash, at_ms, jws, created_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (seq) DO NOTHING",
            );
            let n = stmt(&q)
                .bind(self.claims.seq)
                .bind(&self.claims.hash)
                .bind(self.claims.at_ms)
                .bind(&self.jws)
                .bind(self.claims.iat)
                .execute(&mut ctx.conn)
                .await?
                .rows_affected();
            Ok(n == 1)
        })
    }
}

/// The outcome of one witness delivery.
struct WitnessOutcome {
    seq: i64,
    error: Option<String>,
    retry_at: i64,
}

impl WriteOp for WitnessOutcome {
    type Output = ();
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let now = ctx.now();
            let q = match self.error {
                None => ctx.sql(
                    "UPDATE audit_checkpoints SET witness_done_at = $1, witness_error = NULL, \
                     witness_attempts = witness_attempts + 1 WHERE seq = $2",
                ),
                Some(_) => ctx.sql(
                    "UPDATE audit_checkpoints SET witness_next_at = $1, witness_error = $3, \
                     witness_attempts = witness_attempts + 1 WHERE seq = $2",
                ),
            };
            let query = stmt(&q)
                .bind(if self.error.is_none() {
                    now
                } else {
                    self.retry_at
                })
                .bind(self.seq);
            let query = match &self.error {
                Some(e) => query.bind(e),
                None => query,
            };
            query.execute(&mut ctx.conn).await?;
            Ok(())
        })
    }
}

/// Every signing key this broker ever used, to verify checkpoints with
/// (they never expire); `None`, logged, when they cannot be loaded.
pub async fn verifying_keys(app: &App) -> Option<KeySet> {
    match crate::keys::manage::every_key(
        &app.store,
        &app.kek,
        app.keys.snapshot().signer(app.clock.now()).clone(),
    )
    .await
    {
        Ok(keys) => Some(keys),
        Err(e) => {
            tracing::error!(error = %e, "cannot load signing keys");
            None
        }
    }
}

/// Takes a checkpoint of the head if one is due (or at once with `force`).
/// Returns the sequence number checkpointed.
///
/// The store is not trusted for the decision: the last checkpoint counts only
/// if it names a row at or below the head and its signature verifies (a row
/// planted far ahead would otherwise stop checkpoints for good); a head below
/// what this process has seen committed is an alarm, never signed; and the
/// file, standard output and witness get every checkpoint this process signs,
/// whatever the store's copy says.
pub async fn take(app: &App, force: bool) -> Result<Option<i64>, StoreError> {
    let store = &app.store;
    let crate::store::audit::Head {
        seq: head_seq,
        hash: head_hash,
    } = crate::store::audit::head(store).await?;
    if head_seq < store.writer().audit_high_water() {
        tracing::error!(
            head_seq,
            committed = store.writer().audit_high_water(),
            "the audit head moved back: rows were removed from the audit table; no checkpoint"
        );
        return Ok(None);
    }
    if head_seq == 0 {
        return Ok(None);
    }
    let now = app.clock.now();
    let keys = app.keys.snapshot();
    let q = store.sql(
        "SELECT seq, created_at, jws FROM audit_checkpoints WHERE seq <= $1 ORDER BY seq DESC LIMIT 1",
    );
    let last = sqlx::query(&q)
        .bind(head_seq)
        .fetch_optional(store.pool())
        .await?;
    let mut last_seq = app
        .last_checkpoint
        .load(std::sync::atomic::Ordering::Acquire);
    let mut last_at = app.started_at;
    if let Some(r) = &last {
        let jws: String = col(r, "jws")?;
        let seq: i64 = col(r, "seq")?;
        let genuine = jwt::verify::<CheckpointClaims>(&jws, CHECKPOINT_TYP, &keys, 0)
            .is_ok_and(|(c, _)| c.seq == seq);
        if genuine && seq >= last_seq {
            last_seq = seq;
            last_at = col(r, "created_at")?;
        }
    }
    let cfg = &app.config.audit;
    let due = head_seq > last_seq
        && (force
            || head_seq - last_seq >= cfg.checkpoint_rows
            || now - last_at >= cfg.checkpoint_interval.as_secs() as i64);
    if !due {
        return Ok(None);
    }
    let Some(row) = crate::store::audit::row_link(store, head_seq).await? else {
        tracing::error!(
            seq = head_seq,
            "the audit head names a row that does not exist; no checkpoint"
        );
        return Ok(None);
    };
    if row.hash != head_hash {
        tracing::error!(
            seq = head_seq,
            "the audit head does not match its row; no checkpoint"
        );
        return Ok(None);
    }
    let Some(key) = store.writer().audit_key() else {
        return Ok(None);
    };
    let claims = CheckpointClaims {
        iss: app.config.issuer.clone(),
        seq: head_seq,
        hash: head_hash,
        at_ms: row.at_ms,
        iat: now,
        audit_key: key.id.clone(),
        unkeyed_until_seq: key.unkeyed_until_seq,
    };
    let jws = jwt::encode(keys.signer(now), CHECKPOINT_TYP, &claims);
    let fresh = store
        .writer()
        .submit(InsertCheckpoint {
            claims: claims.clone(),
            jws: jws.clone(),
        })
        .await?;
    if !fresh {
        // Another replica signed this head already — or someone planted a row.
        let q = store.sql("SELECT hash FROM audit_checkpoints WHERE seq = $1");
        let stored: Option<String> = sqlx::query_scalar(&q)
            .bind(claims.seq)
            .fetch_optional(store.pool())
            .await?;
        if stored.as_deref() != Some(claims.hash.as_str()) {
            tracing::error!(
                seq = claims.seq,
                "the store holds a checkpoint row for this head with another link"
            );
        }
    }
    app.last_checkpoint
        .fetch_max(claims.seq, std::sync::atomic::Ordering::AcqRel);
    let record = WitnessRecord {
        seq: claims.seq,
        hash: claims.hash.clone(),
        at: rfc3339_ms(claims.at_ms),
        checkpoint: jws,
    };
    let line = serde_json::to_string(&record).unwrap_or_default();
    if let Some(path) = &cfg.checkpoint_file {
        if let Err(e) = append_line(path, &line) {
            tracing::error!(path = %path.display(), error = %e, "cannot append the audit checkpoint to its file");
        }
    }
    if cfg.checkpoint_stdout {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
    // The witness gets it now, from this process; the store's outbox only
    // carries the retries.
    if let (Some(url), Some(client)) = (cfg.witness_url.as_ref(), app.witness_client()) {
        if post(client, url.expose_secret(), &record).await.is_none() {
            let done = WitnessOutcome {
                seq: record.seq,
                error: None,
                retry_at: now,
            };
            store.writer().submit(done).await?;
        }
    }
    tracing::info!(seq = claims.seq, "audit checkpoint signed");
    Ok(Some(claims.seq))
}

/// POSTs `record`; `None` on a 2xx, else what went wrong (never the URL).
async fn post(client: &reqwest::Client, url: &str, record: &WitnessRecord) -> Option<String> {
    match client.post(url).json(record).send().await {
        Ok(r) if r.status().is_success() => None,
        Ok(r) => Some(format!("witness answered {}", r.status().as_u16())),
        Err(e) => Some(format!("witness unreachable: {}", without_url(&e))),
    }
}

/// Appends `line` and syncs it, creating the file (mode 0600) if needed.
fn append_line(path: &std::path::Path, line: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(line.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_data()
}

/// Sends undelivered checkpoints to the witness URL, oldest first, stopping at
/// the first failure (a witness that is down is tried again later, not once
/// per checkpoint); returns how many it accepted.
pub async fn deliver(app: &App, client: &reqwest::Client) -> Result<usize, StoreError> {
    let Some(url) = &app.config.audit.witness_url else {
        return Ok(0);
    };
    let now = app.clock.now();
    let q = app.store.sql(
        "SELECT seq, hash, at_ms, jws, witness_attempts FROM audit_checkpoints \
         WHERE witness_done_at IS NULL AND witness_next_at <= $1 ORDER BY seq LIMIT $2",
    );
    let rows = sqlx::query(&q)
        .bind(now)
        .bind(WITNESS_BATCH)
        .fetch_all(app.store.pool())
        .await?;
    let mut delivered = 0;
    for row in &rows {
        let seq: i64 = col(row, "seq")?;
        let attempts: i64 = col(row, "witness_attempts")?;
        let record = WitnessRecord {
            seq,
            hash: col(row, "hash")?,
            at: rfc3339_ms(col(row, "at_ms")?),
            checkpoint: col(row, "jws")?,
        };
        let error = post(client, url.expose_secret(), &record).await;
        let failed = error.is_some();
        if let Some(e) = &error {
            tracing::warn!(seq, error = %e, "audit witness delivery failed; will retry");
        } else {
            delivered += 1;
        }
        let retry_at = now + super::revocation::backoff_secs(attempts + 1);
        app.store
            .writer()
            .submit(WitnessOutcome {
                seq,
                error,
                retry_at,
            })
            .await?;
        if failed {
            break;
        }
    }
    Ok(delivered)
}

/// A reqwest error without the URL (which may carry credentials).
fn without_url(e: &reqwest::Error) -> String {
    let mut e = e.to_string();
    if let Some(i) = e.find(" for url") {
        e.truncate(i);
    }
    e.chars().take(200).collect()
}

/// Runs until the broker stops: checks every second whether a checkpoint is
/// due. A last checkpoint is taken on stop.
pub async fn run(app: Arc<App>) {
    let mut stopping = app.stopping.subscribe();
    loop {
        let stop = tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => false,
            r = stopping.wait_for(|s| *s) => r.is_ok(),
        };
        let taken = tokio::time::timeout(Duration::from_secs(20), take(&app, stop)).await;
        match taken {
            Ok(Err(e)) => tracing::warn!(error = %e, "audit checkpoint failed; will retry"),
            Err(_) => tracing::warn!("audit checkpoint timed out; will retry"),
            Ok(Ok(_)) => {}
        }
        if stop {
            return;
        }
    }
}

/// Retries witness deliveries from the store's outbox, apart from signing, so
/// a witness that hangs never delays a checkpoint.
pub async fn run_witness(app: Arc<App>) {
    let Some(client) = app.witness_client() else {
        return;
    };
    let mut stopping = app.stopping.subscribe();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
        if let Err(e) = deliver(&app, client).await {
            tracing::warn!(error = %e, "audit witness pass failed; will retry");
        }
    }
}
