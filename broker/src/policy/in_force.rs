//! The policy in force in this process: the compiled engine, which published
//! version it is, the seal that checks published versions, and the lock that
//! serialises reloads — one value the application holds.
//!
//! Why one type: the four change together (a reload swaps the engine, then
//! records the version it published, under the lock; the policy sync checks a
//! version's seal before adopting it), and kept as four fields of the
//! application state they were four things every caller had to keep in step.
//! Publishing (`crate::policy_versions`) and reloading (`crate::policy_reload`)
//! are operations on the application; this is only the state they change.
//!
//! A request takes [`PolicyInForce::engine`] once and holds that snapshot for
//! its whole life: a swap never changes a decision half-way.

use crate::keys::Kek;
use crate::policy::PolicyEngine;
use crate::store::policy_versions::{self as stored, VersionRow};
use ring::hmac;
use std::sync::{Arc, RwLock};

/// The version this replica enforces (0 before the first publication).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InForce {
    pub version: i64,
    pub sha256: String,
}

/// Seals and checks published versions.
pub struct PolicySeal(hmac::Key);

impl std::fmt::Debug for PolicySeal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PolicySeal([redacted])")
    }
}

impl PolicySeal {
    pub fn new(kek: &Kek) -> Self {
        let key = kek.derive("tessera policy versions v1");
        PolicySeal(hmac::Key::new(hmac::HMAC_SHA256, &key[..]))
    }

    fn message(row: &VersionRow) -> Vec<u8> {
        let mut m = Vec::with_capacity(row.sources.len() + 128);
        m.extend_from_slice(&row.version.to_be_bytes());
        m.extend_from_slice(&row.published_at.to_be_bytes());
        for part in [&row.sha256, &row.trigger, &row.replica, &row.sources] {
            m.extend_from_slice(&(part.len() as u64).to_be_bytes());
            m.extend_from_slice(part.as_bytes());
        }
        m
    }
}

impl stored::Seal for PolicySeal {
    fn seal(&self, row: &VersionRow) -> String {
        crate::ids::hex(hmac::sign(&self.0, &Self::message(row)).as_ref())
    }

    /// True when `row` was published by a broker holding this KEK, unaltered.
    fn verifies(&self, row: &VersionRow) -> bool {
        crate::ids::unhex(&row.mac)
            .is_some_and(|tag| hmac::verify(&self.0, &Self::message(row), &tag).is_ok())
    }
}

/// The engine, its published version, the seal and the reload lock.
pub struct PolicyInForce {
    engine: RwLock<Arc<PolicyEngine>>,
    version: RwLock<InForce>,
    seal: Arc<PolicySeal>,
    reload: tokio::sync::Mutex<()>,
}

impl PolicyInForce {
    /// `engine` in force, unpublished (version 0) until the start publishes it.
    pub fn new(engine: PolicyEngine, kek: &Kek) -> PolicyInForce {
        PolicyInForce {
            engine: RwLock::new(Arc::new(engine)),
            version: RwLock::new(InForce::default()),
            seal: Arc::new(PolicySeal::new(kek)),
            reload: tokio::sync::Mutex::new(()),
        }
    }

    /// The policy set in force; requests hold their snapshot for their whole life.
    pub fn engine(&self) -> Arc<PolicyEngine> {
        match self.engine.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Swaps in a new, already validated policy set atomically.
    pub fn replace_engine(&self, engine: PolicyEngine) {
        let mut g = match self.engine.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        *g = Arc::new(engine);
    }

    /// The published version in force here.
    pub fn version(&self) -> InForce {
        match self.version.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    pub fn set_version(&self, v: InForce) {
        match self.version.write() {
            Ok(mut g) => *g = v,
            Err(p) => *p.into_inner() = v,
        }
    }

    /// Seals and checks published policy versions (a key derived from the KEK).
    pub fn seal(&self) -> &Arc<PolicySeal> {
        &self.seal
    }

    /// Held for a whole reload or version switch: two at once cannot interleave.
    pub fn reload_lock(&self) -> &tokio::sync::Mutex<()> {
        &self.reload
    }
}
