//! Backend kind `token`: an audience-restricted JWT for an internal service.
//!
//! In the spirit of RFC 8693 token exchange: the capability is exchanged for an
//! access token (`typ` `at+jwt`, RFC 9068) whose `aud` is the one service the
//! backend names, `scope` the capability's action, `sub` the user, and `act` the
//! run acting for them. It expires with the capability. The service verifies it
//! with the broker's JWKS and, to honour revocation before expiry, with
//! `POST /v1/introspect` (the token's `jti` is the lease id).

pub mod grammar;
pub mod settings;

pub use settings::TokenConfig;

use super::{Backend, BackendError, Grant, Issued};
use crate::boxed::BoxFuture;
use crate::keys::{jwt, KeyRing};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const ACCESS_TOKEN_TYP: &str = "at+jwt";

pub use tessera_client::types::{AccessTokenClaims, Actor};

pub struct TokenBackend {
    pub issuer: String,
    pub audience: String,
    pub keys: Arc<KeyRing>,
}

impl Backend for TokenBackend {
    fn kind(&self) -> &'static str {
        "token"
    }

    fn issue<'a>(&'a self, grant: Grant<'a>) -> BoxFuture<'a, Result<Issued, BackendError>> {
        Box::pin(async move {
            let c = grant.claims;
            let claims = AccessTokenClaims {
                iss: self.issuer.clone(),
                aud: self.audience.clone(),
                sub: c.sub.clone(),
                jti: grant.lease_id.into(),
                iat: grant.now,
                nbf: grant.now,
                exp: c.exp,
                client_id: format!("tessera-run:{}", c.run),
                scope: c.act.clone(),
                resource: grant.path.to_owned(),
                act: Actor {
                    sub: format!("run:{}", c.run),
                },
                cap: c.jti.clone(),
                // The service that performs the action checks it against what it is asked.
                args: c.args.clone(),
            };
            let keys = self.keys.snapshot();
            let token = jwt::encode(keys.signer(grant.now), ACCESS_TOKEN_TYP, &claims);
            let fields = BTreeMap::from([
                ("token".to_owned(), serde_json::Value::String(token)),
                ("token_type".to_owned(), "Bearer".into()),
                (
                    "issued_token_type".to_owned(),
                    "urn:ietf:params:oauth:token-type:jwt".into(),
                ),
                ("audience".to_owned(), self.audience.clone().into()),
                ("scope".to_owned(), c.act.clone().into()),
            ]);
            Ok(Issued {
                fields,
                expires_at: c.exp,
            })
        })
    }

    fn revoke<'a>(&'a self, _refs: &'a [String]) -> BoxFuture<'a, Result<(), BackendError>> {
        // Stateless: a token that never left the broker needs no downstream call;
        // one that did is revoked by its lease row, which introspection reads.
        Box::pin(async { Ok(()) })
    }
}
