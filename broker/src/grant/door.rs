//! The doors a run obtains things through: what each hands out, which events
//! record its decisions, and the few ways a door's own nature shapes a
//! decision (what kinds of resource it admits; whether its caller can name an
//! approval to redeem).

use crate::audit::events;
use crate::store::charges::RefusedAs;
use tessera_client::types::ErrorCode;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// `POST /v1/capabilities`: a signed capability, exchanged later.
    Capability,
    /// `POST /oauth/token`: an access token for an `oauth-resource`.
    Token,
    /// The gateway's `CONNECT` (and absolute-form `http://`): one connection.
    Connect,
    /// A request inside an intercepted connection: relayed with a credential.
    Request,
}

impl Door {
    pub const ALL: [Door; 4] = [Door::Capability, Door::Token, Door::Connect, Door::Request];

    pub fn as_str(self) -> &'static str {
        match self {
            Door::Capability => "capability",
            Door::Token => "token",
            Door::Connect => "connect",
            Door::Request => "request",
        }
    }

    /// The gateway's doors (their refusals are `egress.denied`).
    pub fn is_gateway(self) -> bool {
        matches!(self, Door::Connect | Door::Request)
    }

    /// The audit event of a decision that lets the request through.
    pub fn allowed_event(self) -> &'static str {
        match self {
            Door::Capability | Door::Token => events::CAPABILITY_ISSUED,
            Door::Connect => events::EGRESS_ALLOWED,
            Door::Request => events::EGRESS_REQUEST,
        }
    }

    /// The events its refusals are recorded as.
    pub fn refused_as(self) -> RefusedAs {
        if self.is_gateway() {
            RefusedAs::EGRESS
        } else {
            RefusedAs::CAPABILITY
        }
    }

    /// Whether this door hands out resources of `kind`; why not otherwise.
    pub fn admits(self, kind: &str) -> Result<(), (ErrorCode, &'static str)> {
        let refused = |why| Err((ErrorCode::InvalidResource, why));
        match (self, kind) {
            (Door::Capability | Door::Token, "net") => refused(
                "net destinations are decided per connection by the egress gateway; \
                 no capability is issued for them",
            ),
            (Door::Capability, "oauth-resource") => refused(
                "access tokens for an oauth-resource are issued at POST /oauth/token \
                 (RFC 8693 token exchange); no capability is issued for them",
            ),
            (Door::Token, k) if k != "oauth-resource" => refused("not an oauth-resource backend"),
            (Door::Connect, k) if k != "net" => refused("not a net destination"),
            (Door::Request, k) if k != "http" => refused("not an http backend"),
            _ => Ok(()),
        }
    }

    /// Whether a request the door cannot admit is recorded (an injected
    /// request is: the tool already holds a decided connection).
    pub fn records_inadmissible(self) -> bool {
        self == Door::Request
    }

    /// Whether the caller names the approval it redeems (`approval_id`); at
    /// the gateway a client only retries, so the approved approval for the
    /// identical request is found instead.
    pub fn names_approvals(self) -> bool {
        !self.is_gateway()
    }
}
