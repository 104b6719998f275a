//! Ed25519 signing keys and their key ids.
//!
//! The `kid` is the RFC 7638 JWK thumbprint of the public key, so it is derived,
//! not chosen, and two keys can never share one.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::signature::{Ed25519KeyPair, KeyPair};
use tessera_client::types::Jwk;
use zeroize::Zeroizing;

#[derive(Debug, thiserror::Error)]
#[error("stored signing key is not a valid Ed25519 PKCS#8 document")]
pub struct BadKey;

pub struct SigningKey {
    kid: String,
    pair: Ed25519KeyPair,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// A new key and its PKCS#8 document (to be sealed under the KEK and stored).
    pub fn generate() -> (Self, Zeroizing<Vec<u8>>) {
        let rng = ring::rand::SystemRandom::new();
        let doc = match Ed25519KeyPair::generate_pkcs8(&rng) {
            Ok(d) => Zeroizing::new(d.as_ref().to_vec()),
            Err(_) => std::process::abort(),
        };
        match Self::from_pkcs8(&doc) {
            Ok(k) => (k, doc),
            Err(_) => std::process::abort(),
        }
    }

    pub fn from_pkcs8(der: &[u8]) -> Result<Self, BadKey> {
        let pair = Ed25519KeyPair::from_pkcs8(der).map_err(|_| BadKey)?;
        let kid = thumbprint(pair.public_key().as_ref());
        Ok(Self { kid, pair })
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    pub fn public_key(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        out.copy_from_slice(self.pair.public_key().as_ref());
        out
    }

    pub fn sign(&self, msg: &[u8]) -> [u8; 64] {
        let mut out = [0u8; 64];
        out.copy_from_slice(self.pair.sign(msg).as_ref());
        out
    }
}

/// RFC 7638 thumbprint of an Ed25519 public key as a JWK.
pub fn thumbprint(public: &[u8]) -> String {
    let canonical = format!(
        r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#,
        URL_SAFE_NO_PAD.encode(public)
    );
    URL_SAFE_NO_PAD.encode(ring::digest::digest(
        &ring::digest::SHA256,
        canonical.as_bytes(),
    ))
}

/// The public JWK of an Ed25519 key.
pub fn public_jwk(kid: &str, public: &[u8]) -> Jwk {
    Jwk {
        kty: "OKP".to_owned(),
        crv: "Ed25519".to_owned(),
        x: URL_SAFE_NO_PAD.encode(public),
        kid: kid.to_owned(),
        use_: "sig".to_owned(),
        alg: "EdDSA".to_owned(),
    }
}
