//! DPoP (RFC 9449): tokens bound to a key the client holds.
//!
//! A request may carry one `DPoP` header, a proof signed by the client's key
//! for this method and URL, fresh, and (when it presents a bound token) over
//! that token's hash. Where a token is issued (`POST /v1/capabilities`,
//! `POST /oauth/token`) a valid proof binds it: `cnf.jkt` is the key's
//! thumbprint. Where a bound token is presented (`POST /v1/exchange`,
//! `POST /v1/introspect`) a valid proof by that key is required, so a stolen
//! token is worth nothing without the key.
//!
//! What this module adds to [`proof::check`]: each proof is accepted once (a
//! replay cache keyed by key and `jti`, bounded, for as long as a proof's `iat`
//! window lasts), and, with `[oauth] dpop_nonce`, a server nonce (§8) that
//! makes proofs made in advance useless. Nonces are MACs of a one-minute time
//! step under a key derived from the KEK, so every replica issues and accepts
//! the same ones without sharing state; one stays valid for one to two minutes.
//! The replay cache is per process: a proof replayed to another replica
//! within its minute is not caught there (nonces narrow this; docs/oauth.md).

pub mod proof;
pub mod replay;

use crate::keys::Kek;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use proof::{ProofError, Target};
use ring::hmac;

pub use proof::b64_sha256;

/// A nonce's time step.
const NONCE_STEP_SECS: i64 = 60;

/// Why a request's DPoP is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DpopError {
    #[error(transparent)]
    Proof(#[from] ProofError),
    #[error("the DPoP proof was already used")]
    Replayed,
    #[error("more than one DPoP header")]
    Several,
    #[error("this broker has no [oauth] issuer, so it cannot check a DPoP proof's htu")]
    NotConfigured,
    #[error(
        "too many DPoP proofs in the last minute (for this run, or in all); try again shortly"
    )]
    Busy,
    #[error("a DPoP proof is required: the token is bound to a key")]
    Missing,
    #[error("the DPoP proof's key is not the one the token is bound to")]
    WrongKey,
    /// The proof lacks a current nonce: retry with the one in `DPoP-Nonce`.
    #[error("the DPoP proof needs the server's nonce: retry with the DPoP-Nonce header's value")]
    UseNonce,
}

pub struct Dpop {
    issuer: Option<String>,
    require_nonce: bool,
    nonce_key: hmac::Key,
    /// Proofs seen, by `SHA-256(jkt || jti)`'s first 16 bytes.
    replay: replay::Replay,
}

impl Dpop {
    pub fn new(issuer: Option<String>, require_nonce: bool, kek: &Kek) -> Dpop {
        let key = kek.derive("tessera dpop nonce v1");
        Dpop {
            issuer,
            require_nonce,
            nonce_key: hmac::Key::new(hmac::HMAC_SHA256, &key[..]),
            replay: replay::Replay::default(),
        }
    }

    pub fn requires_nonce(&self) -> bool {
        self.require_nonce
    }

    /// The nonce to hand out now.
    pub fn nonce(&self, now: i64) -> String {
        self.nonce_at(now.div_euclid(NONCE_STEP_SECS))
    }

    fn nonce_at(&self, step: i64) -> String {
        let tag = hmac::sign(&self.nonce_key, &step.to_be_bytes());
        let mut raw = step.to_be_bytes().to_vec();
        raw.extend_from_slice(&tag.as_ref()[..16]);
        URL_SAFE_NO_PAD.encode(raw)
    }

    fn nonce_is_current(&self, nonce: &str, now: i64) -> bool {
        let step = now.div_euclid(NONCE_STEP_SECS);
        [step, step - 1].iter().any(|s| {
            let want = self.nonce_at(*s);
            // A MAC compared in constant time.
            bool::from(subtle::ConstantTimeEq::ct_eq(
                want.as_bytes(),
                nonce.as_bytes(),
            ))
        })
    }

    /// Checks the request's `DPoP` headers (all of them: more than one is
    /// refused) for `method` on `path`, presenting `token` if any, for `run`
    /// (whose share of the replay cache it takes). `Ok(None)`: no proof;
    /// `Ok(Some(jkt))`: a valid proof by the key with that thumbprint.
    pub fn check(
        &self,
        headers: &axum::http::HeaderMap,
        (method, path): (&str, &str),
        token: Option<&str>,
        run: &str,
        now: i64,
    ) -> Result<Option<String>, DpopError> {
        let mut values = headers.get_all("dpop").iter();
        let Some(first) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err(DpopError::Several);
        }
        let issuer = self.issuer.as_deref().ok_or(DpopError::NotConfigured)?;
        let proof = first.to_str().map_err(|_| ProofError::Malformed)?;
        let url = format!("{issuer}{path}");
        let checked = proof::check(
            proof,
            &Target {
                method,
                url: &url,
                token,
            },
            now,
        )?;
        if self.require_nonce
            && !checked
                .claims
                .nonce
                .as_deref()
                .is_some_and(|n| self.nonce_is_current(n, now))
        {
            return Err(DpopError::UseNonce);
        }
        let iat = checked.claims.iat().unwrap_or(now);
        self.remember(&checked.jkt, &checked.claims.jti, iat, run, now)?;
        Ok(Some(checked.jkt))
    }

    /// Like [`Dpop::check`] for a token bound to `jkt`: a valid proof by that
    /// key is required.
    pub fn check_bound(
        &self,
        headers: &axum::http::HeaderMap,
        target: (&str, &str),
        (token, jkt): (&str, &str),
        run: &str,
        now: i64,
    ) -> Result<(), DpopError> {
        match self.check(headers, target, Some(token), run, now)? {
            None => Err(DpopError::Missing),
            Some(k) if k == jkt => Ok(()),
            Some(_) => Err(DpopError::WrongKey),
        }
    }

    fn remember(
        &self,
        jkt: &str,
        jti: &str,
        iat: i64,
        run: &str,
        now: i64,
    ) -> Result<(), DpopError> {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(jkt.as_bytes());
        h.update([0]);
        h.update(jti.as_bytes());
        let mut id = [0u8; 16];
        id.copy_from_slice(&h.finalize()[..16]);
        // Past this, `proof::check` refuses the proof on its iat anyway.
        let until = iat + proof::MAX_AGE_SECS + 1;
        self.replay
            .remember(id, run, until, now)
            .map_err(|r| match r {
                replay::Refused::Replayed => DpopError::Replayed,
                replay::Refused::Full => DpopError::Busy,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::proof::tests::ClientKey;
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    fn dpop(nonce: bool) -> Dpop {
        Dpop::new(Some("https://b.example".into()), nonce, &Kek::generate().0)
    }

    fn headers(proof: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("dpop", HeaderValue::from_str(proof).unwrap());
        h
    }

    #[test]
    fn a_proof_is_accepted_once() {
        let d = dpop(false);
        let k = ClientKey::new();
        let p = k.proof("POST", "https://b.example/v1/exchange", 100, Some("t"));
        let jkt = d
            .check(&headers(&p), ("POST", "/v1/exchange"), Some("t"), "r", 100)
            .unwrap()
            .unwrap();
        assert_eq!(
            d.check(&headers(&p), ("POST", "/v1/exchange"), Some("t"), "r", 101),
            Err(DpopError::Replayed)
        );
        let p2 = k.proof("POST", "https://b.example/v1/exchange", 100, Some("t"));
        assert_eq!(
            d.check_bound(
                &headers(&p2),
                ("POST", "/v1/exchange"),
                ("t", &jkt),
                "r",
                100
            ),
            Ok(())
        );
        let p3 = ClientKey::new().proof("POST", "https://b.example/v1/exchange", 100, Some("t"));
        assert_eq!(
            d.check_bound(
                &headers(&p3),
                ("POST", "/v1/exchange"),
                ("t", &jkt),
                "r",
                100
            ),
            Err(DpopError::WrongKey)
        );
        assert_eq!(
            d.check_bound(
                &HeaderMap::new(),
                ("POST", "/v1/exchange"),
                ("t", &jkt),
                "r",
                100
            ),
            Err(DpopError::Missing)
        );
        let mut two = headers(&p2);
        two.append("dpop", HeaderValue::from_str(&p3).unwrap());
        assert_eq!(
            d.check(&two, ("POST", "/v1/exchange"), Some("t"), "r", 100),
            Err(DpopError::Several)
        );
    }

    #[test]
    fn nonces_are_required_when_configured_and_expire() {
        let d = dpop(true);
        let k = ClientKey::new();
        let url = "https://b.example/oauth/token";
        let p = k.proof("POST", url, 1000, None);
        assert_eq!(
            d.check(&headers(&p), ("POST", "/oauth/token"), None, "r", 1000),
            Err(DpopError::UseNonce)
        );
        let with = |nonce: &str, iat: i64| {
            k.proof_with(
                serde_json::json!({"typ": "dpop+jwt", "alg": "ES256", "jwk": k.jwk()}),
                serde_json::json!({"jti": crate::ids::new_id(), "htm": "POST", "htu": url, "iat": iat, "nonce": nonce}),
            )
        };
        let n = d.nonce(1000);
        assert!(d
            .check(
                &headers(&with(&n, 1000)),
                ("POST", "/oauth/token"),
                None,
                "r",
                1000
            )
            .unwrap()
            .is_some());
        assert!(
            d.check(
                &headers(&with(&n, 1050)),
                ("POST", "/oauth/token"),
                None,
                "r",
                1050
            )
            .is_ok(),
            "the previous step's"
        );
        assert_eq!(
            d.check(
                &headers(&with(&n, 1200)),
                ("POST", "/oauth/token"),
                None,
                "r",
                1200
            ),
            Err(DpopError::UseNonce)
        );
        let other = dpop(true).nonce(1000);
        assert_eq!(
            d.check(
                &headers(&with(&other, 1000)),
                ("POST", "/oauth/token"),
                None,
                "r",
                1000
            ),
            Err(DpopError::UseNonce),
            "another KEK's nonce"
        );
    }

    /// What a DPoP proof costs the broker, beside what verifying the capability
    /// it presents costs, interleaved in one run:
    /// `cargo test --release -p tessera-broker --lib -- --ignored --nocapture proof_check_cost`.
    #[test]
    #[ignore]
    fn proof_check_cost() {
        use std::time::Instant;
        let d = dpop(false);
        let k = ClientKey::new();
        let signing = crate::keys::SigningKey::generate().0;
        let token = crate::keys::jwt::encode(&signing, "x+jwt", &serde_json::json!({"sub": "a"}));
        let signer = crate::keys::ring_set::Signer {
            key: std::sync::Arc::new(crate::keys::SigningKey::generate().0),
            from: 0,
        };
        let set = crate::keys::KeySet::new(
            vec![signer],
            vec![crate::keys::ring_set::PublishedKey {
                kid: signing.kid().to_owned(),
                public: signing.public_key(),
                publish_until: None,
            }],
        );
        let n = 2_000;
        let proofs: Vec<_> = (0..n)
            .map(|_| headers(&k.proof("POST", "https://b.example/v1/exchange", 100, Some(&token))))
            .collect();
        let (mut dpop_s, mut jwt_s) = (0.0, 0.0);
        for round in 0..4 {
            let t = Instant::now();
            for p in &proofs[round * n / 4..(round + 1) * n / 4] {
                let _ = std::hint::black_box(d.check(
                    p,
                    ("POST", "/v1/exchange"),
                    Some(&token),
                    "r",
                    100,
                ));
            }
            dpop_s += t.elapsed().as_secs_f64();
            let t = Instant::now();
            for _ in 0..n / 4 {
                let _ = std::hint::black_box(crate::keys::jwt::verify::<serde_json::Value>(
                    &token, "x+jwt", &set, 0,
                ));
            }
            jwt_s += t.elapsed().as_secs_f64();
        }
        println!(
            "DPoP proof check (ES256, replay cache): {:.1} µs; EdDSA JWT verify: {:.1} µs",
            dpop_s * 1e6 / n as f64,
            jwt_s * 1e6 / n as f64
        );
    }
}
