//! Why a door may not hand something out, as the decision layer says it:
//! structured, so each door words it in its own protocol (an API error, an
//! OAuth error, a gateway refusal) while the decision itself is one.

use crate::policy::DenyRule;
use crate::store::runs::RunState;
use crate::store::StoreError;
use tessera_client::types::{ApprovalPending, ApprovalStatus, ErrorCode};

#[derive(Debug)]
pub enum Refused {
    /// The run ended or expired (the request is not recorded when the run
    /// was already inactive when it came; the store records the rest).
    RunInactive(RunState),
    /// Not a request this door decides: the grammar, the schema, the kind.
    Inadmissible { code: ErrorCode, message: String },
    /// Policy says no (recorded); `end_run` when a gateway door must end the run.
    Denied { rule: DenyRule, end_run: bool },
    /// A gated permit: a human must approve first (the approval opened, or
    /// the one already open for the identical request).
    Pending(ApprovalPending),
    /// The approval cannot make this request hold.
    Approval(ApprovalRefusal),
    /// Over a rate: retry after this many microseconds.
    RateLimited { retry_after_us: i64 },
    /// The decision cannot be recorded, so nothing is handed out.
    Store(StoreError),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalRefusal {
    /// No approval of this run by that id.
    Unknown,
    /// The approval is for another action, resource, arguments or approvers.
    Mismatch,
    /// The approval is not approved-and-unredeemed: its status.
    Status(ApprovalStatus),
    /// It was redeemed, expired or cancelled while this request was decided.
    Unavailable,
    /// The identical request was denied in this run (the id): a denial stands.
    DeniedBefore(String),
    /// The run has its most approvals open.
    TooMany,
}

impl ApprovalRefusal {
    /// The stable code of this refusal, as every door reports it.
    pub fn code(&self) -> ErrorCode {
        match self {
            ApprovalRefusal::Unknown => ErrorCode::UnknownApproval,
            ApprovalRefusal::Mismatch => ErrorCode::ApprovalMismatch,
            ApprovalRefusal::Status(ApprovalStatus::Pending) => ErrorCode::ApprovalPending,
            ApprovalRefusal::Status(ApprovalStatus::Denied) | ApprovalRefusal::DeniedBefore(_) => {
                ErrorCode::ApprovalDenied
            }
            ApprovalRefusal::Status(ApprovalStatus::Expired | ApprovalStatus::Cancelled) => {
                ErrorCode::ApprovalExpired
            }
            ApprovalRefusal::Status(ApprovalStatus::Approved) | ApprovalRefusal::Unavailable => {
                ErrorCode::ApprovalRedeemed
            }
            ApprovalRefusal::TooMany => ErrorCode::RateLimited,
        }
    }
}

impl From<StoreError> for Refused {
    fn from(e: StoreError) -> Refused {
        Refused::Store(e)
    }
}

impl Refused {
    /// The audit `reason` a recorded refusal carries (and the table test compares).
    pub fn reason(&self) -> String {
        match self {
            Refused::RunInactive(state) => format!("run_{}", state.as_str()),
            Refused::Inadmissible { code, .. } => code.as_str().to_owned(),
            Refused::Denied { rule, .. } => rule.reason().to_owned(),
            Refused::Pending(_) => "approval_pending".to_owned(),
            Refused::Approval(a) => a.code().as_str().to_owned(),
            Refused::RateLimited { .. } => "rate_limited".to_owned(),
            Refused::Store(_) => "store_unavailable".to_owned(),
        }
    }
}
