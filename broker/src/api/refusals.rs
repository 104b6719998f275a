//! Every refusal a caller can get, in one place: the domain outcome (a run's
//! state, a store outcome, a policy rule, a backend failure, a token check) →
//! the HTTP status, the stable [`ErrorCode`] and the message an untrusted
//! sandbox may read. Handlers decide; this module says how a decision reads.
//!
//! Why one module: the same outcome (an ended run, say) is refused at
//! issuance, exchange and renewal, and must read the same everywhere; spread
//! over the handlers, the copies drifted.

use crate::backends::BackendError;
use crate::capability::TokenError;
use crate::error::ApiError;
use crate::grant::{ApprovalRefusal, Refused};
use crate::policy::DenyRule;
use crate::store::approvals::Decided;
use crate::store::capabilities::ConsumeOutcome;
use crate::store::runs::RunState;
use axum::http::StatusCode;
use tessera_client::types::{ApprovalStatus, ErrorCode};

/// A run that is not active.
pub fn run_inactive(state: RunState) -> ApiError {
    match state {
        RunState::Expired => ApiError::forbidden(ErrorCode::RunExpired, "the run has expired"),
        _ => ApiError::forbidden(ErrorCode::RunEnded, "the run has ended"),
    }
}

/// A capability token that does not verify.
pub fn token(e: TokenError) -> ApiError {
    match e {
        TokenError::Expired => ApiError::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::TokenExpired,
            "capability has expired",
        ),
        _ => ApiError::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::InvalidToken,
            "capability is not valid",
        ),
    }
}

/// A policy refusal: the rule, never the policy.
pub fn denied(rule: DenyRule) -> ApiError {
    ApiError::forbidden(rule.code(), deny_message(rule))
}

/// What the caller reads with a policy refusal: the rule, never the policy.
fn deny_message(rule: DenyRule) -> &'static str {
    match rule {
        DenyRule::NoPermit | DenyRule::Forbidden => "request denied by policy",
        DenyRule::WildcardOverlapsForbid => {
            "the wildcard could name a resource that policy forbids; ask for a narrower or concrete resource"
        }
        DenyRule::WildcardOverlapsApproval => {
            "the wildcard could name a resource that needs a human approval; ask for a concrete resource"
        }
        DenyRule::WildcardNotCovered => {
            "no policy grants every resource the wildcard names; ask for a narrower or concrete resource"
        }
    }
}

/// A refusal of the decision layer ([`crate::grant`]), as the HTTP API words it.
/// (`Pending` is a 202 at `/v1/capabilities`; here, for a door that cannot
/// answer one, it reads as the pending redemption.)
pub fn grant(refused: Refused) -> ApiError {
    match refused {
        Refused::RunInactive(state) => run_inactive(state),
        Refused::Inadmissible { code, message } => ApiError::bad_request(code, message),
        Refused::Denied { rule, .. } => denied(rule),
        Refused::Pending(_) => redemption(ApprovalStatus::Pending),
        Refused::Approval(a) => approval(a),
        Refused::RateLimited { retry_after_us } => {
            ApiError::rate_limited((retry_after_us as u64).div_ceil(1_000_000))
        }
        Refused::Store(e) => e.into(),
    }
}

/// Why an approval does not make a request hold.
fn approval(refusal: ApprovalRefusal) -> ApiError {
    match refusal {
        ApprovalRefusal::Unknown => unknown_approval(),
        ApprovalRefusal::Mismatch => approval_mismatch(),
        ApprovalRefusal::Status(status) => redemption(status),
        ApprovalRefusal::Unavailable => ApiError::new(
            StatusCode::CONFLICT,
            ErrorCode::ApprovalRedeemed,
            "the approval was redeemed, expired or cancelled meanwhile",
        ),
        ApprovalRefusal::DeniedBefore(id) => ApiError {
            message: format!(
                "approval {id} for this request was denied; a denial stands for the rest of the run"
            ),
            ..redemption(ApprovalStatus::Denied)
        },
        ApprovalRefusal::TooMany => ApiError {
            message: format!(
                "this run has {} approvals open; wait for them before asking for more",
                crate::store::approvals::MAX_OPEN_PER_RUN
            ),
            ..ApiError::rate_limited(60)
        },
    }
}

/// Why an approval cannot be redeemed (`approval_id` on a capability request).
pub fn redemption(status: ApprovalStatus) -> ApiError {
    match status {
        ApprovalStatus::Pending => ApiError::new(
            StatusCode::CONFLICT,
            ErrorCode::ApprovalPending,
            "the approval is still pending; wait for it (GET /v1/approvals/{id}?wait=30s)",
        ),
        ApprovalStatus::Denied => {
            ApiError::forbidden(ErrorCode::ApprovalDenied, "the approval was denied")
        }
        ApprovalStatus::Expired | ApprovalStatus::Cancelled => ApiError::forbidden(
            ErrorCode::ApprovalExpired,
            "the approval expired or was cancelled; ask again for a new one",
        ),
        ApprovalStatus::Approved => ApiError::new(
            StatusCode::CONFLICT,
            ErrorCode::ApprovalRedeemed,
            "the approval was already redeemed: an approval yields one capability",
        ),
    }
}

/// An `approval_id` for another request than this one.
pub fn approval_mismatch() -> ApiError {
    ApiError::forbidden(
        ErrorCode::ApprovalMismatch,
        "the approval is for another run, action, resource or arguments, or other approvers; \
         ask without approval_id for a new approval",
    )
}

/// No approval the caller may see by that id.
pub fn unknown_approval() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::UnknownApproval,
        "no such approval",
    )
}

/// A decision that cannot be recorded.
pub fn decision(outcome: &Decided) -> ApiError {
    match outcome {
        Decided::Unknown => unknown_approval(),
        Decided::AlreadyDecided(status) => ApiError::new(
            StatusCode::CONFLICT,
            ErrorCode::ApprovalDecided,
            format!("the approval is {}", status.as_str()),
        ),
        Decided::AlreadyVoted => ApiError::new(
            StatusCode::CONFLICT,
            ErrorCode::AlreadyVoted,
            "this user has already decided on this approval",
        ),
        Decided::Recorded(_) => ApiError::internal(),
    }
}

/// An exchange the store refused.
pub fn exchange(outcome: &ConsumeOutcome) -> ApiError {
    match outcome {
        ConsumeOutcome::Unknown => ApiError::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::InvalidToken,
            "capability is not valid",
        ),
        ConsumeOutcome::Revoked => {
            ApiError::forbidden(ErrorCode::CapabilityRevoked, "capability has been revoked")
        }
        ConsumeOutcome::Expired => ApiError::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::TokenExpired,
            "capability has expired",
        ),
        ConsumeOutcome::Lapsed => ApiError::forbidden(
            ErrorCode::CapabilityLapsed,
            "capability's hold lapsed (its holder stopped renewing it); it is being revoked",
        ),
        ConsumeOutcome::RunInactive(RunState::Expired) => {
            ApiError::forbidden(ErrorCode::RunExpired, "the run has expired")
        }
        ConsumeOutcome::RunInactive(_) => {
            ApiError::forbidden(ErrorCode::RunEnded, "the run has ended")
        }
        ConsumeOutcome::Exhausted => {
            ApiError::forbidden(ErrorCode::UsesExhausted, "capability has no uses left")
        }
        ConsumeOutcome::Consumed { .. } => ApiError::internal(),
    }
}

/// What the caller learns when the backend fails: a stable code, never the
/// downstream's own message (that is logged and audited with the lease).
pub fn backend(e: &BackendError) -> ApiError {
    match e {
        // Only removals report partly; an issue never does.
        BackendError::Unavailable(_) | BackendError::Partial { .. } => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::BackendUnavailable,
            "the downstream backend is unavailable",
        ),
        BackendError::Throttled(_) => ApiError {
            retry_after: Some(5),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::BackendThrottled,
                "the downstream backend is throttling requests; retry later",
            )
        },
        BackendError::Refused(_) => ApiError::new(
            StatusCode::BAD_GATEWAY,
            ErrorCode::BackendRefused,
            "the downstream backend refused to issue; an operator must check the backend's configuration",
        ),
        BackendError::Unsupported { code, message } => {
            ApiError::bad_request(*code, message.clone())
        }
        BackendError::UnsafeDefaults(_) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::BackendUnsafeDefaults,
            "the downstream server has defaults that would let a credential do more than its grant; \
             nothing is issued until an operator fixes them (tessera backends check)",
        ),
        BackendError::Rejected(_) => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::BackendRejected,
            "the downstream backend refused this grant (does the resource exist?)",
        ),
    }
}

/// A DPoP refusal. `presenting`: the request presents a bound token (401 with
/// `WWW-Authenticate: DPoP`, RFC 9449 §7.1); otherwise it asks for one to be
/// bound (400, as at a token endpoint, §5). A missing nonce comes with one.
pub fn dpop(
    dpop: &crate::dpop::Dpop,
    e: crate::dpop::DpopError,
    presenting: bool,
    now: i64,
) -> ApiError {
    use crate::dpop::DpopError;
    if e == DpopError::Busy {
        return ApiError {
            message: e.to_string(),
            ..ApiError::rate_limited(5)
        };
    }
    let code = if e == DpopError::UseNonce {
        ErrorCode::UseDpopNonce
    } else {
        ErrorCode::InvalidDpopProof
    };
    let status = if presenting {
        StatusCode::UNAUTHORIZED
    } else {
        StatusCode::BAD_REQUEST
    };
    let mut err = ApiError::new(status, code, e.to_string());
    if presenting {
        err.headers.push((
            "www-authenticate",
            format!("DPoP error=\"{code}\", algs=\"ES256 EdDSA\""),
        ));
    }
    if e == DpopError::UseNonce {
        err.headers.push(("dpop-nonce", dpop.nonce(now)));
    }
    err
}
