//! What can go wrong when a sandboxed tool asks the broker for something.
//!
//! Why an enum by meaning rather than by HTTP status: a tool reacts differently
//! to "policy said no" (give up, tell the user), "a human must approve" (wait or
//! ask), "slow down" (wait `retry_after`), "your grant has lapsed" (ask again),
//! and "the broker is unreachable" (retry later). The broker's stable error code
//! and request id are kept on every variant that came from a response, so a
//! denial can be looked up in the audit log. No variant ever holds a token.

use std::time::Duration;

/// A refusal or failure, with the broker's error code and request id where one was given.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// Policy (or the runtime's scope) refused: `capability_denied`, `runtime_scope`.
    #[error("denied by the broker ({code}, request {request_id}): {message}")]
    Denied {
        code: String,
        message: String,
        request_id: String,
    },
    /// A human approval is needed and was not given: denied (`approval_denied`),
    /// expired or cancelled (`approval_expired`), still pending when the wait ran
    /// out (`approval_pending`), or it no longer fits (`approval_mismatch`,
    /// `approval_redeemed`). `approval_id` names it where known.
    #[error("no human approval ({code}, request {request_id}): {message}")]
    ApprovalRequired {
        code: String,
        approval_id: Option<String>,
        message: String,
        request_id: String,
    },
    /// Over a rate limit; the broker said when to come back.
    #[error("rate limited; retry after {retry_after:?} (request {request_id})")]
    RateLimited {
        retry_after: Duration,
        request_id: String,
    },
    /// The capability or the run has expired, ended, been revoked or used up:
    /// `token_expired`, `run_expired`, `run_ended`, `capability_revoked`,
    /// `capability_lapsed`, `uses_exhausted`. Ask for a new capability (or a new run).
    #[error("no longer valid ({code}, request {request_id}): {message}")]
    Expired {
        code: String,
        message: String,
        request_id: String,
    },
    /// The run token (or capability) was not accepted: `unauthenticated`, `invalid_token`.
    #[error("not authenticated ({code}, request {request_id}): {message}")]
    Unauthenticated {
        code: String,
        message: String,
        request_id: String,
    },
    /// The request itself was wrong: a 4xx such as `invalid_resource`, `unknown_action`.
    #[error("request rejected ({status} {code}, request {request_id}): {message}")]
    Rejected {
        /// The HTTP status (400, 404, 409, 413, 422, …).
        status: u16,
        code: String,
        message: String,
        request_id: String,
    },
    /// The broker (or its store, or the downstream backend) is unavailable, or could
    /// not be reached, after the retries allowed.
    #[error("broker unavailable: {message}")]
    Unavailable {
        code: Option<String>,
        message: String,
        request_id: Option<String>,
    },
    /// The client is not configured: no address, no run token, an unreadable file.
    #[error("client configuration: {0}")]
    Config(String),
    /// The broker answered something this client does not understand.
    #[error("unexpected response from the broker: {0}")]
    Protocol(String),
}

impl Error {
    /// The broker's stable error code, when the error came from a response.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Denied { code, .. }
            | Error::Expired { code, .. }
            | Error::Unauthenticated { code, .. }
            | Error::Rejected { code, .. }
            | Error::ApprovalRequired { code, .. } => Some(code),
            Error::RateLimited { .. } => Some(crate::ErrorCode::RateLimited.as_str()),
            Error::Unavailable { code, .. } => code.as_deref(),
            Error::Config(_) | Error::Protocol(_) => None,
        }
    }

    /// Maps a broker error response to its variant.
    pub(crate) fn from_response(
        status: u16,
        code: String,
        message: String,
        request_id: String,
        retry_after: Option<Duration>,
    ) -> Error {
        use crate::error_code::ErrorCode as C;
        match C::parse(&code) {
            Some(C::CapabilityDenied | C::RuntimeScope) => Error::Denied {
                code,
                message,
                request_id,
            },
            Some(
                C::ApprovalPending
                | C::ApprovalDenied
                | C::ApprovalExpired
                | C::ApprovalMismatch
                | C::ApprovalRedeemed,
            ) => Error::ApprovalRequired {
                code,
                approval_id: None,
                message,
                request_id,
            },
            Some(C::RateLimited) => Error::RateLimited {
                retry_after: retry_after.unwrap_or(Duration::from_secs(1)),
                request_id,
            },
            Some(
                C::TokenExpired
                | C::RunExpired
                | C::RunEnded
                | C::CapabilityRevoked
                | C::CapabilityLapsed
                | C::UsesExhausted,
            ) => Error::Expired {
                code,
                message,
                request_id,
            },
            Some(
                C::Unauthenticated
                | C::InvalidToken
                | C::ClientCertificateRequired
                | C::ClientCertificateMismatch,
            ) => Error::Unauthenticated {
                code,
                message,
                request_id,
            },
            _ if status >= 500 => Error::Unavailable {
                code: Some(code),
                message,
                request_id: Some(request_id),
            },
            _ => Error::Rejected {
                status,
                code,
                message,
                request_id,
            },
        }
    }
}
