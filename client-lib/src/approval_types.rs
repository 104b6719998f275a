//! Wire types of approvals and approvers (re-exported by [`crate::types`]).
//!
//! An approval is a pending human decision on one request: a run's action on a
//! resource with exact arguments. Approvers are principals of their own, with
//! keys an administrator mints; the decision is recorded with each approver's
//! name and user.

use crate::id::Id;
use serde::{Deserialize, Serialize};

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for approvers.
    Pending,
    /// Approved: the run may redeem it for one capability until it expires.
    Approved,
    /// An approver (or an administrator) denied it.
    Denied,
    /// Nobody decided in time, or it was approved and not redeemed in time.
    Expired,
    /// Its run ended first.
    Cancelled,
}

impl ApprovalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Expired => "expired",
            ApprovalStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => ApprovalStatus::Pending,
            "approved" => ApprovalStatus::Approved,
            "denied" => ApprovalStatus::Denied,
            "expired" => ApprovalStatus::Expired,
            "cancelled" => ApprovalStatus::Cancelled,
            _ => return None,
        })
    }
}

/// Who may decide, from a permit's `@approval` annotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApprovalRule {
    /// `group:NAME` (members of the group in entities.json, nested groups
    /// included), `user:NAME`, or `any` (any approver).
    #[cfg_attr(feature = "openapi", schema(example = "group:release-managers"))]
    pub rule: String,
    /// Distinct approving users needed.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 9))]
    pub required: u32,
}

impl std::fmt::Display for ApprovalRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.required {
            1 => f.write_str(&self.rule),
            n => write!(f, "{n} of {}", self.rule),
        }
    }
}

/// `POST /v1/capabilities` 202 response: the request waits for a human.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApprovalPending {
    pub approval_id: Id,
    /// `pending`, or `approved` when the same request was approved and not yet redeemed.
    pub status: ApprovalStatus,
    /// RFC 3339 UTC time: when it expires, pending or approved.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub expires_at: String,
    /// Who must approve: every rule must be met.
    pub approvers: Vec<ApprovalRule>,
    /// SHA-256 (hex) of the arguments' RFC 8785 canonical form (`{}` when none were given).
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{64}$"))]
    pub args: String,
}

/// One approver's decision.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApprovalDecision {
    /// The approver key's name, or `admin` for an administrator's denial.
    pub approver: String,
    /// The approver's user (null for an administrator).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub user: Option<String>,
    /// `approve` or `deny`.
    pub decision: String,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub comment: Option<String>,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub at: String,
}

/// An approval as approvers, administrators and the requesting run see it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Approval {
    pub approval_id: Id,
    pub status: ApprovalStatus,
    pub run_id: Id,
    /// The run's user: who asked.
    pub user: String,
    pub task_id: String,
    pub task_kind: String,
    /// The runtime's name.
    pub runtime: String,
    pub action: String,
    pub resource: String,
    /// The arguments, in full, in their canonical form.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub arguments: serde_json::Value,
    /// SHA-256 (hex) of the arguments' RFC 8785 canonical form.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{64}$"))]
    pub args: String,
    /// The `@id` of the permit that asked for the approval.
    pub policy: String,
    /// Who must approve: every rule must be met.
    pub approvers: Vec<ApprovalRule>,
    pub decisions: Vec<ApprovalDecision>,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub created_at: String,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime, example = "2026-05-01T12:30:00Z"))]
    pub expires_at: String,
    /// RFC 3339 UTC time, or null.
    #[cfg_attr(feature = "openapi", schema(required = true, format = DateTime))]
    pub decided_at: Option<String>,
    /// What it was redeemed for, or null: the capability, or, for a request at
    /// the egress gateway, the `request_id` (`req_…`) of the decision's audit row.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub capability_id: Option<String>,
}

/// A list of approvals.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApprovalList {
    pub approvals: Vec<Approval>,
}

/// `GET /v1/approvals` and `GET /v1/admin/approvals` query.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct ApprovalListQuery {
    /// `pending` (the default), `approved`, `denied`, `expired`, `cancelled` or `all`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Only this run's approvals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<Id>,
    /// At most this many, newest first, 1-500 (default 100).
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 500))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
}

/// `GET /v1/approvals/{id}` query.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct ApprovalWaitQuery {
    /// Hold the answer until the approval is no longer pending, or this long
    /// (a duration such as `30s` or `1m`; at most 60s, and below the server's request timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(value_type = Option<String>, pattern = "^([0-9]+[dhms])+$"))]
    pub wait: Option<String>,
}

/// `POST /v1/approvals/{id}/approve|deny` and `POST /v1/admin/approvals/{id}/deny` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DecideApprovalRequest {
    /// Why, for the audit log and the requester. At most 1000 characters, no control characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 1000))]
    pub comment: Option<String>,
}

/// `POST /v1/admin/approvers` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateApproverRequest {
    /// A name for this key (one person may hold several, e.g. per device).
    #[cfg_attr(feature = "openapi", schema(pattern = "^[a-z0-9][a-z0-9._-]{0,62}$"))]
    pub name: String,
    /// The user (as in entities.json) whose decisions this key makes.
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[A-Za-z0-9._@+-]{1,128}$", max_length = 128)
    )]
    pub user: String,
}

/// `POST /v1/admin/approvers` response: the key is shown exactly once.
#[derive(Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreateApproverResponse {
    pub id: Id,
    pub name: String,
    pub user: String,
    /// The approver key, shown exactly once.
    #[cfg_attr(feature = "openapi", schema(pattern = "^tsr_apr_[A-Za-z0-9_-]{43}$"))]
    pub key: String,
}

impl std::fmt::Debug for CreateApproverResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateApproverResponse")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("user", &self.user)
            .field("key", &"[redacted]")
            .finish()
    }
}

/// One approver key (no key: only its hash is kept).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Approver {
    pub id: String,
    pub name: String,
    pub user: String,
    /// RFC 3339 UTC time.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub created_at: String,
    /// RFC 3339 UTC time, or null.
    #[cfg_attr(feature = "openapi", schema(required = true, format = DateTime))]
    pub revoked_at: Option<String>,
}

/// `GET /v1/admin/approvers` response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApproverList {
    pub approvers: Vec<Approver>,
}
