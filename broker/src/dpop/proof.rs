//! Parsing and checking one DPoP proof (RFC 9449 §4.3), without state: the
//! replay cache and the nonce are the caller's ([`super::Dpop`]).
//!
//! Strict like `keys::jwt`: three base64url parts; a header of exactly `typ`
//! (`dpop+jwt`), `alg` (`ES256` or `EdDSA`) and `jwk` — a public key of that
//! algorithm's type with no private member; the signature checked with that
//! key before any claim is read; then `htm`, `htu`, `iat`, `ath` and `jti`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// Longest proof looked at.
pub const MAX_PROOF_LEN: usize = 4096;
/// How old a proof's `iat` may be, and how far ahead of the broker's clock.
pub const MAX_AGE_SECS: i64 = 60;
pub const MAX_AHEAD_SECS: i64 = 5;

/// Why a proof is refused; the message is safe to return.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    #[error("the DPoP proof is not a compact JWS with a dpop+jwt header")]
    Malformed,
    #[error(
        "the DPoP proof's algorithm is not ES256 or EdDSA, or its jwk is not a public key of it"
    )]
    Key,
    #[error("the DPoP proof's signature is invalid")]
    Signature,
    #[error("the DPoP proof is for another method or URL (htm, htu)")]
    Target,
    #[error("the DPoP proof's iat is outside the accepted window")]
    Time,
    #[error("the DPoP proof's ath does not match the token presented (or is missing, or is not expected)")]
    TokenHash,
    #[error("the DPoP proof has no usable jti")]
    Jti,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    typ: String,
    alg: String,
    jwk: Jwk,
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    crv: String,
    x: String,
    y: Option<String>,
    // Private members: present means the client sent its private key.
    d: Option<serde_json::Value>,
}

#[derive(Deserialize)]
pub struct Claims {
    pub jti: String,
    pub htm: String,
    pub htu: String,
    /// A NumericDate: a fraction is allowed (and dropped).
    iat: serde_json::Number,
    pub ath: Option<String>,
    pub nonce: Option<String>,
}

impl Claims {
    /// `iat` in whole seconds (`None`: not a usable number).
    pub fn iat(&self) -> Option<i64> {
        self.iat.as_i64().or_else(|| {
            self.iat
                .as_f64()
                .filter(|f| f.is_finite() && f.abs() < 1e15)
                .map(|f| f.floor() as i64)
        })
    }
}

/// `scheme://host[:port]/path` as RFC 9449 §4.3 compares `htu`: scheme and host
/// lower-cased and a default port dropped (RFC 3986 §6.2.2-3), query and
/// fragment left out. `None`: not an absolute http(s) URL.
fn normalized(url: &str) -> Option<String> {
    let u = reqwest::Url::parse(url).ok()?;
    if !matches!(u.scheme(), "http" | "https") {
        return None;
    }
    let host = u.host_str()?;
    let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
    Some(format!("{}://{host}{port}{}", u.scheme(), u.path()))
}

/// A proof whose signature, target and time hold.
pub struct Checked {
    /// RFC 7638 thumbprint of its key (what `cnf.jkt` binds).
    pub jkt: String,
    pub claims: Claims,
}

/// `base64url(SHA-256(s))`: a key thumbprint's or `ath`'s form.
pub fn b64_sha256(s: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(s))
}

/// What the request is: its method, its URL as this broker's issuer names it,
/// and the token it presents (for `ath`), if any.
pub struct Target<'a> {
    pub method: &'a str,
    pub url: &'a str,
    pub token: Option<&'a str>,
}

pub fn check(proof: &str, target: &Target<'_>, now: i64) -> Result<Checked, ProofError> {
    if proof.len() > MAX_PROOF_LEN {
        return Err(ProofError::Malformed);
    }
    let mut parts = proof.split('.');
    let (Some(h64), Some(c64), Some(s64), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ProofError::Malformed);
    };
    let decode = |p: &str| URL_SAFE_NO_PAD.decode(p).map_err(|_| ProofError::Malformed);
    let header: Header =
        serde_json::from_slice(&decode(h64)?).map_err(|_| ProofError::Malformed)?;
    if header.typ != "dpop+jwt" {
        return Err(ProofError::Malformed);
    }
    let jwk = &header.jwk;
    if jwk.d.is_some() {
        return Err(ProofError::Key);
    }
    let x = URL_SAFE_NO_PAD
        .decode(&jwk.x)
        .map_err(|_| ProofError::Key)?;
    let sig = decode(s64)?;
    let signed = &proof.as_bytes()[..h64.len() + 1 + c64.len()];
    let (jkt_input, verified) = match (header.alg.as_str(), jwk.kty.as_str(), jwk.crv.as_str()) {
        ("ES256", "EC", "P-256") => {
            let y = jwk.y.as_deref().ok_or(ProofError::Key)?;
            let yb = URL_SAFE_NO_PAD.decode(y).map_err(|_| ProofError::Key)?;
            if x.len() != 32 || yb.len() != 32 {
                return Err(ProofError::Key);
            }
            let mut point = Vec::with_capacity(65);
            point.push(4);
            point.extend_from_slice(&x);
            point.extend_from_slice(&yb);
            let ok = ring::signature::UnparsedPublicKey::new(
                &ring::signature::ECDSA_P256_SHA256_FIXED,
                &point,
            )
            .verify(signed, &sig)
            .is_ok();
            (
                format!(r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{y}"}}"#, jwk.x),
                ok,
            )
        }
        ("EdDSA", "OKP", "Ed25519") => {
            if x.len() != 32 || jwk.y.is_some() {
                return Err(ProofError::Key);
            }
            let ok = ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, &x)
                .verify(signed, &sig)
                .is_ok();
            (
                format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#, jwk.x),
                ok,
            )
        }
        _ => return Err(ProofError::Key),
    };
    if !verified {
        return Err(ProofError::Signature);
    }
    // Canonical base64url only: another spelling of the same key would be
    // another thumbprint (and so not the key a token is bound to).
    if URL_SAFE_NO_PAD.encode(&x) != jwk.x {
        return Err(ProofError::Key);
    }
    let claims: Claims =
        serde_json::from_slice(&decode(c64)?).map_err(|_| ProofError::Malformed)?;
    let same_url = normalized(&claims.htu)
        .zip(normalized(target.url))
        .is_some_and(|(a, b)| a == b);
    if claims.htm != target.method || !same_url {
        return Err(ProofError::Target);
    }
    let iat = claims.iat().ok_or(ProofError::Time)?;
    if iat < now - MAX_AGE_SECS || iat > now + MAX_AHEAD_SECS {
        return Err(ProofError::Time);
    }
    let expected_ath = target.token.map(|t| b64_sha256(t.as_bytes()));
    if claims.ath != expected_ath {
        return Err(ProofError::TokenHash);
    }
    if claims.jti.is_empty()
        || claims.jti.len() > 128
        || !claims.jti.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(ProofError::Jti);
    }
    Ok(Checked {
        jkt: b64_sha256(jkt_input.as_bytes()),
        claims,
    })
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};

    /// A client's P-256 key, signing proofs as a client would.
    pub struct ClientKey(pub EcdsaKeyPair);

    impl ClientKey {
        #[allow(clippy::new_without_default)]
        pub fn new() -> ClientKey {
            let rng = SystemRandom::new();
            let pkcs8 =
                EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
            ClientKey(
                EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
                    .unwrap(),
            )
        }

        pub fn jwk(&self) -> serde_json::Value {
            let p = self.0.public_key().as_ref();
            serde_json::json!({"kty": "EC", "crv": "P-256",
                "x": URL_SAFE_NO_PAD.encode(&p[1..33]), "y": URL_SAFE_NO_PAD.encode(&p[33..])})
        }

        pub fn proof_with(&self, header: serde_json::Value, claims: serde_json::Value) -> String {
            let h = URL_SAFE_NO_PAD.encode(header.to_string());
            let c = URL_SAFE_NO_PAD.encode(claims.to_string());
            let signing = format!("{h}.{c}");
            let sig = self
                .0
                .sign(&SystemRandom::new(), signing.as_bytes())
                .unwrap();
            format!("{signing}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
        }

        pub fn proof(&self, method: &str, url: &str, iat: i64, token: Option<&str>) -> String {
            let mut claims = serde_json::json!({"jti": crate::ids::new_id(), "htm": method, "htu": url, "iat": iat});
            if let Some(t) = token {
                claims["ath"] = b64_sha256(t.as_bytes()).into();
            }
            self.proof_with(
                serde_json::json!({"typ": "dpop+jwt", "alg": "ES256", "jwk": self.jwk()}),
                claims,
            )
        }
    }

    const URL: &str = "https://broker.example/v1/exchange";

    fn target(token: Option<&str>) -> Target<'_> {
        Target {
            method: "POST",
            url: URL,
            token,
        }
    }

    #[test]
    fn a_good_proof_gives_its_keys_thumbprint() {
        let k = ClientKey::new();
        let c = check(
            &k.proof("POST", URL, 1000, Some("tok")),
            &target(Some("tok")),
            1000,
        )
        .unwrap();
        let jwk = k.jwk();
        let canon = format!(
            r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
            jwk["x"].as_str().unwrap(),
            jwk["y"].as_str().unwrap()
        );
        assert_eq!(c.jkt, b64_sha256(canon.as_bytes()));
    }

    #[test]
    fn wrong_method_url_time_token_or_key_are_refused() {
        let k = ClientKey::new();
        let t = Some("tok");
        assert_eq!(
            check(&k.proof("GET", URL, 1000, t), &target(t), 1000).err(),
            Some(ProofError::Target)
        );
        assert_eq!(
            check(
                &k.proof("POST", "https://broker.example/v1/introspect", 1000, t),
                &target(t),
                1000
            )
            .err(),
            Some(ProofError::Target)
        );
        assert_eq!(
            check(&k.proof("POST", URL, 900, t), &target(t), 1000).err(),
            Some(ProofError::Time)
        );
        assert_eq!(
            check(&k.proof("POST", URL, 1010, t), &target(t), 1000).err(),
            Some(ProofError::Time)
        );
        assert_eq!(
            check(&k.proof("POST", URL, 1000, Some("other")), &target(t), 1000).err(),
            Some(ProofError::TokenHash)
        );
        assert_eq!(
            check(&k.proof("POST", URL, 1000, None), &target(t), 1000).err(),
            Some(ProofError::TokenHash)
        );
        assert_eq!(
            check(&k.proof("POST", URL, 1000, t), &target(None), 1000).err(),
            Some(ProofError::TokenHash)
        );
        // Another key's signature under this key's jwk.
        let other = ClientKey::new();
        let good = k.proof("POST", URL, 1000, t);
        let forged = other.proof("POST", URL, 1000, t);
        let mixed = format!(
            "{}.{}",
            &good[..good.rfind('.').unwrap()],
            &forged[forged.rfind('.').unwrap() + 1..]
        );
        assert_eq!(
            check(&mixed, &target(t), 1000).err(),
            Some(ProofError::Signature)
        );
        // A private key in the header, alg none, HS256, a symmetric jwk.
        let mut jwk = k.jwk();
        jwk["d"] = "AAAA".into();
        let claims = serde_json::json!({"jti": "j", "htm": "POST", "htu": URL, "iat": 1000, "ath": b64_sha256(b"tok")});
        let p = k.proof_with(
            serde_json::json!({"typ": "dpop+jwt", "alg": "ES256", "jwk": jwk}),
            claims.clone(),
        );
        assert_eq!(check(&p, &target(t), 1000).err(), Some(ProofError::Key));
        for alg in ["none", "HS256", "RS256", "ES384"] {
            let p = k.proof_with(
                serde_json::json!({"typ": "dpop+jwt", "alg": alg, "jwk": k.jwk()}),
                claims.clone(),
            );
            assert_eq!(
                check(&p, &target(t), 1000).err(),
                Some(ProofError::Key),
                "{alg}"
            );
        }
        let p = k.proof_with(
            serde_json::json!({"typ": "JWT", "alg": "ES256", "jwk": k.jwk()}),
            claims.clone(),
        );
        assert_eq!(
            check(&p, &target(t), 1000).err(),
            Some(ProofError::Malformed)
        );
        let p = k.proof_with(serde_json::json!({"typ": "dpop+jwt", "alg": "ES256", "jwk": k.jwk(), "x5u": "https://x"}), claims);
        assert_eq!(
            check(&p, &target(t), 1000).err(),
            Some(ProofError::Malformed)
        );
    }

    #[test]
    fn htu_is_compared_as_rfc_3986_normalises_it() {
        let k = ClientKey::new();
        for same in [
            format!("{URL}?a=b"),
            "HTTPS://Broker.Example/v1/exchange".to_owned(),
            "https://broker.example:443/v1/exchange#x".to_owned(),
        ] {
            let p = k.proof("POST", &same, 1000, None);
            assert!(check(&p, &target(None), 1000).is_ok(), "{same}");
        }
        for other in [
            "https://broker.example/v1/Exchange",
            "https://broker.example:8443/v1/exchange",
            "http://broker.example/v1/exchange",
            "https://broker.example/v1/exchange/",
            "/v1/exchange",
        ] {
            let p = k.proof("POST", other, 1000, None);
            assert_eq!(
                check(&p, &target(None), 1000).err(),
                Some(ProofError::Target),
                "{other}"
            );
        }
    }

    #[test]
    fn iat_may_have_a_fraction() {
        let k = ClientKey::new();
        let claims = serde_json::json!({"jti": "j", "htm": "POST", "htu": URL, "iat": 1000.5});
        let p = k.proof_with(
            serde_json::json!({"typ": "dpop+jwt", "alg": "ES256", "jwk": k.jwk()}),
            claims,
        );
        assert!(check(&p, &target(None), 1000).is_ok());
    }

    proptest::proptest! {
        /// Whatever is sent as a proof, nothing panics and only a proof signed
        /// by its own key for this method, URL, time and token passes: any
        /// change to a good proof's bytes is refused.
        #[test]
        fn no_altered_proof_passes(flip in 0usize..4096, bit in 0u8..8, junk in ".{0,300}") {
            let _ = check(&junk, &target(Some("tok")), 1000);
            let k = ClientKey::new();
            let good = k.proof("POST", URL, 1000, Some("tok"));
            let mut bytes = good.clone().into_bytes();
            let i = flip % bytes.len();
            bytes[i] ^= 1 << bit;
            if let Ok(altered) = String::from_utf8(bytes) {
                if altered != good {
                    let r = check(&altered, &target(Some("tok")), 1000);
                    // Base64url's last character carries spare bits a decoder may ignore:
                    // if it still passes, it must decode to the very same proof.
                    if let Ok(c) = r {
                        proptest::prop_assert_eq!(c.jkt, check(&good, &target(Some("tok")), 1000).unwrap().jkt);
                        proptest::prop_assert!(URL_SAFE_NO_PAD.decode(altered.split('.').nth(2).unwrap_or("")).is_ok());
                    }
                }
            }
        }
    }
}
