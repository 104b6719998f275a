//! Audit events and the hash chain that makes the log tamper-evident.
//!
//! Every decision is one [`AuditEvent`], appended by the store's writer in the same
//! transaction as the state it describes (see `store::writer`). Each row's hash is
//! `SHA-256(prev_hash ‖ canonical row)`, so editing, deleting or reordering a row
//! breaks every hash after it. Events carry ids and hashes only — never a token,
//! password or key.

use serde::Serialize;

pub mod events;
pub mod query;
pub mod verify;

/// One security decision, before it gets its place (seq, time, hash) in the chain.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AuditEvent {
    pub event: &'static str,
    pub actor: String,
    pub decision: &'static str,
    pub reason: Option<String>,
    pub run_id: Option<String>,
    pub capability_id: Option<String>,
    pub user: Option<String>,
    pub action: Option<String>,
    pub resource: Option<String>,
    pub request_id: Option<String>,
    pub detail: Option<String>,
    /// Added after the first release of the chain: omitted from the canonical form
    /// when null, so rows written before it existed still verify.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}

impl AuditEvent {
    pub fn new(event: &'static str, actor: impl Into<String>, decision: &'static str) -> Self {
        Self {
            event,
            actor: actor.into(),
            decision,
            ..Default::default()
        }
    }
}

/// The canonical form that is hashed: fixed field order, explicit nulls.
#[derive(Serialize)]
struct Canonical<'a, E> {
    seq: i64,
    at_ms: i64,
    #[serde(flatten)]
    event: &'a E,
}

/// Hash of the row at `seq` given the previous row's hash. `event` is an
/// [`AuditEvent`] when writing, and [`verify::StoredEvent`] (same fields, same
/// order, read back from the store) when verifying.
pub fn chain_hash<E: Serialize>(prev_hash: &str, seq: i64, at_ms: i64, event: &E) -> String {
    let body = serde_json::to_vec(&Canonical { seq, at_ms, event }).unwrap_or_default();
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(prev_hash.as_bytes());
    ctx.update(b"\n");
    ctx.update(&body);
    crate::ids::hex(ctx.finish().as_ref())
}

/// The hash the chain starts from.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

#[cfg(test)]
mod tests {
    use super::*;
    use events::CAPABILITY_ISSUED;

    #[test]
    fn any_change_changes_the_hash() {
        let ev = AuditEvent::new(CAPABILITY_ISSUED, "run:1", "allow");
        let h = chain_hash(GENESIS_HASH, 1, 10, &ev);
        assert_ne!(h, chain_hash(GENESIS_HASH, 2, 10, &ev));
        assert_ne!(h, chain_hash(GENESIS_HASH, 1, 11, &ev));
        assert_ne!(h, chain_hash(&h, 1, 10, &ev));
        let mut ev2 = ev.clone();
        ev2.decision = "deny";
        assert_ne!(h, chain_hash(GENESIS_HASH, 1, 10, &ev2));
        assert_eq!(h, chain_hash(GENESIS_HASH, 1, 10, &ev));
    }
}
