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

pub mod aws;
pub mod database;
pub mod grammar;
pub mod http;
pub mod mysql;
pub mod net;
pub mod oauth;
pub mod postgres;
pub mod references;
pub mod secret;
pub mod settings;
pub mod strict;
pub mod token;

use crate::boxed::BoxFuture;
use crate::capability::CapabilityClaims;
use std::collections::BTreeMap;
use tessera_client::types::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The downstream system could not be reached or failed.
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// The downstream system refused this particular grant (for instance, the
    /// table does not exist); retrying will not help. Never holds a secret.
    #[error("backend refused the grant: {0}")]
    Rejected(String),
    /// The downstream system is throttling the broker (after the backend's own retries).
    #[error("backend throttled: {0}")]
    Throttled(String),
    /// The downstream system refused to issue (the broker's credentials, the
    /// role's trust policy, …): an operator must fix the configuration.
    #[error("backend refused: {0}")]
    Refused(String),
    /// A removal in which only some objects could not be removed: each failed
    /// ref with why (never a secret). The others are gone.
    #[error("{} of the batch could not be removed", failed.len())]
    Partial { failed: Vec<(String, String)> },
    /// This capability cannot be expressed downstream (e.g. a policy over the
    /// downstream's size limit). `message` is safe to show the caller.
    #[error("{message}")]
    Unsupported { code: ErrorCode, message: String },
    /// Strict mode: the server has these findings ([`Finding::id`]); nothing is
    /// issued until an operator fixes them (`tessera backends check NAME`).
    #[error("unsafe server defaults: {}", .0.join(", "))]
    UnsafeDefaults(Vec<&'static str>),
}

/// A downstream server default that lets a credential do more than its grant,
/// with the exact statement an operator runs to close it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    pub id: &'static str,
    pub what: String,
    pub fix: String,
    /// Whether strict mode refuses to issue while this is found (false for
    /// what the server may show for a moment in normal use).
    pub strict: bool,
}

/// One lease whose downstream objects must go, with why.
pub struct Revocation<'a> {
    pub downstream_ref: &'a str,
    pub run_id: &'a str,
    /// `run_ended`, `run_expired`, `capability_revoked`, `lease_expired`, `issue_failed`.
    pub reason: &'a str,
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
    /// The configuration's `kind` (also the Cedar `resource.kind` and the lease's).
    fn kind(&self) -> &'static str;

    /// The `kind` of the credential in the exchange response (DESIGN §12: `aws`,
    /// `postgres`, `mysql`, `token`); the configuration's kind unless it differs.
    fn credential_kind(&self) -> &'static str {
        self.kind()
    }

    /// The name of the downstream object an exchange will create (e.g. a database
    /// user), chosen before the lease is recorded; `None` for backends that leave
    /// nothing downstream to revoke. Never a secret: it is stored and audited.
    fn downstream_ref(&self, _claims: &CapabilityClaims, _lease_id: &str) -> Option<String> {
        None
    }

    /// What about the downstream server lets a credential do more than its
    /// grant (`tessera backends check`, a warning at start); none by default.
    fn unsafe_defaults(&self) -> BoxFuture<'_, Result<Vec<Finding>, BackendError>> {
        Box::pin(async { Ok(vec![]) })
    }

    /// Whether the downstream server answers now (a connection and a trivial
    /// query), for backends that can tell cheaply: the revocation worker asks
    /// while removals wait out a backoff, and retries them at once when the
    /// answer turns to yes. `None`: this backend cannot tell; its backoff runs.
    fn ping(&self) -> BoxFuture<'_, Option<Result<(), BackendError>>> {
        Box::pin(async { None })
    }

    /// Mints the credential for one exchange.
    fn issue<'a>(&'a self, grant: Grant<'a>) -> BoxFuture<'a, Result<Issued, BackendError>>;

    /// Removes the downstream objects named by `refs` (as returned by
    /// [`Backend::downstream_ref`]): cuts their sessions and deletes them. Must be
    /// idempotent — an object that is already gone, or was never fully created, is
    /// success — because the outbox retries until it succeeds. When only some
    /// fail, [`BackendError::Partial`] names them: the others count as removed.
    fn revoke<'a>(&'a self, refs: &'a [String]) -> BoxFuture<'a, Result<(), BackendError>>;

    /// What the revocation worker calls: like [`Backend::revoke`], with the run and
    /// the reason of each lease, for backends whose removal depends on them
    /// (`aws-sts` only acts when a run ends). Same idempotence contract.
    fn revoke_leases<'a>(
        &'a self,
        leases: &'a [Revocation<'a>],
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(async move {
            let refs: Vec<String> = leases.iter().map(|l| l.downstream_ref.to_owned()).collect();
            self.revoke(&refs).await
        })
    }
}
