//! Downstream backends: what a capability is exchanged for.
//!
//! Each backend kind implements [`Backend`]. The exchange handler verifies the
//! capability, reserves one use and records the lease in one transaction, and only
//! then asks the backend to [`Backend::issue`] the credential: nothing is minted for
//! a capability the store refuses. A backend failure marks the lease failed.
//!
//! Backends that create state downstream (a database user, …) name it *before*
//! the lease is recorded ([`Backend::downstream_ref`]), so the name is durable
//! before anything exists downstream: whatever happens next (crash, failure,
//! expiry, run end), the revocation outbox (`store::revocations`) knows what to
//! remove and retries [`Backend::revoke`] until it is gone.

pub mod database;
pub mod mysql;
pub mod postgres;
pub mod token;

use crate::capability::CapabilityClaims;
use crate::store::writer::BoxFuture;
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The downstream system could not be reached or refused to issue.
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// The downstream system refused this particular grant (for instance, the
    /// table does not exist); retrying will not help. Never holds a secret.
    #[error("backend refused the grant: {0}")]
    Rejected(String),
}

/// What an exchange is allowed to mint.
pub struct Grant<'a> {
    pub claims: &'a CapabilityClaims,
    /// The lease id; also the downstream credential's own id where it has one.
    pub lease_id: &'a str,
    /// The path part of the resource.
    pub path: &'a str,
    /// What [`Backend::downstream_ref`] chose, already recorded with the lease.
    pub downstream_ref: Option<&'a str>,
    pub now: i64,
}

/// A minted downstream credential: backend-specific response fields.
pub struct Issued {
    pub fields: BTreeMap<String, serde_json::Value>,
    pub expires_at: i64,
}

pub trait Backend: Send + Sync {
    fn kind(&self) -> &'static str;

    /// The name of the downstream object an exchange will create (e.g. a database
    /// user), chosen before the lease is recorded; `None` for backends that leave
    /// nothing downstream to revoke. Never a secret: it is stored and audited.
    fn downstream_ref(&self, _claims: &CapabilityClaims, _lease_id: &str) -> Option<String> {
        None
    }

    /// Mints the credential for one exchange.
    fn issue<'a>(&'a self, grant: Grant<'a>) -> BoxFuture<'a, Result<Issued, BackendError>>;

    /// Removes the downstream objects named by `refs` (as returned by
    /// [`Backend::downstream_ref`]): cuts their sessions and deletes them. Must be
    /// idempotent — an object that is already gone, or was never fully created, is
    /// success — because the outbox retries until it succeeds.
    fn revoke<'a>(&'a self, refs: &'a [String]) -> BoxFuture<'a, Result<(), BackendError>>;
}
