//! Backend kind `net`: network destinations (`net:HOST:PORT`) that the egress
//! gateway (`crate::gateway`) puts to policy for every connection a run's tool
//! opens. Nothing is minted: there is no credential for a destination, so a
//! capability request for one is refused and an exchange never reaches
//! [`NetBackend::issue`]; the decision is made per connection, audited, and
//! rate-charged like a capability request.

pub mod cidr;
pub mod grammar;
pub mod settings;

pub use settings::NetConfig;

use super::{Backend, BackendError, Grant, Issued};
use crate::boxed::BoxFuture;
use tessera_client::types::ErrorCode;

pub struct NetBackend;

impl Backend for NetBackend {
    fn kind(&self) -> &'static str {
        "net"
    }

    fn issue<'a>(&'a self, _grant: Grant<'a>) -> BoxFuture<'a, Result<Issued, BackendError>> {
        Box::pin(async {
            Err(BackendError::Unsupported {
                code: ErrorCode::InvalidResource,
                message: "net destinations are decided per connection by the egress gateway".into(),
            })
        })
    }

    fn revoke<'a>(&'a self, _refs: &'a [String]) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(async { Ok(()) })
    }
}
