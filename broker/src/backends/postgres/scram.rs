//! SCRAM-SHA-256 verifiers (RFC 5802, RFC 7677) computed by the broker.
//!
//! Why: `CREATE ROLE … PASSWORD '<plaintext>'` puts the password into the
//! statement, and so into any statement log, `pg_stat_statements` or error
//! report on the server. PostgreSQL stores only a verifier, and accepts one in
//! place of a password; sending it means the plaintext never leaves the broker.
//! The format is PostgreSQL's:
//! `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (standard base64).
//!
//! PBKDF2 is computed here on SHA-256's compression function directly: with the
//! HMAC key's inner and outer states computed once, each iteration is exactly two
//! one-block compressions. ring's `pbkdf2::derive` gives the same bytes (a test
//! compares them) at about twice the CPU — its per-iteration context copies cost
//! as much as the hashing — and the verifier is the largest CPU cost of an
//! exchange (see [`ITERATIONS`]).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sha2::compress256;
use sha2::digest::generic_array::GenericArray;

/// The default: PostgreSQL's own (`scram_iterations`) and RFC 7677's floor.
///
/// What it costs: CPU for the broker to compute (~0.4 ms here), *and* for
/// PostgreSQL on every `CREATE ROLE` (it verifies that the new password is not
/// the empty string, which runs the same PBKDF2), *and* for every client login.
/// What it buys: resistance to guessing a weak password from a stolen verifier —
/// nothing for 256 random bits. Backends may lower it (`scram_iterations`)
/// where throughput matters more than the RFC's SHOULD.
pub const ITERATIONS: u32 = 4096;

/// The verifier for `password` with a fresh random 16-byte salt.
pub fn verifier(password: &str, iterations: u32) -> String {
    verifier_with(password, &crate::ids::random_bytes::<16>(), iterations)
}

/// The verifier for `password`, `salt` and `iterations`. The password is used
/// as is: SASLprep is the identity on the printable ASCII the broker generates.
pub fn verifier_with(password: &str, salt: &[u8], iterations: u32) -> String {
    let salted = pbkdf2_sha256(password.as_bytes(), salt, iterations.max(1));
    let key = HmacSha256::new(&salted);
    let client_key = key.mac(b"Client Key");
    let stored_key = sha256(&client_key);
    let server_key = key.mac(b"Server Key");
    format!(
        "SCRAM-SHA-256${iterations}:{}${}:{}",
        STANDARD.encode(salt),
        STANDARD.encode(stored_key),
        STANDARD.encode(server_key)
    )
}

const IV: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// PBKDF2-HMAC-SHA256 with a 32-byte output (one block: `Hi()` of RFC 5802).
fn pbkdf2_sha256(password: &[u8], salt: &[u8], iterations: u32) -> [u8; 32] {
    let key = HmacSha256::new(password);
    let mut first = Vec::with_capacity(salt.len() + 4);
    first.extend_from_slice(salt);
    first.extend_from_slice(&1u32.to_be_bytes());
    let mut u = key.mac(&first);
    let mut out = u;
    for _ in 1..iterations {
        u = key.mac_32(&u);
        for (o, b) in out.iter_mut().zip(u) {
            *o ^= b;
        }
    }
    out
}

/// HMAC-SHA256 with the key's padded inner and outer blocks absorbed once.
struct HmacSha256 {
    inner: [u32; 8],
    outer: [u32; 8],
}

impl HmacSha256 {
    fn new(key: &[u8]) -> HmacSha256 {
        let mut block = [0u8; 64];
        if key.len() > 64 {
            block[..32].copy_from_slice(&sha256(key));
        } else {
            block[..key.len()].copy_from_slice(key);
        }
        let absorb = |pad: u8| {
            let mut state = IV;
            let padded: [u8; 64] = std::array::from_fn(|i| block[i] ^ pad);
            compress256(&mut state, &[*GenericArray::from_slice(&padded)]);
            state
        };
        HmacSha256 {
            inner: absorb(0x36),
            outer: absorb(0x5c),
        }
    }

    fn mac(&self, message: &[u8]) -> [u8; 32] {
        let inner = finish(self.inner, 64, message);
        finish(self.outer, 64, &inner)
    }

    /// [`HmacSha256::mac`] of a 32-byte message: two one-block compressions.
    fn mac_32(&self, message: &[u8; 32]) -> [u8; 32] {
        let inner = finish_32(self.inner, message);
        finish_32(self.outer, &inner)
    }
}

fn sha256(data: &[u8]) -> [u8; 32] {
    finish(IV, 0, data)
}

/// Absorbs `message` into `state`, which has already absorbed `absorbed` bytes
/// (a multiple of 64), pads, and returns the digest.
fn finish(mut state: [u32; 8], absorbed: u64, message: &[u8]) -> [u8; 32] {
    let bits = (absorbed + message.len() as u64) * 8;
    let mut blocks = message.chunks_exact(64);
    for block in &mut blocks {
        compress256(&mut state, &[*GenericArray::from_slice(block)]);
    }
    let rest = blocks.remainder();
    let mut tail = [0u8; 128];
    tail[..rest.len()].copy_from_slice(rest);
    tail[rest.len()] = 0x80;
    let len = if rest.len() + 9 <= 64 { 64 } else { 128 };
    tail[len - 8..len].copy_from_slice(&bits.to_be_bytes());
    for block in tail[..len].chunks_exact(64) {
        compress256(&mut state, &[*GenericArray::from_slice(block)]);
    }
    digest_bytes(&state)
}

/// [`finish`] of a 32-byte message after one 64-byte key block.
fn finish_32(mut state: [u32; 8], message: &[u8; 32]) -> [u8; 32] {
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(message);
    block[32] = 0x80;
    block[56..].copy_from_slice(&((64u64 + 32) * 8).to_be_bytes());
    compress256(&mut state, &[*GenericArray::from_slice(&block)]);
    digest_bytes(&state)
}

fn digest_bytes(state: &[u32; 8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (chunk, word) in out.chunks_exact_mut(4).zip(state) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use ring::{digest, hmac, pbkdf2};
    use std::num::NonZeroU32;

    /// Computed by PostgreSQL 15 itself: `SET password_encryption =
    /// 'scram-sha-256'; CREATE ROLE r PASSWORD 'pencil'`, read from `pg_authid`.
    const PG_VECTOR: &str = "SCRAM-SHA-256$4096:+KG8+k02v3JncJ+seU+ZHQ==$kgbLMXKNMNIdojYNlYMM1erUkpZjV7tPV0753lucd9U=:lbzMjsa+QsblS0dqa7kxdFpKphcW62kOR4TyEsBIdzM=";

    #[test]
    fn matches_postgresql() {
        let salt = STANDARD.decode("+KG8+k02v3JncJ+seU+ZHQ==").unwrap();
        assert_eq!(verifier_with("pencil", &salt, 4096), PG_VECTOR);
    }

    #[test]
    fn fresh_salt_each_time() {
        // Not base64: the password cannot appear in a verifier by chance.
        let a = verifier("pass word!", ITERATIONS);
        let b = verifier("pass word!", ITERATIONS);
        assert_ne!(a, b);
        assert!(a.starts_with("SCRAM-SHA-256$4096:"));
        assert!(!a.contains("pass word!"));
    }

    proptest! {
        /// Same bytes as ring's PBKDF2, HMAC and SHA-256, for keys and messages
        /// across the one-block/two-block boundaries and keys longer than a block.
        #[test]
        fn agrees_with_ring(
            password in proptest::collection::vec(any::<u8>(), 0..150),
            salt in proptest::collection::vec(any::<u8>(), 0..130),
            iterations in 1u32..40,
        ) {
            let mut want = [0u8; 32];
            pbkdf2::derive(
                pbkdf2::PBKDF2_HMAC_SHA256,
                NonZeroU32::new(iterations).unwrap(),
                &salt,
                &password,
                &mut want,
            );
            prop_assert_eq!(pbkdf2_sha256(&password, &salt, iterations), want);
            let ring_key = hmac::Key::new(hmac::HMAC_SHA256, &password);
            let ring_mac = hmac::sign(&ring_key, &salt);
            let mac = HmacSha256::new(&password).mac(&salt);
            prop_assert_eq!(mac.as_slice(), ring_mac.as_ref());
            let ring_digest = digest::digest(&digest::SHA256, &salt);
            let ours = sha256(&salt);
            prop_assert_eq!(ours.as_slice(), ring_digest.as_ref());
        }
    }
}
