//! Signing keys, the key-encryption key, and JWTs.
//!
//! One crypto stack on purpose: `ring` does Ed25519 signing/verification, SHA-256
//! and AES-256-GCM. Capabilities are compact JWS with `alg` fixed to `EdDSA`; the
//! verifier in [`jwt`] never lets a token choose its algorithm.
//!
//! Private signing keys are stored only sealed under the key-encryption key
//! ([`kek::Kek`]); the in-memory [`KeyRing`] holds the active signing key and every
//! public key that is still published in the JWKS.

pub mod jwt;
pub mod kek;
pub mod manage;
pub mod ring_set;
pub mod signing;

pub use kek::Kek;
pub use ring_set::{KeyRing, KeySet, PublishedKey};
pub use signing::SigningKey;
