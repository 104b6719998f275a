//! The client's DPoP key (RFC 9449): made when the client is built, kept in
//! memory only, used for every proof this client sends.
//!
//! With it, a capability (`POST /v1/capabilities`) or an access token
//! (`POST /oauth/token`) is bound to this key (`cnf.jkt`): someone who copies
//! the token out of the sandbox cannot exchange or introspect it without the
//! key. The broker's nonce (`DPoP-Nonce`), when it asks for one, is kept and
//! put in every later proof.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use sha2::{Digest, Sha256};
use std::sync::Mutex;

pub struct DpopKey {
    pair: EcdsaKeyPair,
    rng: SystemRandom,
    /// The public JWK, as the proof header carries it.
    jwk: serde_json::Value,
    thumbprint: String,
    nonce: Mutex<Option<String>>,
}

impl std::fmt::Debug for DpopKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpopKey")
            .field("jkt", &self.thumbprint)
            .field("private", &"[redacted]")
            .finish()
    }
}

impl DpopKey {
    /// A fresh P-256 key (ES256).
    pub fn generate() -> Result<DpopKey, String> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| "cannot generate a DPoP key".to_owned())?;
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .map_err(|_| "cannot load the DPoP key".to_owned())?;
        let p = pair.public_key().as_ref();
        let (x, y) = (
            URL_SAFE_NO_PAD.encode(&p[1..33]),
            URL_SAFE_NO_PAD.encode(&p[33..65]),
        );
        let canonical = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
        let thumbprint = URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()));
        let jwk = serde_json::json!({"kty": "EC", "crv": "P-256", "x": x, "y": y});
        Ok(DpopKey {
            pair,
            rng,
            jwk,
            thumbprint,
            nonce: Mutex::new(None),
        })
    }

    /// RFC 7638 thumbprint: what a bound token's `cnf.jkt` is.
    pub fn thumbprint(&self) -> &str {
        &self.thumbprint
    }

    /// Remembers the broker's latest nonce.
    pub fn set_nonce(&self, nonce: &str) {
        if let Ok(mut n) = self.nonce.lock() {
            *n = Some(nonce.to_owned());
        }
    }

    /// A proof for the broker: `method` on `url`, over `token` when presenting
    /// one, with the broker's latest nonce.
    pub fn proof(&self, method: &str, url: &str, token: Option<&str>) -> String {
        let nonce = self.nonce.lock().ok().and_then(|n| n.clone());
        self.proof_with_nonce(method, url, token, nonce.as_deref())
    }

    /// A proof for `method` on `url` (no query), over `token` when presenting
    /// one, with `nonce` (another server's nonces are its own, never the broker's).
    pub fn proof_with_nonce(
        &self,
        method: &str,
        url: &str,
        token: Option<&str>,
        nonce: Option<&str>,
    ) -> String {
        let iat = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        let mut jti = [0u8; 16];
        let _ = ring::rand::SecureRandom::fill(&self.rng, &mut jti);
        let mut claims = serde_json::json!({
            "jti": URL_SAFE_NO_PAD.encode(jti),
            "htm": method,
            "htu": url.split(['?', '#']).next().unwrap_or(url),
            "iat": iat,
        });
        if let Some(t) = token {
            claims["ath"] = URL_SAFE_NO_PAD.encode(Sha256::digest(t.as_bytes())).into();
        }
        if let Some(n) = nonce {
            claims["nonce"] = n.into();
        }
        let header = serde_json::json!({"typ": "dpop+jwt", "alg": "ES256", "jwk": self.jwk});
        let mut out = URL_SAFE_NO_PAD.encode(header.to_string());
        out.push('.');
        out.push_str(&URL_SAFE_NO_PAD.encode(claims.to_string()));
        // Signing with a valid key cannot fail; an empty signature would be refused.
        let sig = self
            .pair
            .sign(&self.rng, out.as_bytes())
            .map(|s| URL_SAFE_NO_PAD.encode(s.as_ref()))
            .unwrap_or_default();
        out.push('.');
        out.push_str(&sig);
        out
    }
}
