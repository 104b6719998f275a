//! The key-encryption key (KEK): AES-256-GCM over secrets at rest.
//!
//! Sealed form: `v1.` + base64url(nonce ‖ ciphertext ‖ tag). The associated data
//! binds a sealed blob to what it belongs to (a key id), so a blob copied onto
//! another row fails to open. The KEK comes from a file or the environment; in
//! `--dev` it is generated into the data directory with mode 0600.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use zeroize::Zeroizing;

#[derive(Debug, thiserror::Error)]
pub enum KekError {
    #[error("the key-encryption key must be 32 bytes, base64-encoded (got {0} bytes)")]
    BadLength(usize),
    #[error("the key-encryption key is not valid base64")]
    BadEncoding,
    #[error("a sealed secret could not be opened: wrong key-encryption key or corrupted data")]
    OpenFailed,
}

pub struct Kek {
    key: LessSafeKey,
}

impl std::fmt::Debug for Kek {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Kek([redacted])")
    }
}

impl Kek {
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, KekError> {
        if bytes.len() != 32 {
            return Err(KekError::BadLength(bytes.len()));
        }
        let unbound =
            UnboundKey::new(&AES_256_GCM, bytes).map_err(|_| KekError::BadLength(bytes.len()))?;
        Ok(Self {
            key: LessSafeKey::new(unbound),
        })
    }

    /// Parses the base64 text form (as kept in a KEK file or `TESSERA_KEK`).
    pub fn from_base64(text: &str) -> Result<Self, KekError> {
        let raw = Zeroizing::new(
            STANDARD
                .decode(text.trim())
                .map_err(|_| KekError::BadEncoding)?,
        );
        Self::from_bytes(&raw)
    }

    /// A fresh random KEK and its base64 text form.
    pub fn generate() -> (Self, Zeroizing<String>) {
        let raw = Zeroizing::new(crate::ids::random_bytes::<32>());
        let text = Zeroizing::new(STANDARD.encode(raw.as_slice()));
        match Self::from_bytes(raw.as_slice()) {
            Ok(k) => (k, text),
            Err(_) => std::process::abort(),
        }
    }

    pub fn seal(&self, plaintext: &[u8], aad: &str) -> String {
        let nonce_bytes = crate::ids::random_bytes::<NONCE_LEN>();
        let mut buf = Zeroizing::new(plaintext.to_vec());
        let nonce = Nonce::assume_unique_for_key(nonce_bytes);
        if self
            .key
            .seal_in_place_append_tag(nonce, Aad::from(aad.as_bytes()), &mut *buf)
            .is_err()
        {
            std::process::abort();
        }
        let mut out = nonce_bytes.to_vec();
        out.extend_from_slice(&buf);
        format!("v1.{}", URL_SAFE_NO_PAD.encode(out))
    }

    /// A 32-byte key for `label`, the same for every process holding this KEK
    /// (replicas share it) and unrelated to any other label's: AES-256-GCM of
    /// 32 zero bytes under a nonce taken from the label's SHA-256 — the
    /// counter-mode keystream, a pseudo-random function of key and label. The
    /// plaintext is always the same, so reusing the nonce reveals nothing.
    pub fn derive(&self, label: &str) -> Zeroizing<[u8; 32]> {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(label.as_bytes());
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&digest[..NONCE_LEN]);
        let mut buf = Zeroizing::new([0u8; 32]);
        let nonce = Nonce::assume_unique_for_key(nonce);
        if self
            .key
            .seal_in_place_separate_tag(nonce, Aad::empty(), &mut buf[..])
            .is_err()
        {
            std::process::abort();
        }
        buf
    }

    pub fn open(&self, sealed: &str, aad: &str) -> Result<Zeroizing<Vec<u8>>, KekError> {
        let body = sealed.strip_prefix("v1.").ok_or(KekError::OpenFailed)?;
        let raw = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| KekError::OpenFailed)?;
        if raw.len() < NONCE_LEN + 16 {
            return Err(KekError::OpenFailed);
        }
        let (nonce, ct) = raw.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| KekError::OpenFailed)?;
        let mut buf = Zeroizing::new(ct.to_vec());
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(aad.as_bytes()), &mut buf)
            .map_err(|_| KekError::OpenFailed)?;
        Ok(Zeroizing::new(plain.to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_open_round_trip_and_binding() {
        let (k, text) = Kek::generate();
        let sealed = k.seal(b"secret material", "kid-1");
        assert!(!sealed.contains("secret"));
        assert_eq!(&k.open(&sealed, "kid-1").unwrap()[..], b"secret material");
        assert!(k.open(&sealed, "kid-2").is_err(), "aad binds the blob");
        let other = Kek::generate().0;
        assert!(other.open(&sealed, "kid-1").is_err());
        assert!(Kek::from_base64(&text).is_ok());
        assert!(matches!(
            Kek::from_base64("AAAA"),
            Err(KekError::BadLength(3))
        ));
        assert_eq!(format!("{k:?}"), "Kek([redacted])");
        let again = Kek::from_base64(&text).unwrap();
        assert_eq!(*k.derive("a"), *again.derive("a"), "replicas agree");
        assert_ne!(*k.derive("a"), *k.derive("b"));
        assert_ne!(*k.derive("a"), *other.derive("a"));
    }
}
