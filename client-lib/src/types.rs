//! Wire types of the Tessera HTTP API (v1), shared by the broker and the client.
//!
//! They live here, in the client crate, so the two sides cannot drift: the broker
//! depends on this crate with default features off and gets only these types.
//! Request types reject unknown fields, so a typo in a field name is a 400 instead
//! of a silently ignored constraint.

pub use crate::error_code::ErrorCode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The task a run is started for.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Task {
    pub id: String,
    pub kind: String,
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
}

/// `POST /v1/runs` body (runtime credential).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRunRequest {
    pub user: String,
    pub task: Task,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
    #[serde(default)]
    pub labels: Vec<String>,
}

/// `POST /v1/runs` response. The run token is shown exactly once.
#[derive(Clone, Serialize, Deserialize)]
pub struct CreateRunResponse {
    pub run_id: String,
    pub run_token: String,
    pub expires_at: String,
}

impl std::fmt::Debug for CreateRunResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateRunResponse")
            .field("run_id", &self.run_id)
            .field("run_token", &"[redacted]")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// `POST /v1/capabilities` body (run token).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapabilityRequest {
    pub action: String,
    pub resource: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
    /// Lapse unless renewed within this long (`POST /v1/capabilities/renew`),
    /// e.g. `15s`: a holder that dies without revoking loses the capability
    /// (leases and downstream users included) soon after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<String>,
    /// Issuing this capability revokes the run's earlier live ones asked for
    /// in the same slot (1-640 printable ASCII characters, no space): for a
    /// helper called again and again for the same grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
}

/// `POST /v1/capabilities` 201 response.
#[derive(Clone, Serialize, Deserialize)]
pub struct CapabilityResponse {
    pub capability_id: String,
    pub token: String,
    pub expires_at: String,
    pub uses: u32,
    /// When the hold lapses unless renewed (only with a hold).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lapses_at: Option<String>,
}

impl std::fmt::Debug for CapabilityResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapabilityResponse")
            .field("capability_id", &self.capability_id)
            .field("token", &"[redacted]")
            .field("expires_at", &self.expires_at)
            .field("uses", &self.uses)
            .field("lapses_at", &self.lapses_at)
            .finish()
    }
}

/// `POST /v1/exchange` body: the capability is the credential.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExchangeRequest {
    pub capability: String,
}

impl std::fmt::Debug for ExchangeRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExchangeRequest { capability: [redacted] }")
    }
}

/// `POST /v1/exchange` 200 response: `kind` names the backend kind, the other
/// fields are the backend's own (for `token`: `token`, `audience`, `token_type`).
#[derive(Clone, Serialize, Deserialize)]
pub struct ExchangeResponse {
    pub kind: String,
    pub lease_id: String,
    pub expires_at: String,
    pub uses_left: u32,
    #[serde(flatten)]
    pub fields: BTreeMap<String, serde_json::Value>,
}

impl std::fmt::Debug for ExchangeResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExchangeResponse")
            .field("kind", &self.kind)
            .field("lease_id", &self.lease_id)
            .field("expires_at", &self.expires_at)
            .field("uses_left", &self.uses_left)
            .field("fields", &"[redacted]")
            .finish()
    }
}

/// `POST /v1/introspect` body.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntrospectRequest {
    pub token: String,
}

impl std::fmt::Debug for IntrospectRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IntrospectRequest { token: [redacted] }")
    }
}

/// `POST /v1/runs/{id}/end` response: what this call revoked (zero on a repeat).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct EndRunResponse {
    pub run_id: String,
    pub revoked: RevokedCounts,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RevokedCounts {
    pub capabilities: u64,
    pub leases: u64,
    pub pending: u64,
}

/// `POST /v1/capabilities/renew` body (run token): the held capabilities to renew.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenewHoldsRequest {
    pub capability_ids: Vec<String>,
}

/// One renewed hold.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RenewedHold {
    pub capability_id: String,
    pub lapses_at: String,
}

/// `POST /v1/capabilities/renew` response. Every asked-for id is in one list:
/// `lapsed` holds those that can no longer be renewed (the hold lapsed, the
/// capability was revoked or expired, was issued without a hold, or is not
/// this run's).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RenewHoldsResponse {
    pub renewed: Vec<RenewedHold>,
    pub lapsed: Vec<String>,
}

/// `POST /v1/capabilities/{id}/revoke` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RevokeCapabilityResponse {
    pub capability_id: String,
    /// False when the capability was already revoked (or its run already ended).
    pub revoked: bool,
}

/// One capability as listed in `GET /v1/runs/{id}` (no token: it is never stored).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CapabilitySummary {
    pub capability_id: String,
    pub action: String,
    pub resource: String,
    pub issued_at: String,
    pub expires_at: String,
    pub uses: u32,
    pub uses_left: u32,
    pub revoked_at: Option<String>,
    pub state: String,
}

/// One downstream lease as listed in `GET /v1/runs/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LeaseSummary {
    pub lease_id: String,
    pub capability_id: String,
    pub backend: String,
    pub kind: String,
    pub created_at: String,
    pub expires_at: String,
    pub revoked_at: Option<String>,
}

/// `GET /v1/runs/{id}` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RunView {
    pub run_id: String,
    pub user: String,
    pub task: Task,
    pub runtime_id: String,
    pub labels: Vec<String>,
    pub created_at: String,
    pub expires_at: String,
    pub ended_at: Option<String>,
    /// `active`, `ended` or `expired`.
    pub state: String,
    pub capabilities: Vec<CapabilitySummary>,
    pub leases: Vec<LeaseSummary>,
}

/// `POST /v1/admin/runtimes` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRuntimeRequest {
    pub name: String,
    /// Comma-separated globs of users the runtime may start runs for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub users: Option<String>,
    /// Comma-separated globs of task kinds the runtime may start runs for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_kinds: Option<String>,
    /// Pins the runtime to one TLS client certificate: SHA-256 (lowercase hex) of
    /// its DER encoding. Its key is then accepted only on connections presenting it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert_sha256: Option<String>,
}

/// `POST /v1/admin/runtimes` response: the key is shown exactly once.
#[derive(Clone, Serialize, Deserialize)]
pub struct CreateRuntimeResponse {
    pub id: String,
    pub name: String,
    pub key: String,
    pub users: String,
    pub task_kinds: String,
}

impl std::fmt::Debug for CreateRuntimeResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateRuntimeResponse")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("key", &"[redacted]")
            .finish()
    }
}

/// One runtime in `GET /v1/admin/runtimes` (no key: only its hash is kept).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Runtime {
    pub id: String,
    pub name: String,
    pub users: String,
    pub task_kinds: String,
    pub client_cert_sha256: Option<String>,
    pub created_at: String,
    pub disabled_at: Option<String>,
}

/// `GET /v1/admin/runtimes` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RuntimeList {
    pub runtimes: Vec<Runtime>,
}

/// One signing key in `GET /v1/admin/keys` (the public half's id only).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct KeyInfo {
    pub kid: String,
    /// `active` signs; `published` is retired but still in the JWKS;
    /// `expired` is no longer published.
    pub state: String,
    pub created_at: String,
    pub retired_at: Option<String>,
    pub publish_until: Option<String>,
}

/// `GET /v1/admin/keys` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct KeyList {
    pub keys: Vec<KeyInfo>,
}

/// One downstream removal not yet confirmed, in `GET /v1/admin/leases`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PendingRevocation {
    pub lease_id: String,
    pub backend: String,
    /// The downstream object to remove (e.g. a database user name).
    pub downstream_ref: String,
    pub run_id: String,
    pub reason: String,
    pub queued_at: String,
    pub attempts: i64,
    pub next_attempt_at: String,
    /// Failed at least three times.
    pub stuck: bool,
    pub last_error: Option<String>,
}

/// `GET /v1/admin/leases` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PendingRevocationList {
    pub revocations: Vec<PendingRevocation>,
}

/// `GET /healthz` and `GET /readyz` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct HealthResponse {
    /// `ok` (the process is up) or `ready` (and its store answers).
    pub status: String,
}

/// `POST /v1/admin/keys/rotate` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RotateKeyResponse {
    pub kid: String,
    pub previous_kid: Option<String>,
    /// Until when the previous key stays published in the JWKS.
    pub previous_published_until: Option<String>,
}

/// `POST /v1/admin/runtimes/{name}/disable` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DisableRuntimeResponse {
    pub name: String,
    /// False when the runtime was already disabled.
    pub disabled: bool,
    /// Runs of this runtime that were still open and are now ended.
    pub runs_ended: u64,
    pub revoked: RevokedCounts,
}

/// One run in `GET /v1/admin/runs`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RunSummary {
    pub run_id: String,
    pub user: String,
    pub task: Task,
    pub runtime: String,
    pub labels: Vec<String>,
    pub created_at: String,
    pub expires_at: String,
    pub ended_at: Option<String>,
    /// `active`, `ended` or `expired`.
    pub state: String,
}

/// `GET /v1/admin/runs` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RunList {
    pub runs: Vec<RunSummary>,
    /// Pass as `after` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// `POST /v1/admin/policy/reload` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PolicyReloadResponse {
    /// Policies now in force.
    pub policies: usize,
    /// SHA-256 over the policy files that were loaded.
    pub sha256: String,
    /// Live capabilities the new policy no longer grants, revoked by this reload.
    #[serde(default)]
    pub revoked: usize,
}

/// Every error the broker returns: `{"error": {"code", "message", "request_id"}}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
    pub request_id: String,
}

/// The claims of a capability token (`typ` `tsr-cap+jwt`): what the broker
/// signs, and what `POST /v1/introspect` returns for a live one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapabilityClaims {
    pub iss: String,
    pub aud: String,
    pub sub: String,
    pub jti: String,
    pub iat: i64,
    pub nbf: i64,
    pub exp: i64,
    pub run: String,
    pub task: String,
    pub rt: String,
    pub act: String,
    pub res: String,
    pub uses: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cnf: Option<serde_json::Value>,
}

/// The claims of an access token from a `token` backend (`typ` `at+jwt`,
/// RFC 9068).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessTokenClaims {
    pub iss: String,
    pub aud: String,
    pub sub: String,
    pub jti: String,
    pub iat: i64,
    pub nbf: i64,
    pub exp: i64,
    pub client_id: String,
    pub scope: String,
    pub resource: String,
    pub act: Actor,
    /// The capability this token was exchanged for.
    pub cap: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Actor {
    pub sub: String,
}

/// `POST /v1/introspect` response: `{"active": false}` for anything that is
/// not a live token this caller may see, or the live token's claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum IntrospectResponse {
    Capability(CapabilityIntrospection),
    AccessToken(AccessTokenIntrospection),
    Inactive(InactiveIntrospection),
}

impl IntrospectResponse {
    pub fn inactive() -> Self {
        IntrospectResponse::Inactive(InactiveIntrospection { active: false })
    }
}

/// A token that is not live (or not this caller's): nothing else is said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InactiveIntrospection {
    pub active: bool,
}

/// A live capability: its claims, and the uses it has left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilityIntrospection {
    pub active: bool,
    /// `capability`.
    pub token_type: String,
    /// Its action.
    pub scope: String,
    pub uses_left: u32,
    #[serde(flatten)]
    pub claims: CapabilityClaims,
}

/// A live access token of a `token` backend: its claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessTokenIntrospection {
    pub active: bool,
    /// `access_token`.
    pub token_type: String,
    #[serde(flatten)]
    pub claims: AccessTokenClaims,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn introspection_answers_read_back_as_what_they_are() {
        let claims = CapabilityClaims {
            iss: "tessera".into(),
            aud: "tessera/capabilities".into(),
            sub: "alice".into(),
            jti: "j".into(),
            iat: 1,
            nbf: 1,
            exp: 2,
            run: "r".into(),
            task: "t".into(),
            rt: "rt".into(),
            act: "read".into(),
            res: "svc:a".into(),
            uses: 3,
            cnf: None,
        };
        let live = IntrospectResponse::Capability(CapabilityIntrospection {
            active: true,
            token_type: "capability".into(),
            scope: "read".into(),
            uses_left: 2,
            claims,
        });
        for answer in [live, IntrospectResponse::inactive()] {
            let json = serde_json::to_string(&answer).unwrap();
            let back: IntrospectResponse = serde_json::from_str(&json).unwrap();
            assert_eq!(back, answer, "{json}");
        }
        assert_eq!(
            serde_json::to_value(IntrospectResponse::inactive()).unwrap(),
            serde_json::json!({ "active": false })
        );
    }
}
