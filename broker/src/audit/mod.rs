//! Audit events and the hash chain that makes the log tamper-evident.
//!
//! Every decision is one [`AuditEvent`], appended by the store's writer in the same
//! transaction as the state it describes (see `store::writer`). Each row's link is
//! `HMAC-SHA256(audit key, prev_hash ‖ canonical row)` ([`key`]), so editing,
//! deleting or reordering a row breaks every link after it, and without the KEK
//! (which seals the audit key) nobody can recompute them. Rows written before the
//! chain was keyed keep their unkeyed `SHA-256` links and verify as such.
//! Signed checkpoints of the head ([`checkpoint`]) go to witnesses outside the
//! database, so a truncation is seen too. Events carry ids and hashes only —
//! never a token, password or key.

use serde::Serialize;

pub mod checkpoint;
pub mod events;
pub mod key;
pub mod key_store;
pub mod query;
pub mod segments;
pub mod verify;

pub use key::AuditKey;

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

/// The unkeyed link of the row at `seq` given the previous row's link (rows
/// written before the chain was keyed). `event` is an [`AuditEvent`] when
/// writing, and [`crate::store::audit::StoredEvent`] (same fields, same order,
/// read back from the store) when verifying.
pub fn chain_hash<E: Serialize>(prev_hash: &str, seq: i64, at_ms: i64, event: &E) -> String {
    let body = serde_json::to_vec(&Canonical { seq, at_ms, event }).unwrap_or_default();
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(prev_hash.as_bytes());
    ctx.update(b"\n");
    ctx.update(&body);
    crate::ids::hex(ctx.finish().as_ref())
}

/// The keyed link: HMAC-SHA256 under `key` over a domain label, the previous
/// link and the same canonical row as [`chain_hash`].
pub fn chain_mac<E: Serialize>(
    key: &AuditKey,
    prev_hash: &str,
    seq: i64,
    at_ms: i64,
    event: &E,
) -> String {
    let body = serde_json::to_vec(&Canonical { seq, at_ms, event }).unwrap_or_default();
    key.mac(&[b"tsr-audit-v2\n", prev_hash.as_bytes(), b"\n", &body])
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

    #[test]
    fn keyed_links_depend_on_the_key() {
        let ev = AuditEvent::new(CAPABILITY_ISSUED, "run:1", "allow");
        let a = AuditKey::for_tests("ak_a");
        let m = chain_mac(&a, GENESIS_HASH, 1, 10, &ev);
        assert_ne!(m, chain_hash(GENESIS_HASH, 1, 10, &ev));
        assert_eq!(m, chain_mac(&a, GENESIS_HASH, 1, 10, &ev));
        assert_ne!(m, chain_mac(&a, GENESIS_HASH, 2, 10, &ev));
    }
}
