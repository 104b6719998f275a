//! Every error code the broker returns: one enum, shared by the broker (which
//! builds every error from it), the client library (which maps codes to its
//! error variants) and the tests.
//!
//! Why an enum and not strings: a code is part of the wire contract. Written
//! as literals in handlers, the store, the client and the OpenAPI document,
//! the copies drifted; here a code that is emitted is a variant, and the
//! OpenAPI document is checked against [`ErrorCode::ALL`]. Clients keep the
//! code of a body as a string (`ErrorDetail::code`): a newer broker may add
//! codes, and [`ErrorCode::parse`] says which ones this library knows.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! codes {
    ($($(#[doc = $doc:literal])+ $variant:ident = $text:literal,)*) => {
        /// A stable, machine-readable error code (`{"error": {"code": …}}`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ErrorCode {
            $($(#[doc = $doc])+ $variant,)*
        }

        impl ErrorCode {
            /// Every code, in documentation order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The code as it is on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $text,)*
                }
            }

            /// The code named `text`, if this library knows it.
            pub fn parse(text: &str) -> Option<ErrorCode> {
                match text {
                    $($text => Some(ErrorCode::$variant),)*
                    _ => None,
                }
            }

            /// What it means (the variant's documentation, for generated docs).
            pub const fn meaning(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => concat!($($doc, "\n"),+),)*
                }
            }
        }
    };
}

codes! {
    /// (400) The body is well-formed JSON but does not match the request type: a missing or wrongly typed field, or an unknown field (request types reject unknown fields).
    InvalidRequest = "invalid_request",
    /// (400) `hold` is not a duration between 2s and 3600s.
    InvalidHold = "invalid_hold",
    /// (400) `slot` is not 1-640 printable ASCII characters without spaces.
    InvalidSlot = "invalid_slot",
    /// (400) The request body is not valid JSON.
    InvalidJson = "invalid_json",
    /// (400) `user` is not 1-128 of `[A-Za-z0-9._@+-]`.
    InvalidUser = "invalid_user",
    /// (400) `task.id` is not 1-128 of `[A-Za-z0-9._:-]`, `task.kind` is not 1-64 of `[a-z0-9._:-]`, or `task.attributes` has more than 32 entries, a key that is not 1-64 of `[A-Za-z0-9._-]`, or a value longer than 256 bytes or containing control characters.
    InvalidTask = "invalid_task",
    /// (400) More than 32 labels, or a label that is not 1-64 of `[a-z0-9._:-]`.
    InvalidLabels = "invalid_labels",
    /// (400) `ttl` is not a valid duration, or (for runs) exceeds the server's maximum run ttl.
    InvalidTtl = "invalid_ttl",
    /// (400) `action` is not 1-64 printable ASCII characters, or is not valid for the resource's backend kind (or not in the backend's configured action list).
    InvalidAction = "invalid_action",
    /// (400) `resource` is not `BACKEND:PATH` (at most 512 bytes, backend name 1-63 of `[a-z0-9-]` starting with a letter), or its path contains characters or segments not allowed for the backend kind, or is not in its one spelling: an empty, `.` or `..` segment or `**` (in `token` paths and ARN resource parts), upper case in a `mysql` database or table name.
    InvalidResource = "invalid_resource",
    /// (400/403) The resource names a backend that is not configured (400 on `POST /v1/capabilities`); or the capability's backend is no longer configured (403 on `POST /v1/exchange`; a live capability is revoked and refused with `policy_changed` instead).
    UnknownBackend = "unknown_backend",
    /// (400) The action is not declared in the policy schema.
    UnknownAction = "unknown_action",
    /// (400) Runtime name is not 1-63 of `[a-z0-9._-]` starting with a letter or digit.
    InvalidName = "invalid_name",
    /// (400) `users` or `task_kinds` is not a comma-separated list of globs of `[A-Za-z0-9._@+:-]` and `*`.
    InvalidScope = "invalid_scope",
    /// (401) Missing, malformed or unknown bearer credential (runtime key, run token or admin token). The message never says which part was wrong.
    Unauthenticated = "unauthenticated",
    /// (401) The capability presented to `/v1/exchange` is not valid: bad signature, unknown key, wrong `typ`, issuer or audience, not yet valid, malformed, unknown to the store, or claims that differ from what the store recorded at issuance.
    InvalidToken = "invalid_token",
    /// (401) The capability presented to `/v1/exchange` has expired.
    TokenExpired = "token_expired",
    /// (403) Policy denied the capability request (no permit, or a forbid). The sandbox never learns which policy said no.
    CapabilityDenied = "capability_denied",
    /// (403) The resource has a wildcard, and a forbid could hold for some resource it names; ask for a narrower or concrete resource.
    WildcardOverlapsForbid = "wildcard_overlaps_forbid",
    /// (403) The resource has a wildcard, and a permit that requires approval could hold for some resource it names; ask for a concrete resource.
    WildcardOverlapsApproval = "wildcard_overlaps_approval",
    /// (403) The resource has a wildcard, and no permit holds for every resource it names (permits hold for part of the set only, or a database `*` that no permit names explicitly); ask for a narrower or concrete resource.
    WildcardNotCovered = "wildcard_not_covered",
    /// (403) At `/v1/exchange`: the policy in force would no longer issue this capability (denied, approval now required, or a shorter ttl or fewer uses than it holds); it has been revoked with its leases.
    PolicyChanged = "policy_changed",
    /// (409) `approval_id` names an approval that is still pending: wait for it (`GET /v1/approvals/{id}?wait=30s`).
    ApprovalPending = "approval_pending",
    /// (403) `approval_id` names an approval that an approver or an administrator denied.
    ApprovalDenied = "approval_denied",
    /// (403) `approval_id` names an approval that expired (nobody decided in time, or it was not redeemed in time) or was cancelled when its run ended.
    ApprovalExpired = "approval_expired",
    /// (403) `approval_id` names an approval for another run, action, resource or arguments, or one that another policy now gates: ask again without it for a new approval.
    ApprovalMismatch = "approval_mismatch",
    /// (409) `approval_id` names an approval whose capability was already issued: an approval is redeemed once.
    ApprovalRedeemed = "approval_redeemed",
    /// (404) No approval with that id that this caller may see.
    UnknownApproval = "unknown_approval",
    /// (403) Four-eyes: an approver cannot approve a request made for their own user.
    SelfApproval = "self_approval",
    /// (403) This approver is not one the approval's rule names (not in the group, not the user).
    NotAnApprover = "not_an_approver",
    /// (409) The approval is no longer pending (approved, denied, expired or cancelled).
    ApprovalDecided = "approval_decided",
    /// (409) This approver's user has already approved it; `2 of` needs another person.
    AlreadyVoted = "already_voted",
    /// (400) `arguments` is not a JSON object, has a fraction or an integer beyond 2^53, is larger than 16 KiB or deeper than 16 levels, or does not match what the policy schema declares for this action's `context.arguments`.
    InvalidArguments = "invalid_arguments",
    /// (409) An approver with this name exists.
    ApproverExists = "approver_exists",
    /// (404) No approver with that id.
    UnknownApprover = "unknown_approver",
    /// (403) The run has been ended; nothing more is issued or exchanged for it.
    RunEnded = "run_ended",
    /// (403) The run has expired.
    RunExpired = "run_expired",
    /// (403) The runtime may not start runs for that user or task kind.
    RuntimeScope = "runtime_scope",
    /// (403) The capability has been revoked.
    CapabilityRevoked = "capability_revoked",
    /// (403) The capability has no uses left.
    UsesExhausted = "uses_exhausted",
    /// (404) The run, capability or route does not exist or is not visible to the caller (another runtime's run is a 404, not a 403, so ids cannot be probed).
    NotFound = "not_found",
    /// (405) The route exists but not with this method.
    MethodNotAllowed = "method_not_allowed",
    /// (409) The record already exists (e.g. a runtime with this name).
    Conflict = "conflict",
    /// (413) The request body exceeds 64 KiB.
    BodyTooLarge = "body_too_large",
    /// (415) A JSON body was sent without `Content-Type: application/json`.
    UnsupportedMediaType = "unsupported_media_type",
    /// (429) A rate limit (the server-wide per-run limit or a policy `@rate`) was exceeded; retry after the number of seconds in the `Retry-After` header.
    RateLimited = "rate_limited",
    /// (500) Internal error; details are in the broker log under the request id.
    Internal = "internal",
    /// (503) The broker's store cannot be reached; the broker fails closed and nothing was issued.
    StoreUnavailable = "store_unavailable",
    /// (503) The downstream backend could not issue a credential.
    BackendUnavailable = "backend_unavailable",
    /// (503) A database backend in strict mode found server defaults that would let a credential do more than its grant (`tessera backends check NAME`); nothing was created downstream, and the next exchange after an operator's fix succeeds.
    BackendUnsafeDefaults = "backend_unsafe_defaults",
    /// (401) the broker requires a verified TLS client certificate for runtime keys and none was presented.
    ClientCertificateRequired = "client_certificate_required",
    /// (401) the runtime key is pinned to another client certificate.
    ClientCertificateMismatch = "client_certificate_mismatch",
    /// (400) `client_cert_sha256` is not 64 lowercase hex characters.
    InvalidCertificatePin = "invalid_certificate_pin",
    /// (400) A query parameter is unknown, malformed or out of range.
    InvalidQuery = "invalid_query",
    /// (422) A policy reload found an invalid policy set; the message lists every error as file:line:col and the previous set stays in force.
    InvalidPolicy = "invalid_policy",
    /// (422) The downstream backend refused this particular grant (for a database backend: the table, schema or database does not exist); retrying will not help.
    BackendRejected = "backend_rejected",
    /// (403) The capability or its run was revoked while the credential was being created; the credential is removed.
    LeaseRevoked = "lease_revoked",
    /// (403) The capability was asked for with a hold that was not renewed in time; the broker revokes it, its leases and their downstream objects.
    CapabilityLapsed = "capability_lapsed",
    /// (503) The downstream backend is throttling the broker; retry after the seconds in `Retry-After`.
    BackendThrottled = "backend_throttled",
    /// (502) The downstream backend refused to issue for a reason an operator must fix (the broker's own credentials or configuration); the downstream message is logged and audited, never returned.
    BackendRefused = "backend_refused",
    /// (400) At `/v1/exchange` on `aws-sts`: the session policy for this capability would exceed what STS accepts.
    SessionPolicyTooLarge = "session_policy_too_large",
    /// (400) At `/v1/exchange` on `aws-sts`: the run's user cannot be expressed as an STS session name or tag.
    UserNotAwsCompatible = "user_not_aws_compatible",
    /// (400) At `/v1/exchange` on `aws-sts`: the run's task cannot be expressed as STS session tags.
    RunNotAwsCompatible = "run_not_aws_compatible",
    /// (400/401) A `DPoP` proof is malformed, signed by another key than the one its token is bound to, for another method or URL, outside its one-minute `iat` window, over another token (`ath`), replayed, or missing where the token is bound to a key (RFC 9449).
    InvalidDpopProof = "invalid_dpop_proof",
    /// (400/401) The broker requires DPoP proofs to carry its nonce (`[oauth] dpop_nonce`): retry once with the value of the `DPoP-Nonce` response header as the proof's `nonce`.
    UseDpopNonce = "use_dpop_nonce",
    /// (421) The `Host` header names no host this broker answers for (`http.allowed_hosts`; a loopback broker answers only loopback names).
    HostNotAllowed = "host_not_allowed",
    /// (503) The request took longer than `http.request_timeout`; the connection is closed.
    RequestTimeout = "request_timeout",
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        ErrorCode::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown error code {text:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorCode;

    #[test]
    fn every_code_round_trips_and_is_spelled_once() {
        let mut seen = std::collections::BTreeSet::new();
        for code in ErrorCode::ALL {
            assert!(seen.insert(code.as_str()), "{code} twice");
            assert_eq!(ErrorCode::parse(code.as_str()), Some(*code));
            let json = serde_json::to_string(code).unwrap();
            assert_eq!(serde_json::from_str::<ErrorCode>(&json).unwrap(), *code);
            assert!(!code.meaning().trim().is_empty());
            assert!(code
                .as_str()
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_'));
        }
        assert_eq!(ErrorCode::parse("no_such_code"), None);
    }
}
