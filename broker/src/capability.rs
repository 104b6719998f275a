//! Capability tokens: the claims of DESIGN §2 and their strict verification.
//!
//! A capability is an EdDSA JWT with `typ` [`CAPABILITY_TYP`], `iss` = the broker's
//! issuer and `aud` = `<issuer>/capabilities`, so only this broker accepts it and it
//! can never pass for a downstream token (which has another `typ` and `aud`).
//! Signature and time checks here are necessary, not sufficient: the store decides
//! whether it was revoked, its run ended, or its uses ran out.

use crate::keys::jwt::{self, JwtError};
use crate::keys::KeySet;

pub const CAPABILITY_TYP: &str = "tsr-cap+jwt";
/// Allowed clock skew for `nbf`/`iat` between replicas.
const LEEWAY_SECS: i64 = 5;

/// The claims (a wire type, shared with clients that verify capabilities).
pub use tessera_client::types::CapabilityClaims;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error(transparent)]
    Jwt(#[from] JwtError),
    #[error("token has expired")]
    Expired,
    #[error("token is not valid yet")]
    NotYetValid,
    #[error("token was issued by another issuer")]
    Issuer,
    #[error("token is for another audience")]
    Audience,
}

impl TokenError {
    pub fn code(&self) -> &'static str {
        match self {
            TokenError::Expired => "token_expired",
            _ => "invalid_token",
        }
    }
}

/// Verifies a capability's signature, type, issuer, audience and times.
pub fn verify(
    token: &str,
    keys: &KeySet,
    issuer: &str,
    audience: &str,
    now: i64,
) -> Result<CapabilityClaims, TokenError> {
    let (claims, _kid): (CapabilityClaims, String) = jwt::verify(token, CAPABILITY_TYP, keys, now)?;
    check_times_and_parties(
        &claims.iss,
        &claims.aud,
        claims.nbf,
        claims.exp,
        issuer,
        audience,
        now,
    )?;
    Ok(claims)
}

pub fn check_times_and_parties(
    iss: &str,
    aud: &str,
    nbf: i64,
    exp: i64,
    issuer: &str,
    audience: &str,
    now: i64,
) -> Result<(), TokenError> {
    if iss != issuer {
        return Err(TokenError::Issuer);
    }
    if aud != audience {
        return Err(TokenError::Audience);
    }
    if now >= exp {
        return Err(TokenError::Expired);
    }
    if nbf > now + LEEWAY_SECS {
        return Err(TokenError::NotYetValid);
    }
    Ok(())
}
