//! Signed checkpoints: the audit chain's head, signed with the broker's signing
//! key and handed to witnesses outside the database.
//!
//! Why: a keyed chain stops a database owner without the KEK from editing or
//! deleting rows in the middle, but not from cutting rows off the end and moving
//! the head back — the database alone cannot tell a truncated log from a quiet
//! one. A checkpoint is a statement, signed by the broker and kept where the
//! database owner cannot reach, that row `seq` existed with link `hash`. Every
//! `audit.checkpoint_rows` rows or `audit.checkpoint_interval` (whichever comes
//! first, if rows were added) the broker writes one: to the database (which is
//! also the durable outbox of the HTTP witness), to an append-only file, to
//! standard output, and POSTs it to a witness URL until that answers 2xx
//! (`jobs::checkpoints` takes and delivers them; this file is what a
//! checkpoint is and how one is checked, which the API and the CLI need too).
//! `tessera audit verify --checkpoints FILE` then proves the database still
//! holds every checkpointed row unchanged and names the rows after the last
//! checkpoint as an unverified tail.

use crate::clock::rfc3339_ms;
use crate::keys::{jwt, KeySet};
use crate::store::{col, Store, StoreError};
use serde::{Deserialize, Serialize};

/// The JWS `typ` of a checkpoint.
pub const CHECKPOINT_TYP: &str = "tsr-audit-checkpoint+jwt";

/// What a checkpoint signs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CheckpointClaims {
    pub iss: String,
    pub seq: i64,
    pub hash: String,
    /// The checkpointed row's own time.
    pub at_ms: i64,
    /// When the checkpoint was signed (Unix seconds).
    pub iat: i64,
    /// The audit key the chain is linked with, and the unkeyed prefix it
    /// allows: a witness sees a key being replaced.
    pub audit_key: String,
    pub unkeyed_until_seq: i64,
}

/// One line of the checkpoint file, one standard-output line, one witness POST body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WitnessRecord {
    pub seq: i64,
    pub hash: String,
    pub at: String,
    pub checkpoint: String,
}

/// The signed time of the row a checkpoint names (ms), if `jws` is a
/// checkpoint signed by one of `keys`.
pub fn signed_time(keys: &KeySet, jws: &str) -> Option<i64> {
    jwt::verify::<CheckpointClaims>(jws, CHECKPOINT_TYP, keys, 0)
        .ok()
        .map(|(claims, _)| claims.at_ms)
}

pub use tessera_client::types::CheckpointCheck;

/// The newest stored checkpoint, for the console and operators.
pub async fn latest(
    store: &Store,
) -> Result<Option<tessera_client::types::CheckpointInfo>, StoreError> {
    let q = "SELECT seq, hash, at_ms, jws, witness_done_at, witness_attempts \
             FROM audit_checkpoints ORDER BY seq DESC LIMIT 1";
    let Some(row) = sqlx::query(q).fetch_optional(store.pool()).await? else {
        return Ok(None);
    };
    let at_ms: i64 = col(&row, "at_ms")?;
    let done: Option<i64> = col(&row, "witness_done_at")?;
    Ok(Some(tessera_client::types::CheckpointInfo {
        seq: col(&row, "seq")?,
        hash: col(&row, "hash")?,
        signed_at: rfc3339_ms(at_ms),
        checkpoint: col(&row, "jws")?,
        witnessed_at: done.map(crate::clock::rfc3339),
        witness_attempts: col(&row, "witness_attempts")?,
    }))
}

/// Checks each checkpoint (compact JWS) against the store, with every key
/// this broker ever signed with (`keys`, retired ones included).
pub async fn check(
    store: &Store,
    issuer: &str,
    keys: &KeySet,
    checkpoints: &[String],
) -> Result<Vec<CheckpointCheck>, StoreError> {
    let mut out = Vec::with_capacity(checkpoints.len());
    // Rows below the first kept one were pruned by retention (after an
    // export that ends at a checkpoint): not "missing" from the store, but
    // proved by the exported segment (`tessera audit verify --segments`).
    let first_kept = crate::store::audit::first_seq(store).await?;
    for jws in checkpoints {
        // Checkpoints never expire: verify as of the key's creation, not now.
        let verified = jwt::verify::<CheckpointClaims>(jws, CHECKPOINT_TYP, keys, 0);
        let claims = match verified {
            Ok((c, _)) if c.iss == issuer => c,
            Ok(_) | Err(jwt::JwtError::Signature | jwt::JwtError::UnknownKey) => {
                out.push(CheckpointCheck {
                    seq: 0,
                    status: "bad_signature".to_owned(),
                });
                continue;
            }
            Err(_) => {
                out.push(CheckpointCheck {
                    seq: 0,
                    status: "malformed".to_owned(),
                });
                continue;
            }
        };
        let status = match crate::store::audit::row_link(store, claims.seq).await? {
            None if first_kept.is_some_and(|f| claims.seq < f) => "pruned",
            None => "missing",
            Some(r) if r.hash == claims.hash => "matches",
            Some(_) => "changed",
        };
        out.push(CheckpointCheck {
            seq: claims.seq,
            status: status.to_owned(),
        });
    }
    Ok(out)
}
