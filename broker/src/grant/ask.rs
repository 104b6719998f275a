//! What a door asks the decision layer ([`Ask`]) and what it is told when
//! policy allows ([`Decided`]).
//!
//! Why its own file: deciding (`decide.rs`) records refusals through
//! `record.rs`, and recording a permit takes what was decided; with these
//! types in either file the two would import each other.

use super::Door;
use crate::audit::AuditEvent;
use crate::policy::Constraints;
use crate::store::runs::RunRecord;
use std::sync::Arc;
use std::time::Duration;

/// What a door asks for, on behalf of `run`.
pub struct Ask<'a> {
    pub door: Door,
    pub run: &'a Arc<RunRecord>,
    pub action: &'a str,
    pub resource: &'a str,
    /// The lifetime asked for (a capability's `ttl`), which policy may read.
    pub requested_ttl: Option<Duration>,
    /// What policy reads as `context.arguments`.
    pub arguments: Option<&'a serde_json::Value>,
    pub request_id: Option<String>,
    /// What the door adds to its decision's audit row (`host=… rule=…`).
    pub detail: Option<String>,
    /// The door's own rule that a policy denial ends the run
    /// (`gateway.end_run_on_deny`); a forbid's `@on_deny("end_run")` ends it
    /// at the gateway's doors whatever this says.
    pub end_run_on_deny: bool,
}

/// A request policy allows, before the approval gate.
pub struct Decided {
    pub door: Door,
    pub run: Arc<RunRecord>,
    /// The backend the resource names.
    pub backend: String,
    /// The satisfied permits, sorted.
    pub policies: Vec<String>,
    pub constraints: Constraints,
    /// The decision's audit row (the door's allowed event); the door
    /// completes its detail before it is recorded.
    pub audit: AuditEvent,
    pub now: i64,
}
