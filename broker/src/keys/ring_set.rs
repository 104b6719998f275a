//! The key ring: which key signs at a given moment, and which public keys verify.
//!
//! A [`KeySet`] is an immutable snapshot of the signing keys the store holds;
//! the [`KeyRing`] swaps snapshots atomically when this broker rotates or its
//! periodic refresh ([`crate::jobs::keys`]) reads the store.
//!
//! Why a key signs from a moment rather than from when it is read: with
//! several replicas, a rotated-in key is *published* first (it verifies and is
//! in the JWKS everywhere) and starts signing only at its `signs_from`, later
//! than every replica's next refresh. Each snapshot holds the keys that sign
//! now and the ones scheduled to, so every replica switches at that moment
//! without another store read, and no replica ever meets a token whose key it
//! has not loaded. A retired key stays published until every token it could
//! have signed has expired (`publish_until`), then drops out of the JWKS and
//! stops verifying.

use super::signing::{public_jwk, SigningKey};
use std::sync::{Arc, RwLock};
use tessera_client::types::Jwks;

#[derive(Debug, Clone)]
pub struct PublishedKey {
    pub kid: String,
    pub public: [u8; 32],
    /// `None` while the key signs or is scheduled to; otherwise the Unix second
    /// after which tokens signed with it can no longer be valid.
    pub publish_until: Option<i64>,
}

/// A key that signs from `from` (Unix second) until a newer key takes over.
#[derive(Debug, Clone)]
pub struct Signer {
    pub key: Arc<SigningKey>,
    pub from: i64,
}

#[derive(Debug)]
pub struct KeySet {
    /// Keys that sign now or are scheduled to, oldest `from` first; never empty.
    signers: Vec<Signer>,
    pub published: Vec<PublishedKey>,
}

impl KeySet {
    /// A set from its signers (any order; at least one) and published keys.
    pub fn new(mut signers: Vec<Signer>, published: Vec<PublishedKey>) -> Self {
        assert!(!signers.is_empty(), "a key set has a signing key");
        signers.sort_by(|a, b| (a.from, a.key.kid()).cmp(&(b.from, b.key.kid())));
        KeySet { signers, published }
    }

    /// The key that signs at `now`: the newest whose time has come (the
    /// oldest, should the clock run behind every key's start).
    pub fn signer(&self, now: i64) -> &Arc<SigningKey> {
        let due = self.signers.iter().rev().find(|s| s.from <= now);
        &due.unwrap_or(&self.signers[0]).key
    }

    /// The next key scheduled to sign after `now`, and from when.
    pub fn next_signer(&self, now: i64) -> Option<(&str, i64)> {
        self.signers
            .iter()
            .find(|s| s.from > now)
            .map(|s| (s.key.kid(), s.from))
    }

    /// The public key for `kid`, if it verifies at `now`.
    pub fn verifying_key(&self, kid: &str, now: i64) -> Option<&[u8; 32]> {
        self.published
            .iter()
            .find(|k| k.kid == kid && k.publish_until.is_none_or(|until| now <= until))
            .map(|k| &k.public)
    }

    /// The JWKS document at `now`: scheduled keys included, so verifiers
    /// elsewhere know a key before it signs.
    pub fn jwks(&self, now: i64) -> Jwks {
        let keys: Vec<_> = self
            .published
            .iter()
            .filter(|k| k.publish_until.is_none_or(|until| now <= until))
            .map(|k| public_jwk(&k.kid, &k.public))
            .collect();
        Jwks { keys }
    }
}

pub struct KeyRing {
    current: RwLock<Arc<KeySet>>,
    /// When the current set was read from the store.
    loaded: std::sync::Mutex<std::time::Instant>,
}

impl KeyRing {
    pub fn new(set: KeySet) -> Self {
        Self {
            current: RwLock::new(Arc::new(set)),
            loaded: std::sync::Mutex::new(std::time::Instant::now()),
        }
    }

    /// How long ago the current set was read from the store: past the
    /// pre-publication, a key rotated elsewhere may sign before it is known
    /// here (readiness says `keys_stale`).
    pub fn age(&self) -> std::time::Duration {
        self.loaded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    pub fn snapshot(&self) -> Arc<KeySet> {
        match self.current.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Swaps in a set just read from the store.
    pub fn replace(&self, set: KeySet) {
        let mut g = match self.current.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        *g = Arc::new(set);
        *self.loaded.lock().unwrap_or_else(|p| p.into_inner()) = std::time::Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer(from: i64) -> Signer {
        Signer {
            key: Arc::new(SigningKey::generate().0),
            from,
        }
    }

    #[test]
    fn the_newest_key_whose_time_has_come_signs() {
        let (a, b, c) = (signer(0), signer(100), signer(200));
        let kids = [a.key.kid(), b.key.kid(), c.key.kid()].map(str::to_owned);
        let set = KeySet::new(vec![c, a, b], Vec::new());
        assert_eq!(set.signer(-5).kid(), kids[0], "clock behind every key");
        assert_eq!(set.signer(99).kid(), kids[0]);
        assert_eq!(set.signer(100).kid(), kids[1]);
        assert_eq!(set.signer(250).kid(), kids[2]);
        assert_eq!(set.next_signer(99), Some((kids[1].as_str(), 100)));
        assert_eq!(set.next_signer(200), None);
    }
}
