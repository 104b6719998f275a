//! The catalogue of audit events: every `event` value a row can carry.
//!
//! Why a catalogue: a security team writes SIEM rules against these names, so they
//! are part of the interface. Code uses the constants, `docs/audit.md` documents
//! each one, and a test keeps the two in step.

pub const RUN_STARTED: &str = "run.started";
pub const RUN_DENIED: &str = "run.denied";
pub const RUN_ENDED: &str = "run.ended";
pub const RUN_EXPIRED: &str = "run.expired";
pub const CAPABILITY_ISSUED: &str = "capability.issued";
pub const CAPABILITY_DENIED: &str = "capability.denied";
pub const CAPABILITY_RATE_LIMITED: &str = "capability.rate_limited";
pub const CAPABILITY_REVOKED: &str = "capability.revoked";
/// A hold was not renewed in time; the capability was revoked by the broker.
pub const CAPABILITY_LAPSED: &str = "capability.lapsed";
pub const EXCHANGE_SUCCEEDED: &str = "exchange.succeeded";
pub const EXCHANGE_REFUSED: &str = "exchange.refused";
pub const LEASE_FAILED: &str = "lease.failed";
pub const LEASE_REVOKED: &str = "lease.revoked";
pub const LEASE_REVOCATION_FAILED: &str = "lease.revocation_failed";
pub const POLICY_RELOADED: &str = "policy.reloaded";
pub const POLICY_RELOAD_REJECTED: &str = "policy.reload_rejected";
/// A broker's start published its policy files as a new version (a reload's
/// publication is its `policy.reloaded` row).
pub const POLICY_PUBLISHED: &str = "policy.published";
pub const KEY_CREATED: &str = "key.created";
pub const KEY_ROTATED: &str = "key.rotated";
pub const RUNTIME_CREATED: &str = "runtime.created";
pub const RUNTIME_DISABLED: &str = "runtime.disabled";
/// A permit with `@approval` held: an approval was opened for the request.
pub const APPROVAL_REQUESTED: &str = "approval.requested";
/// An approver approved, and the gates are not yet met (`2 of`).
pub const APPROVAL_VOTED: &str = "approval.voted";
pub const APPROVAL_APPROVED: &str = "approval.approved";
pub const APPROVAL_DENIED: &str = "approval.denied";
pub const APPROVAL_EXPIRED: &str = "approval.expired";
pub const APPROVER_CREATED: &str = "approver.created";
pub const APPROVER_REVOKED: &str = "approver.revoked";
/// The egress gateway let a run's tool connect to a destination.
pub const EGRESS_ALLOWED: &str = "egress.allowed";
/// The egress gateway refused a destination (policy, address, SNI, limit).
pub const EGRESS_DENIED: &str = "egress.denied";
/// An egress connection closed: bytes each way, duration, why.
pub const EGRESS_CLOSED: &str = "egress.closed";
/// An injected request decided and sent: method, `BACKEND:/path`, host, rule
/// (the query redacted unless the rule logs it); never the credential.
pub const EGRESS_REQUEST: &str = "egress.request";
/// An injected request's exchange done: status, bytes each way, duration.
pub const EGRESS_RESPONSE: &str = "egress.response";
/// Retention deleted ended runs and what belonged to them (counts in `detail`).
pub const STORE_PRUNED: &str = "store.pruned";
/// An administrator's export of audit rows through a signed checkpoint was
/// recorded (`detail`: the rows, the checkpoint's row, the file's SHA-256).
pub const AUDIT_EXPORTED: &str = "audit.exported";
/// Audit rows up to `through` (an exported, checkpointed row) may be deleted;
/// written before the first of them is, and required by `audit verify`.
pub const AUDIT_PRUNED: &str = "audit.pruned";

/// Every event, for documentation checks and filters.
pub const ALL: &[&str] = &[
    RUN_STARTED,
    RUN_DENIED,
    RUN_ENDED,
    RUN_EXPIRED,
    CAPABILITY_ISSUED,
    CAPABILITY_DENIED,
    CAPABILITY_RATE_LIMITED,
    CAPABILITY_REVOKED,
    CAPABILITY_LAPSED,
    EXCHANGE_SUCCEEDED,
    EXCHANGE_REFUSED,
    LEASE_FAILED,
    LEASE_REVOKED,
    LEASE_REVOCATION_FAILED,
    POLICY_RELOADED,
    POLICY_RELOAD_REJECTED,
    POLICY_PUBLISHED,
    KEY_CREATED,
    KEY_ROTATED,
    RUNTIME_CREATED,
    RUNTIME_DISABLED,
    APPROVAL_REQUESTED,
    APPROVAL_VOTED,
    APPROVAL_APPROVED,
    APPROVAL_DENIED,
    APPROVAL_EXPIRED,
    APPROVER_CREATED,
    APPROVER_REVOKED,
    EGRESS_ALLOWED,
    EGRESS_DENIED,
    EGRESS_CLOSED,
    EGRESS_REQUEST,
    EGRESS_RESPONSE,
    STORE_PRUNED,
    AUDIT_EXPORTED,
    AUDIT_PRUNED,
];

#[cfg(test)]
mod tests {
    #[test]
    fn every_event_is_documented() {
        let doc = include_str!("../../../docs/audit.md");
        for ev in super::ALL {
            assert!(
                doc.contains(&format!("`{ev}`")),
                "docs/audit.md lacks `{ev}`"
            );
        }
    }

    #[test]
    fn code_uses_only_catalogued_events() {
        // Any quoted `word.word` handed to an audit event in src/ must be in ALL.
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
        let mut stack = vec![std::path::PathBuf::from(src)];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs")
                    && !path.ends_with("audit/events.rs")
                {
                    let text = std::fs::read_to_string(&path).unwrap();
                    for needle in ["AuditEvent::new(\"", ".event = \""] {
                        assert!(
                            !text.contains(needle),
                            "{}: use the constants in audit::events",
                            path.display()
                        );
                    }
                }
            }
        }
    }
}
