//! Wire types of the Tessera HTTP API (v1), shared by the broker and the client.
//!
//! They live here, in the client crate, so the two sides cannot drift: the broker
//! depends on this crate with default features off and gets only these types.
//! Request types reject unknown fields, so a typo in a field name is a 400 instead
//! of a silently ignored constraint.

pub use crate::approval_types::*;
pub use crate::error_code::ErrorCode;
pub use crate::id::Id;
pub use crate::oauth_types::*;
#[cfg(feature = "openapi")]
pub use crate::schema::DurationSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The task a run is started for.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Task {
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[A-Za-z0-9._:-]{1,128}$", min_length = 1, max_length = 128)
    )]
    pub id: String,
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[a-z0-9._:-]{1,64}$", min_length = 1, max_length = 64)
    )]
    pub kind: String,
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
}

/// `POST /v1/runs` body (runtime credential).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateRunRequest {
    /// The user the run acts for.
    #[cfg_attr(
        feature = "openapi",
        schema(
            pattern = "^[A-Za-z0-9._@+-]{1,128}$",
            min_length = 1,
            max_length = 128
        )
    )]
    pub user: String,
    pub task: Task,
    /// Run lifetime; defaults to the server's default run ttl; at most the server's maximum run ttl. `null` is the same as leaving it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<DurationSchema>))]
    pub ttl: Option<String>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 32))]
    pub labels: Vec<String>,
}

/// `POST /v1/runs` response. The run token is shown exactly once.
#[derive(Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreateRunResponse {
    pub run_id: Id,
    /// The run token, shown exactly once.
    #[cfg_attr(feature = "openapi", schema(pattern = "^tsr_run_[A-Za-z0-9_-]{43}$"))]
    pub run_token: String,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CapabilityRequest {
    /// Printable ASCII; must be valid for the backend kind (for `token` backends: 1-64 of `[a-z0-9_.-]` starting with a letter) and declared in the policy schema.
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 64, example = "read")
    )]
    pub action: String,
    /// `BACKEND:PATH`. For `token` backends the path is 1-256 of `[A-Za-z0-9._~/@+=-]` plus `*`, with no empty, `.` or `..` segment and no `**`. A path with a wildcard (`*` for every kind, for databases only as the whole table part; `?` in `aws-sts` ARNs) names a set of resources.
    #[cfg_attr(
        feature = "openapi",
        schema(
            pattern = "^[a-z][a-z0-9-]{0,62}:.+$",
            max_length = 512,
            example = "svc-reports:reports/q1"
        )
    )]
    pub resource: String,
    /// Requested lifetime; the effective ttl is the minimum of this, the policy's `@ttl` (or the server default), the server maximum and the run's remaining lifetime. `null` is the same as leaving it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<DurationSchema>))]
    pub ttl: Option<String>,
    /// Lapse unless renewed (`POST /v1/capabilities/renew`) within this long, 2s to 3600s. A lapsed capability is refused at once (`capability_lapsed`) and revoked by the broker's sweeper with its leases and their downstream objects: what a holder that may be killed before it can revoke (`tessera exec`) asks for. `null` is the same as leaving it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<DurationSchema>))]
    pub hold: Option<String>,
    /// Issuing this capability revokes (reason `superseded`, one `capability.revoked` row each) the run's earlier live capabilities asked for in the same slot, in the same transaction: a helper called again and again for the same grant (`tessera credential-process`) keeps one live capability, not one per call. `null` is the same as leaving it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[!-~]+$", min_length = 1, max_length = 640)
    )]
    pub slot: Option<String>,
    /// What exactly will be done, as a JSON object (for a deploy: service, commit, environment). Canonicalised (RFC 8785) and hashed: the capability carries the hash as claim `args`, an approver sees the arguments in full, and the policy sees them as `context.arguments` (typed by the schema of the action). Numbers must be integers of magnitude below 2^53; no member may appear twice in one object; at most 16 KiB in canonical form, 16 levels deep. `null` is the same as leaving it out.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::arguments::deserialize_unique"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub arguments: Option<serde_json::Value>,
    /// Redeem this approval (from an earlier 202): the request must be the same run, action, resource and arguments. `null` is the same as leaving it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<Id>,
}

impl CapabilityRequest {
    /// A request for `action` on `resource` with nothing else asked.
    pub fn new(action: impl Into<String>, resource: impl Into<String>) -> Self {
        CapabilityRequest {
            action: action.into(),
            resource: resource.into(),
            ttl: None,
            hold: None,
            slot: None,
            arguments: None,
            approval_id: None,
        }
    }
}

/// `POST /v1/capabilities` 201 response.
#[derive(Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CapabilityResponse {
    /// The capability's `jti`.
    pub capability_id: Id,
    /// The capability: a compact JWS (EdDSA, `typ` `tsr-cap+jwt`) with the claims of `CapabilityClaims`.
    pub token: String,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub expires_at: String,
    /// How many exchanges it allows.
    pub uses: u32,
    /// With a hold: when it lapses unless renewed (RFC 3339 UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub lapses_at: Option<String>,
    /// With arguments: their hash, as in the token's `args` claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{64}$"))]
    pub args: Option<String>,
}

impl std::fmt::Debug for CapabilityResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapabilityResponse")
            .field("capability_id", &self.capability_id)
            .field("token", &"[redacted]")
            .field("expires_at", &self.expires_at)
            .field("uses", &self.uses)
            .field("lapses_at", &self.lapses_at)
            .field("args", &self.args)
            .finish()
    }
}

/// `POST /v1/exchange` body: the capability is the credential.
#[derive(Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ExchangeRequest {
    /// The capability token (JWT) from `POST /v1/capabilities`.
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExchangeResponse {
    /// Backend kind. Currently always `token`.
    #[cfg_attr(feature = "openapi", schema(example = "token"))]
    pub kind: String,
    /// The lease id; for `token` backends also the access token's `jti`.
    pub lease_id: Id,
    /// When the downstream credential expires (with the capability).
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub expires_at: String,
    /// Exchanges the capability still allows.
    pub uses_left: u32,
    /// The capability's `args` claim: the hash of the arguments it was issued (approved) for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{64}$"))]
    pub args: Option<String>,
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
            .field("args", &self.args)
            .field("fields", &"[redacted]")
            .finish()
    }
}

/// `POST /v1/introspect` body.
#[derive(Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct IntrospectRequest {
    /// A capability or an access token minted by a `token` backend.
    pub token: String,
}

impl std::fmt::Debug for IntrospectRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IntrospectRequest { token: [redacted] }")
    }
}

/// `POST /v1/runs/{id}/end` response: what this call revoked (zero on a repeat).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EndRunResponse {
    pub run_id: Id,
    pub revoked: RevokedCounts,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RevokedCounts {
    #[cfg_attr(feature = "openapi", schema(minimum = 0, format = "uint64"))]
    pub capabilities: u64,
    #[cfg_attr(feature = "openapi", schema(minimum = 0, format = "uint64"))]
    pub leases: u64,
    /// Downstream removals queued for the revocation worker.
    #[cfg_attr(feature = "openapi", schema(minimum = 0, format = "uint64"))]
    pub pending: u64,
    /// Approvals of the run still pending (or approved and not redeemed), cancelled.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, format = "uint64"))]
    pub approvals: u64,
}

/// `POST /v1/capabilities/renew` body (run token): the held capabilities to renew.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RenewHoldsRequest {
    /// Capabilities of this run, asked for with a hold, to renew.
    #[cfg_attr(feature = "openapi", schema(min_items = 1, max_items = 100))]
    pub capability_ids: Vec<String>,
}

/// One renewed hold.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RenewedHold {
    pub capability_id: Id,
    /// The hold's new lapse time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub lapses_at: String,
}

/// `POST /v1/capabilities/renew` response. Every asked-for id is in one list:
/// `lapsed` holds those that can no longer be renewed (the hold lapsed, the
/// capability was revoked or expired, was issued without a hold, or is not
/// this run's).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RenewHoldsResponse {
    pub renewed: Vec<RenewedHold>,
    pub lapsed: Vec<String>,
}

/// `POST /v1/capabilities/{id}/revoke` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RevokeCapabilityResponse {
    pub capability_id: Id,
    /// False when the capability was already revoked (or its run already ended).
    pub revoked: bool,
}

/// One capability as listed in `GET /v1/runs/{id}` (no token: it is never stored).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CapabilitySummary {
    pub capability_id: Id,
    pub action: String,
    pub resource: String,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub issued_at: String,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub expires_at: String,
    pub uses: u32,
    pub uses_left: u32,
    /// RFC 3339 UTC time, or null.
    #[cfg_attr(feature = "openapi", schema(required = true, format = DateTime))]
    pub revoked_at: Option<String>,
    /// `revoked` if revoked; else `inactive` if the run is no longer active; else `expired`, `exhausted` (no uses left) or `active`.
    pub state: String,
}

/// One downstream lease as listed in `GET /v1/runs/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaseSummary {
    pub lease_id: Id,
    pub capability_id: Id,
    /// Backend instance name.
    pub backend: String,
    /// Backend kind, e.g. `token`.
    pub kind: String,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub created_at: String,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub expires_at: String,
    /// RFC 3339 UTC time, or null.
    #[cfg_attr(feature = "openapi", schema(required = true, format = DateTime))]
    pub revoked_at: Option<String>,
}

/// `GET /v1/runs/{id}` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunView {
    pub run_id: Id,
    pub user: String,
    pub task: Task,
    pub runtime_id: Id,
    pub labels: Vec<String>,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub created_at: String,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub expires_at: String,
    /// RFC 3339 UTC time, or null.
    #[cfg_attr(feature = "openapi", schema(required = true, format = DateTime))]
    pub ended_at: Option<String>,
    pub state: String,
    /// Why the run ended: `ended` (by its runtime or an admin), `expired`,
    /// `runtime_disabled`, or `egress_denied` (the egress gateway ended it when it
    /// tried a destination a rule says ends the run); null while it runs.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub end_reason: Option<String>,
    pub capabilities: Vec<CapabilitySummary>,
    pub leases: Vec<LeaseSummary>,
}

/// `POST /v1/admin/runtimes` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateRuntimeRequest {
    #[cfg_attr(feature = "openapi", schema(pattern = "^[a-z0-9][a-z0-9._-]{0,62}$"))]
    pub name: String,
    /// Comma-separated globs of users the runtime may start runs for. `null` is the same as leaving it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub users: Option<String>,
    /// Comma-separated globs of task kinds the runtime may start runs for. `null` is the same as leaving it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_kinds: Option<String>,
    /// Pins the runtime to one TLS client certificate: SHA-256 (lowercase hex) of its DER encoding. Its key is then accepted only on mTLS connections presenting exactly this certificate. `null` is the same as leaving it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{64}$"))]
    pub client_cert_sha256: Option<String>,
}

/// `POST /v1/admin/runtimes` response: the key is shown exactly once.
#[derive(Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreateRuntimeResponse {
    pub id: Id,
    pub name: String,
    /// The runtime API key, shown exactly once.
    #[cfg_attr(feature = "openapi", schema(pattern = "^tsr_rt_[A-Za-z0-9_-]{43}$"))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Runtime {
    pub id: Id,
    pub name: String,
    pub users: String,
    pub task_kinds: String,
    /// SHA-256 of the client certificate the runtime is pinned to, if any.
    pub client_cert_sha256: Option<String>,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub created_at: String,
    /// RFC 3339 UTC time, or null.
    #[cfg_attr(feature = "openapi", schema(required = true, format = DateTime))]
    pub disabled_at: Option<String>,
}

/// `GET /v1/admin/runtimes` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RuntimeList {
    pub runtimes: Vec<Runtime>,
}

/// One signing key in `GET /v1/admin/keys` (the public half's id only).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyInfo {
    pub kid: String,
    /// `scheduled` is in the JWKS and signs from `signs_from`; `active` signs; `published` is
    /// retired but still in the JWKS; `expired` is no longer published.
    pub state: String,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub created_at: String,
    /// RFC 3339 UTC time: when the key starts (or started) signing.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:30Z"))]
    pub signs_from: String,
    /// RFC 3339 UTC time, or null: when the key stops (or stopped) signing.
    #[cfg_attr(feature = "openapi", schema(required = true, format = DateTime))]
    pub retired_at: Option<String>,
    /// RFC 3339 UTC time, or null.
    #[cfg_attr(feature = "openapi", schema(required = true, format = DateTime))]
    pub publish_until: Option<String>,
}

/// `GET /v1/admin/keys` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyList {
    pub keys: Vec<KeyInfo>,
}

/// One downstream removal not yet confirmed, in `GET /v1/admin/leases`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PendingRevocation {
    pub lease_id: Id,
    pub backend: String,
    /// The downstream object to remove (e.g. a database user name).
    pub downstream_ref: String,
    pub run_id: Id,
    #[cfg_attr(feature = "openapi", schema(example = "run_ended"))]
    pub reason: String,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub queued_at: String,
    pub attempts: i64,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub next_attempt_at: String,
    /// Failed 3 or more times.
    pub stuck: bool,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub last_error: Option<String>,
}

/// `GET /v1/admin/leases` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PendingRevocationList {
    pub revocations: Vec<PendingRevocation>,
}

/// `GET /healthz` and `GET /readyz` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HealthResponse {
    /// `ok` (the process is up), `ready` (and nothing below holds), or
    /// `not_ready` (with a 503 and the reasons).
    pub status: String,
    /// Why the broker is not ready, each reason named; empty when ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<ReadinessReason>,
}

/// One reason `/readyz` fails.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReadinessReason {
    /// Stable: `store_cannot_commit`, `policy_load_failed`, `policy_behind`, `keys_stale`,
    /// `revocation_outbox_stuck` or `shutting_down`.
    pub code: String,
    /// What is wrong, in words (the store's own error, the policy file's line).
    pub message: String,
}

/// `GET /v1/admin/status` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BrokerStatus {
    /// The id of the replica that answered.
    pub replica: String,
    /// `sqlite` or `postgres`.
    pub store: String,
    /// The newest published policy version sealed under the KEK (null before the first).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub published_policy: Option<PublishedPolicy>,
    /// Versions above it that are not sealed under the KEK (written to the store directly):
    /// refused by every replica. Not empty means someone wrote the store; see its audit.
    #[serde(default)]
    pub unsealed_versions: Vec<i64>,
    /// Every replica on this store that has not stopped, the answering one first.
    pub replicas: Vec<ReplicaStatus>,
}

/// A published policy version, in `GET /v1/admin/status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PublishedPolicy {
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub version: i64,
    /// SHA-256 over the policy files.
    pub sha256: String,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub published_at: String,
    /// What published it: `start`, `admin`, `signal` or `watch`.
    pub trigger: String,
    /// The replica that published it.
    pub replica: String,
}

/// One replica, in `GET /v1/admin/status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReplicaStatus {
    pub id: String,
    /// True for the replica that answered.
    pub this: bool,
    /// Its heartbeat is younger than the claim lease (15 s).
    pub live: bool,
    pub machine: String,
    pub pid: i64,
    /// The broker's version, once reported.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub software: Option<String>,
    /// The address it listens on, once reported.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub listen: Option<String>,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub started_at: String,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub heartbeat_at: String,
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub uptime_seconds: i64,
    /// The published policy version it enforces, once reported.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub policy_version: Option<i64>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub policy_sha256: Option<String>,
    /// The key it signs with, once reported.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub signing_kid: Option<String>,
}

/// `POST /v1/admin/keys/rotate` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RotateKeyResponse {
    /// The new key's id: in the JWKS at once, signing from `signs_from`.
    pub kid: String,
    /// RFC 3339 UTC time: when the new key starts signing (the previous keys sign until then).
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:30Z"))]
    pub signs_from: String,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub previous_kid: Option<String>,
    /// Until when the previous key stays published in the JWKS (null if there was none).
    #[cfg_attr(feature = "openapi", schema(required = true, format = DateTime))]
    pub previous_published_until: Option<String>,
}

/// `POST /v1/admin/runtimes/{name}/disable` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DisableRuntimeResponse {
    pub name: String,
    /// False when the runtime was already disabled.
    pub disabled: bool,
    /// Open runs of the runtime that were ended by this call.
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub runs_ended: u64,
    pub revoked: RevokedCounts,
}

/// One run in `GET /v1/admin/runs`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunSummary {
    pub run_id: Id,
    pub user: String,
    pub task: Task,
    /// Name of the runtime that started the run.
    pub runtime: String,
    pub labels: Vec<String>,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub created_at: String,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub expires_at: String,
    /// RFC 3339 UTC time, or null.
    #[cfg_attr(feature = "openapi", schema(required = true, format = DateTime))]
    pub ended_at: Option<String>,
    pub state: String,
}

/// `GET /v1/admin/runs` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunList {
    pub runs: Vec<RunSummary>,
    /// Pass as `after` for the next page; null on the last page.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub next_cursor: Option<String>,
}

/// `POST /v1/admin/policy/reload` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PolicyReloadResponse {
    /// Policies now in force.
    pub policies: usize,
    /// SHA-256 over the policy files that were loaded.
    pub sha256: String,
    /// The published policy version these files are: a new number when they differ from the
    /// newest version, which every replica then switches to within `[replicas] policy_sync`.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, required = true))]
    pub version: i64,
    /// Live capabilities (not revoked, not expired, their run open) that the new policy set would no longer issue; each was revoked with its leases by this reload.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub revoked: usize,
}

/// Every error the broker returns: `{"error": {"code", "message", "request_id"}}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorDetail {
    #[cfg_attr(feature = "openapi", schema(value_type = ErrorCode))]
    pub code: String,
    /// Human-readable message, safe to show to an untrusted sandbox; internal causes are never echoed.
    pub message: String,
    /// The request id, also sent in the `X-Request-Id` header; the broker log and audit rows carry it.
    #[cfg_attr(
        feature = "openapi",
        schema(
            pattern = "^req_[0-9a-f]{24}$",
            example = "req_3f2a9c0d1e4b5a6978c0d1e2"
        )
    )]
    pub request_id: String,
}

/// The claims of a capability token (`typ` `tsr-cap+jwt`): what the broker
/// signs, and what `POST /v1/introspect` returns for a live one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CapabilityClaims {
    /// The broker's issuer.
    pub iss: String,
    /// `<issuer>/capabilities`.
    pub aud: String,
    /// The user.
    pub sub: String,
    /// The capability id.
    pub jti: Id,
    /// Unix seconds.
    pub iat: i64,
    /// Unix seconds.
    pub nbf: i64,
    /// Unix seconds.
    pub exp: i64,
    /// The run id.
    pub run: Id,
    /// The task id.
    pub task: String,
    /// The runtime id.
    pub rt: Id,
    /// The action.
    pub act: String,
    /// The resource, `BACKEND:PATH`.
    pub res: String,
    /// Maximum exchanges.
    pub uses: u32,
    /// Optional proof-of-possession confirmation (e.g. `jkt`); absent when not bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cnf: Option<serde_json::Value>,
    /// SHA-256 (hex) of the RFC 8785 canonical form of the arguments the capability was issued for (approved for, when an approval gated it); absent when it was asked for without arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{64}$"))]
    pub args: Option<String>,
}

/// The claims of an access token from a `token` backend (`typ` `at+jwt`,
/// RFC 9068).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AccessTokenClaims {
    pub iss: String,
    /// The backend's audience.
    pub aud: String,
    /// The user.
    pub sub: String,
    /// The lease id.
    pub jti: Id,
    pub iat: i64,
    pub nbf: i64,
    /// Unix seconds; equals the capability's `exp`.
    pub exp: i64,
    /// `tessera-run:<run id>`.
    pub client_id: String,
    /// The capability's action.
    pub scope: String,
    /// The path part of the capability's resource.
    pub resource: String,
    pub act: Actor,
    /// The capability this token was exchanged for.
    pub cap: Id,
    /// The capability's `args` claim: the hash of the arguments it was issued for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{64}$"))]
    pub args: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Actor {
    pub sub: String,
}

/// `POST /v1/introspect` response: `{"active": false}` for anything that is
/// not a live token this caller may see, or the live token's claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct InactiveIntrospection {
    pub active: bool,
}

/// A live capability: its claims, and the uses it has left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CapabilityIntrospection {
    pub active: bool,
    pub token_type: String,
    /// The capability's action (`act`).
    pub scope: String,
    pub uses_left: u32,
    #[serde(flatten)]
    pub claims: CapabilityClaims,
}

/// A live access token of a `token` backend: its claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AccessTokenIntrospection {
    pub active: bool,
    pub token_type: String,
    #[serde(flatten)]
    pub claims: AccessTokenClaims,
}

/// `GET /.well-known/jwks.json`: the public keys that verify Tessera tokens
/// (the active key and retired ones still within their publication window).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Jwks {
    pub keys: Vec<Jwk>,
}

/// One Ed25519 public key (RFC 8037): `kty` `OKP`, `crv` `Ed25519`, `use`
/// `sig`, `alg` `EdDSA`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Jwk {
    /// `OKP`.
    pub kty: String,
    /// `Ed25519`.
    pub crv: String,
    /// The public key, base64url without padding.
    pub x: String,
    /// Key id (RFC 7638 thumbprint).
    pub kid: String,
    /// `sig`.
    #[serde(rename = "use")]
    pub use_: String,
    /// `EdDSA`.
    pub alg: String,
}

/// `GET /v1/admin/runs` query.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct RunListQuery {
    /// Only runs of this runtime (name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// Only runs for this user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// `open` (not yet ended; the default), `ended` or `all`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Run id cursor from `next_cursor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Id>,
    /// Page size, 1-1000 (default 100).
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 1000))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
}

/// `GET /v1/admin/audit` query.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only rows about this run id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<Id>,
    /// Only rows about this capability id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability: Option<Id>,
    /// Only rows for this user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// An event name, or a family such as `capability.*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// allow, deny or error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// Rows committed at or after this time.
    #[cfg_attr(feature = "openapi", param(format = DateTime))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Rows committed before this time.
    #[cfg_attr(feature = "openapi", param(format = DateTime))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// Rows with a greater sequence number (ascending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<i64>,
    /// Rows with a smaller sequence number (descending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<i64>,
    /// asc (default) or desc.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<String>,
    /// Page size, 1-1000 (default 100).
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 1000))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
}

/// `GET /v1/admin/leases` query.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct PendingRevocationsQuery {
    /// Only revocations that failed 3 or more times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stuck: Option<bool>,
    /// 1-1000 (default 100).
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 1000))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
}

/// One audit row, as administrators and SIEMs see it (`GET /v1/admin/audit`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditRecord {
    /// Position in the hash chain (1, 2, 3, … without gaps).
    pub seq: i64,
    /// Commit time, RFC 3339 with milliseconds.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub at: String,
    /// Event name; the catalogue is in docs/audit.md.
    #[cfg_attr(feature = "openapi", schema(example = "capability.issued"))]
    pub event: String,
    /// `runtime:<name>`, `run:<id>`, `admin`, `broker`, `signal` or `watch`.
    pub actor: String,
    /// `allow`, `deny` or `error`.
    pub decision: String,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub reason: Option<String>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub run_id: Option<String>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub capability_id: Option<String>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub user: Option<String>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub task_id: Option<String>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub action: Option<String>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub resource: Option<String>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub request_id: Option<String>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub detail: Option<String>,
    pub prev_hash: String,
    /// The row's link: HMAC-SHA256 under the audit key (SHA-256 for rows from
    /// before the chain was keyed) of the previous link and the canonical row, hex.
    pub hash: String,
}

/// `GET /v1/admin/audit` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditPage {
    pub events: Vec<AuditRecord>,
    /// Pass as `after` (ascending) or `before` (descending) for the next page;
    /// null when this page was the last one.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub next_cursor: Option<i64>,
}

/// `GET /v1/admin/audit/verify` response: `ok` says whether the chain verifies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditVerifyReport {
    pub ok: bool,
    /// Rows walked.
    pub rows: i64,
    /// Sequence number recorded in the chain head.
    pub head_seq: i64,
    /// Rows at the start linked without a key (written before the chain was
    /// keyed): they prove order, not that nobody rewrote them.
    pub unkeyed_rows: i64,
    /// The link of the last row walked (what a checkpoint at `head_seq` signs).
    pub head_hash: String,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub first_problem: Option<AuditProblem>,
    /// When retention pruned the rows before the first kept one (authorised
    /// by an `audit.pruned` row in the chain): the last pruned row and its
    /// link, which the exported segment must end at
    /// (`tessera audit verify --segments`). Absent when the chain starts at row 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pruned_through: Option<PrunedPrefix>,
}

/// The rows retention removed from the start of the audit chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PrunedPrefix {
    /// The last pruned row: rows 1..=seq are held in exports, not in the store.
    pub seq: i64,
    /// Its link (the first kept row's `prev_hash`).
    pub hash: String,
}

/// The first inconsistency an audit verification found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditProblem {
    /// The sequence number where the chain first breaks.
    pub seq: i64,
    /// `edited` (the row's content no longer matches its link — also a row
    /// moved to another position), `deleted` (rows missing before this one),
    /// `relinked` (the row does not follow the previous row's link),
    /// `truncated` (rows removed from the end), `downgraded` (an unkeyed row
    /// where only keyed rows may be), `unknown_key` (a row linked with a key
    /// this broker does not hold).
    pub kind: String,
    pub detail: String,
}

/// `POST /v1/admin/audit/checkpoints/check` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CheckpointsRequest {
    /// Signed checkpoints (compact JWS, `typ` `tsr-audit-checkpoint+jwt`), at most 100.
    #[cfg_attr(feature = "openapi", schema(max_items = 100))]
    pub checkpoints: Vec<String>,
}

/// `POST /v1/admin/audit/checkpoints/check` response: one result per
/// checkpoint, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckpointsResponse {
    pub results: Vec<CheckpointCheck>,
}

/// `POST /v1/admin/audit/exports`: an export of rows `first_seq..=last_seq`
/// ending at the signed checkpoint of `last_seq`, now held outside the store
/// (written by `tessera audit export --through-checkpoint --output FILE`).
/// Retention prunes audit rows only up to such a row.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AuditExportRequest {
    /// The first row in the file (at or below the first row the store keeps).
    pub first_seq: i64,
    /// The last row in the file: the row the checkpoint signs.
    pub last_seq: i64,
    /// Its link.
    pub last_hash: String,
    /// The signed checkpoint of `last_seq` (compact JWS).
    pub checkpoint: String,
    /// SHA-256 of the file, hex: recorded, so the file can be matched later.
    pub sha256: String,
}

/// `POST /v1/admin/audit/exports` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditExportRecorded {
    /// The export's id, named by the `audit.exported` row and, once rows up
    /// to it are pruned, by the `audit.pruned` row.
    pub id: String,
}

/// `POST /v1/admin/audit/segments/check`: rows of an exported segment, in
/// order, and the link before the first of them (64 zeros before row 1).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SegmentCheckRequest {
    pub prev_hash: String,
    /// At most 1000 rows, as `tessera audit export` wrote them.
    #[cfg_attr(feature = "openapi", schema(max_items = 1000))]
    pub rows: Vec<AuditRecord>,
}

/// `POST /v1/admin/audit/segments/check` response: whether every row's link
/// recomputes (with the audit key) and follows the one before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SegmentCheckResponse {
    pub ok: bool,
    /// Rows checked before the first problem (all of them when `ok`).
    pub checked: i64,
    /// The link of the last row checked: pass it as `prev_hash` with the next rows.
    pub last_hash: String,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub first_problem: Option<AuditProblem>,
}

/// `GET /v1/admin/audit/checkpoints/latest`: the newest checkpoint the store
/// holds (`null` before the first), and whether the witness took it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LatestCheckpoint {
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub latest: Option<CheckpointInfo>,
}

/// A stored checkpoint: read from the store, so only a copy held elsewhere
/// proves anything (check it with `POST /v1/admin/audit/checkpoints/check`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckpointInfo {
    /// The audit row it covers.
    pub seq: i64,
    /// That row's link.
    pub hash: String,
    /// RFC 3339 UTC time it was signed.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub signed_at: String,
    /// The signed checkpoint (compact JWS).
    pub checkpoint: String,
    /// RFC 3339 UTC time a witness URL acknowledged it, or null (none configured, or not yet).
    #[cfg_attr(feature = "openapi", schema(required = true, format = DateTime))]
    pub witnessed_at: Option<String>,
    /// Deliveries to the witness URL tried so far.
    pub witness_attempts: i64,
}

/// What a checkpoint says about the store now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckpointCheck {
    /// The sequence number it names (0 if unreadable).
    pub seq: i64,
    /// `matches` (the row is there with that link), `changed` (the row's link
    /// differs), `missing` (the row is gone: truncated or deleted),
    /// `bad_signature` (not signed by any key of this broker), `malformed`.
    pub status: String,
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
            args: None,
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

/// `POST /v1/gateway/session` response: what a run's tool needs to call the
/// APIs of credential-injection rules through the egress gateway.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GatewaySession {
    /// The run's CA (PEM). Trusted by the tool, it lets the gateway terminate
    /// TLS for the injection rules' hosts, and only those (name constraints).
    pub ca_pem: String,
    /// When the CA stops being valid: the run's expiry (RFC 3339).
    pub expires_at: String,
    /// The DNS subtrees the CA may issue for.
    pub hosts: Vec<String>,
    /// Placeholders to put where an SDK insists on a key: worthless outside
    /// this gateway and this run.
    pub placeholders: Vec<GatewayPlaceholder>,
}

/// One placeholder: the rule it is for and the variable that carries it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GatewayPlaceholder {
    /// The `http` backend (injection rule).
    pub backend: String,
    /// The environment variable `tessera exec --egress` sets to `value`.
    pub env: String,
    /// `tsr_ph_…`.
    pub value: String,
}
