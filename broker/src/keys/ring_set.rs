//! The key ring: which key signs now, and which public keys verify.
//!
//! A [`KeySet`] is an immutable snapshot (active key + published public keys);
//! the [`KeyRing`] swaps snapshots atomically when a key is rotated or the store
//! shows another replica rotated. A retired key stays published until every token
//! it signed has expired (`publish_until`), then drops out of the JWKS and stops
//! verifying.

use super::signing::{public_jwk, SigningKey};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use tessera_client::types::Jwks;

#[derive(Debug, Clone)]
pub struct PublishedKey {
    pub kid: String,
    pub public: [u8; 32],
    /// `None` for the active key; otherwise the Unix second after which tokens
    /// signed with it can no longer be valid.
    pub publish_until: Option<i64>,
}

#[derive(Debug)]
pub struct KeySet {
    pub active: Arc<SigningKey>,
    pub published: Vec<PublishedKey>,
}

impl KeySet {
    /// The public key for `kid`, if it verifies at `now`.
    pub fn verifying_key(&self, kid: &str, now: i64) -> Option<&[u8; 32]> {
        self.published
            .iter()
            .find(|k| k.kid == kid && k.publish_until.is_none_or(|until| now <= until))
            .map(|k| &k.public)
    }

    /// The JWKS document at `now`.
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
    /// When an on-demand reload (for an unknown kid) last started, Unix ms.
    last_reload_ms: AtomicI64,
}

/// Least time between two on-demand reloads.
const RELOAD_INTERVAL_MS: i64 = 5_000;

impl KeyRing {
    pub fn new(set: KeySet) -> Self {
        Self {
            current: RwLock::new(Arc::new(set)),
            last_reload_ms: AtomicI64::new(i64::MIN / 2),
        }
    }

    /// Claims the right to reload now; false if a reload started less than
    /// [`RELOAD_INTERVAL_MS`] ago (so forged kids cannot drive store reads).
    pub fn try_begin_reload(&self, now_ms: i64) -> bool {
        let last = self.last_reload_ms.load(Ordering::Relaxed);
        now_ms - last >= RELOAD_INTERVAL_MS
            && self
                .last_reload_ms
                .compare_exchange(last, now_ms, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    pub fn snapshot(&self) -> Arc<KeySet> {
        match self.current.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub fn replace(&self, set: KeySet) {
        let mut g = match self.current.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        *g = Arc::new(set);
    }
}
