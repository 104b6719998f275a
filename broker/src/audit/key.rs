//! The audit key: what makes the chain a MAC chain rather than a plain hash
//! chain. Generated once per deployment, stored only sealed by the KEK (the
//! AEAD's associated data binds it to its id and creation time), and installed
//! in the store's writer before any row is written ([`super::key_store`] loads
//! and creates it; this file is only the key, so the writer can hold one
//! without importing the store's own tables back).
//!
//! Why keyed: an unkeyed SHA-256 chain whose only anchor lives in the same
//! database can be rewritten by whoever can write that database — edit a row,
//! recompute every later hash, move the head. With a key the database owner
//! does not have, no row can be changed, added or removed without breaking the
//! chain at that row.

use ring::hmac;

/// One audit key, ready to compute links.
pub struct AuditKey {
    pub id: String,
    /// Unix seconds.
    pub created_at: i64,
    /// Rows up to this sequence number were written before the key existed
    /// and may be unkeyed; any later unkeyed row is a downgrade.
    pub unkeyed_until_seq: i64,
    pub(super) key: hmac::Key,
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
