//! Downstream backends: what a capability is exchanged for.
//!
//! Each backend kind implements [`Backend`]. The exchange handler verifies the
//! capability, reserves one use and records the lease in one transaction, and only
//! then asks the backend to [`Backend::issue`] the credential: nothing is minted for
//! a capability the store refuses. A backend failure marks the lease failed.
//! [`Backend::revoke`] revokes a live lease downstream (run end, capability revoke,
//! expiry); the database and AWS kinds, which hold real downstream state, plug in
//! here with a durable revocation outbox.

pub mod token;

use crate::capability::CapabilityClaims;
use crate::store::writer::BoxFuture;
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The downstream system could not be reached or refused to issue.
    #[error("backend unavailable: {0}")]
    Unavailable(String),
}

/// What an exchange is allowed to mint.
pub struct Grant<'a> {
    pub claims: &'a CapabilityClaims,
    /// The lease id; also the downstream credential's own id where it has one.
    pub lease_id: &'a str,
    /// The path part of the resource.
    pub path: &'a str,
    pub now: i64,
}

/// A minted downstream credential: backend-specific response fields.
pub struct Issued {
    pub fields: BTreeMap<String, serde_json::Value>,
    pub expires_at: i64,
}

pub trait Backend: Send + Sync {
    fn kind(&self) -> &'static str;
    fn issue<'a>(&'a self, grant: Grant<'a>) -> BoxFuture<'a, Result<Issued, BackendError>>;
    fn revoke<'a>(&'a self, lease_id: &'a str) -> BoxFuture<'a, Result<(), BackendError>>;
}
