//! Backend kind `oauth-resource`: a protected resource (an MCP server, any
//! OAuth 2 resource server) that trusts Tessera as its authorization server.
//!
//! Nothing is exchanged here: a run gets an access token for the resource at
//! `POST /oauth/token` (RFC 8693 token exchange, `api::oauth`), decided by the
//! same Cedar request as a capability (action = the scope, resource =
//! `NAME:RESOURCE_URL`) and recorded as one, so it is revoked with its run;
//! the resource server verifies the token against the JWKS and learns of a
//! revocation at `POST /oauth/introspect`. A capability request or an
//! exchange for such a backend is refused.

pub mod grammar;
pub mod settings;

pub use settings::OAuthResourceConfig;

use super::{Backend, BackendError, Grant, Issued};
use crate::boxed::BoxFuture;
use tessera_client::types::ErrorCode;

pub struct OAuthResourceBackend;

impl Backend for OAuthResourceBackend {
    fn kind(&self) -> &'static str {
        "oauth-resource"
    }

    fn issue<'a>(&'a self, _grant: Grant<'a>) -> BoxFuture<'a, Result<Issued, BackendError>> {
        Box::pin(async {
            Err(BackendError::Unsupported {
                code: ErrorCode::InvalidResource,
                message: "access tokens for an oauth-resource are issued at POST /oauth/token"
                    .into(),
            })
        })
    }

    fn revoke<'a>(&'a self, _refs: &'a [String]) -> BoxFuture<'a, Result<(), BackendError>> {
        // Nothing downstream: a token is dead when its record is (introspection reads it).
        Box::pin(async { Ok(()) })
    }
}
