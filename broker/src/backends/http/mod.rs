//! Backend kind `http`: a downstream HTTP API that the egress gateway calls *for*
//! a run's tool, adding the credential on the way out (credential injection,
//! docs/gateway.md). The tool never holds the credential: it sends its request
//! through the gateway, which terminates its TLS with the run's own CA
//! (`gateway::inject`), decides the request (action = the HTTP method, resource
//! = `BACKEND:/path`), strips whatever credential the tool sent, injects the
//! rule's and forwards it to the real API over verified TLS.
//!
//! Nothing is minted for a capability: a capability request for an `http`
//! resource is refused, as for `net` — every request is decided where it is
//! made, by the gateway.

pub mod grammar;
pub mod settings;

pub use settings::{Auth, HttpConfig};

use super::{Backend, BackendError, Grant, Issued};
use crate::boxed::BoxFuture;
use tessera_client::types::ErrorCode;

pub struct HttpBackend;

impl Backend for HttpBackend {
    fn kind(&self) -> &'static str {
        "http"
    }

    fn issue<'a>(&'a self, _grant: Grant<'a>) -> BoxFuture<'a, Result<Issued, BackendError>> {
        Box::pin(async {
            Err(BackendError::Unsupported {
                code: ErrorCode::InvalidResource,
                message: "http requests are decided one by one by the egress gateway, which injects the credential".into(),
            })
        })
    }

    fn revoke<'a>(&'a self, _refs: &'a [String]) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(async { Ok(()) })
    }
}
