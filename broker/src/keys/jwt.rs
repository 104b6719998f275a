//! Compact JWS with EdDSA, encoded and verified strictly.
//!
//! The verifier is deliberately narrow: exactly three base64url (unpadded) parts,
//! a header with only `alg`, `typ` and `kid`; `alg` must be `EdDSA` (so `none`,
//! HS256 keyed with the public key and every other algorithm confusion fail before
//! any key is touched); `typ` must be the one the caller expects (a capability is
//! never accepted where a downstream token is, and vice versa); `kid` must name a
//! key that is published at `now`. Only then is the signature checked, and only
//! then are the claims parsed.

use super::ring_set::KeySet;
use super::signing::SigningKey;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Longest token the verifier will look at.
pub const MAX_TOKEN_LEN: usize = 8 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    #[error("token is malformed")]
    Malformed,
    #[error("token algorithm is not EdDSA")]
    Algorithm,
    #[error("token type is not the expected one")]
    Type,
    #[error("token key id is unknown or retired")]
    UnknownKey,
    #[error("token signature is invalid")]
    Signature,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header<'a> {
    alg: &'a str,
    typ: &'a str,
    kid: &'a str,
}

/// Signs `claims` as a compact JWS with the given `typ`.
pub fn encode<C: Serialize>(key: &SigningKey, typ: &str, claims: &C) -> String {
    let header = Header {
        alg: "EdDSA",
        typ,
        kid: key.kid(),
    };
    // Serializing plain structs of strings and integers cannot fail.
    let h = serde_json::to_vec(&header).unwrap_or_default();
    let c = serde_json::to_vec(claims).unwrap_or_default();
    let mut out = String::with_capacity(64 + h.len() * 4 / 3 + c.len() * 4 / 3 + 90);
    URL_SAFE_NO_PAD.encode_string(&h, &mut out);
    out.push('.');
    URL_SAFE_NO_PAD.encode_string(&c, &mut out);
    let sig = key.sign(out.as_bytes());
    out.push('.');
    URL_SAFE_NO_PAD.encode_string(sig, &mut out);
    out
}

/// Verifies header and signature and returns the claims and the `kid`.
/// Claim checks (`iss`, `aud`, `exp`, `nbf`) are the caller's, on the typed claims.
pub fn verify<C: DeserializeOwned>(
    token: &str,
    expected_typ: &str,
    keys: &KeySet,
    now: i64,
) -> Result<(C, String), JwtError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(JwtError::Malformed);
    }
    let mut parts = token.split('.');
    let (Some(h64), Some(c64), Some(s64), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwtError::Malformed);
    };
    let header_bytes = URL_SAFE_NO_PAD
        .decode(h64)
        .map_err(|_| JwtError::Malformed)?;
    let header: Header<'_> =
        serde_json::from_slice(&header_bytes).map_err(|_| JwtError::Malformed)?;
    if header.alg != "EdDSA" {
        return Err(JwtError::Algorithm);
    }
    if header.typ != expected_typ {
        return Err(JwtError::Type);
    }
    let public = keys
        .verifying_key(header.kid, now)
        .ok_or(JwtError::UnknownKey)?;
    let sig = URL_SAFE_NO_PAD
        .decode(s64)
        .map_err(|_| JwtError::Malformed)?;
    if sig.len() != 64 {
        return Err(JwtError::Signature);
    }
    let signed_len = h64.len() + 1 + c64.len();
    ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, public)
        .verify(&token.as_bytes()[..signed_len], &sig)
        .map_err(|_| JwtError::Signature)?;
    let claims_bytes = URL_SAFE_NO_PAD
        .decode(c64)
        .map_err(|_| JwtError::Malformed)?;
    let claims = serde_json::from_slice(&claims_bytes).map_err(|_| JwtError::Malformed)?;
    Ok((claims, header.kid.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::super::ring_set::PublishedKey;
    use super::*;
    use std::sync::Arc;

    fn set() -> (KeySet, Arc<SigningKey>) {
        let key = Arc::new(SigningKey::generate().0);
        let signer = super::super::ring_set::Signer {
            key: key.clone(),
            from: 0,
        };
        let set = KeySet::new(
            vec![signer],
            vec![PublishedKey {
                kid: key.kid().to_owned(),
                public: key.public_key(),
                publish_until: None,
            }],
        );
        (set, key)
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct C {
        sub: String,
    }

    fn c() -> C {
        C {
            sub: "alice".into(),
        }
    }

    #[test]
    fn round_trip() {
        let (set, key) = set();
        let t = encode(&key, "x+jwt", &c());
        let (got, kid): (C, String) = verify(&t, "x+jwt", &set, 0).unwrap();
        assert_eq!(got, c());
        assert_eq!(kid, key.kid());
    }

    #[test]
    fn rejects_wrong_type_tampering_and_foreign_keys() {
        let (set, key) = set();
        let t = encode(&key, "x+jwt", &c());
        assert_eq!(
            verify::<C>(&t, "y+jwt", &set, 0).unwrap_err(),
            JwtError::Type
        );
        let mut parts: Vec<&str> = t.split('.').collect();
        let other = URL_SAFE_NO_PAD.encode(br#"{"sub":"mallory"}"#);
        parts[1] = &other;
        assert_eq!(
            verify::<C>(&parts.join("."), "x+jwt", &set, 0).unwrap_err(),
            JwtError::Signature
        );
        let (_, stranger) = self::set();
        let forged = encode(&stranger, "x+jwt", &c());
        assert_eq!(
            verify::<C>(&forged, "x+jwt", &set, 0).unwrap_err(),
            JwtError::UnknownKey
        );
        assert_eq!(
            verify::<C>("a.b", "x+jwt", &set, 0).unwrap_err(),
            JwtError::Malformed
        );
        assert_eq!(
            verify::<C>("a.b.c.d", "x+jwt", &set, 0).unwrap_err(),
            JwtError::Malformed
        );
    }

    #[test]
    fn rejects_alg_none_and_hs256() {
        let (set, key) = set();
        for alg in ["none", "HS256", "ES256", "eddsa"] {
            let h = URL_SAFE_NO_PAD.encode(format!(
                r#"{{"alg":"{alg}","typ":"x+jwt","kid":"{}"}}"#,
                key.kid()
            ));
            let b = URL_SAFE_NO_PAD.encode(br#"{"sub":"alice"}"#);
            let t = format!("{h}.{b}.");
            assert_eq!(
                verify::<C>(&t, "x+jwt", &set, 0).unwrap_err(),
                JwtError::Algorithm
            );
        }
    }

    #[test]
    fn retired_key_stops_verifying_after_publish_until() {
        let (mut set, key) = set();
        set.published[0].publish_until = Some(100);
        let t = encode(&key, "x+jwt", &c());
        assert!(verify::<C>(&t, "x+jwt", &set, 100).is_ok());
        assert_eq!(
            verify::<C>(&t, "x+jwt", &set, 101).unwrap_err(),
            JwtError::UnknownKey
        );
        assert_eq!(set.jwks(101).keys.len(), 0);
    }
}
