//! What the gateway answers instead of a connection: an HTTP status, a stable
//! code and a message safe for the sandbox (it never names the policy that
//! refused). The codes are the gateway's own, listed in docs/gateway.md: the
//! proxy is not the broker's HTTP API, so they are not `ErrorCode`s.

use hyper::StatusCode;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// 407: no run token, or not a known one.
    ProxyAuthRequired,
    /// 403: the run ended or expired.
    RunEnded,
    /// 400: not a destination in the `net` grammar, or a request the proxy does
    /// not relay (origin-form, `https://` absolute-form, a Host that differs).
    InvalidDestination,
    /// 403: policy does not permit `connect` to the destination.
    DestinationDenied,
    /// 403: the destination resolves to an address in a range the run may not reach.
    AddressRefused,
    /// 502: the name does not resolve.
    Unresolvable,
    /// 502: the destination did not accept the connection.
    UpstreamUnavailable,
    /// 429: the run has too many connections open, has used its bytes, or is over its rate.
    LimitReached,
    /// 503: the store cannot record the decision (nothing is connected unrecorded).
    StoreUnavailable,
    /// 403: an injected request that its rule does not cover, or policy does not permit.
    RequestDenied,
    /// 403: a placeholder sent where it is not its rule's API or not its run's.
    PlaceholderRefused,
    /// 403: a permit with `@approval` covers the request; `Tessera-Approval-Id`
    /// names the approval (pending, or approved and not yet redeemed by a retry).
    ApprovalPending,
    /// 403: an approval for the identical request was denied in this run.
    ApprovalDenied,
    /// 403: the approval was redeemed by another request, expired or was
    /// cancelled while this one was decided; the next identical request asks anew.
    ApprovalUnavailable,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::ProxyAuthRequired => "proxy_auth_required",
            Code::RunEnded => "run_ended",
            Code::InvalidDestination => "invalid_destination",
            Code::DestinationDenied => "destination_denied",
            Code::AddressRefused => "address_refused",
            Code::Unresolvable => "unresolvable",
            Code::UpstreamUnavailable => "upstream_unavailable",
            Code::LimitReached => "limit_reached",
            Code::StoreUnavailable => "store_unavailable",
            Code::RequestDenied => "request_denied",
            Code::PlaceholderRefused => "placeholder_refused",
            Code::ApprovalPending => "approval_pending",
            Code::ApprovalDenied => "approval_denied",
            Code::ApprovalUnavailable => "approval_unavailable",
        }
    }

    pub fn status(self) -> StatusCode {
        match self {
            Code::ProxyAuthRequired => StatusCode::PROXY_AUTHENTICATION_REQUIRED,
            Code::RunEnded
            | Code::DestinationDenied
            | Code::AddressRefused
            | Code::RequestDenied
            | Code::PlaceholderRefused
            | Code::ApprovalPending
            | Code::ApprovalDenied
            | Code::ApprovalUnavailable => StatusCode::FORBIDDEN,
            Code::InvalidDestination => StatusCode::BAD_REQUEST,
            Code::Unresolvable | Code::UpstreamUnavailable => StatusCode::BAD_GATEWAY,
            Code::LimitReached => StatusCode::TOO_MANY_REQUESTS,
            Code::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// The header naming the approval an `approval_pending` (or `approval_denied`)
/// refusal is about.
pub const APPROVAL_ID_HEADER: &str = "tessera-approval-id";

/// A refusal: its code and message, and the approval it is about.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub code: Code,
    pub message: String,
    pub approval_id: Option<String>,
}

impl Refusal {
    pub fn new(code: Code, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
            approval_id: None,
        }
    }

    /// The JSON body: the broker's error body (`ErrorBody`), with a request id
    /// of its own that the gateway's log line names too.
    pub fn body(&self) -> String {
        let request_id = crate::ids::new_request_id();
        tracing::debug!(request_id, code = self.code.as_str(), "egress refusal");
        serde_json::to_string(&tessera_client::types::ErrorBody {
            error: tessera_client::types::ErrorDetail {
                code: self.code.as_str().to_owned(),
                message: self.message.clone(),
                request_id,
            },
        })
        .unwrap_or_default()
    }
}
