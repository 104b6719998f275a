//! Identifiers, randomness, hex and SHA-256: the small helpers every part of
//! the broker names things and draws random values with.
//!
//! Why a leaf of its own: ids, request ids and random tokens are minted
//! everywhere (the store, the doors, the backends, the CLI), and must all come
//! from the operating system's CSPRNG in one known way. The broker's bearer
//! credentials (run tokens, runtime keys, the admin token, approver keys) are
//! typed on top of [`new_secret`] in [`crate::secret`], which checks their
//! shape and hashes them.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::{SecureRandom, SystemRandom};
use secrecy::SecretString;

/// Fills a buffer from the system CSPRNG. The OS generator failing is not
/// something a request can cause or recover from.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    if SystemRandom::new().fill(&mut buf).is_err() {
        // A broker that cannot draw randomness must not mint anything.
        std::process::abort();
    }
    buf
}

/// Random bytes for identifiers (ids, request ids), never for secrets: from
/// the same OS CSPRNG as [`random_bytes`], but fetched a block at a time per
/// thread, so an id costs no system call (two `getrandom` calls per issuance,
/// one per id, were about 1% of its CPU: docs/performance.md, issue 20). A
/// block waits in memory until used, which is why secrets do not come from
/// here. No id is drawn between a fork and its exec, so no two processes
/// share a block.
fn id_bytes<const N: usize>() -> [u8; N] {
    const BLOCK: usize = 512;
    const { assert!(N <= BLOCK) };
    thread_local! {
        static POOL: std::cell::RefCell<([u8; BLOCK], usize)> =
            const { std::cell::RefCell::new(([0; BLOCK], BLOCK)) };
    }
    POOL.with_borrow_mut(|(block, used)| {
        if *used + N > BLOCK {
            *block = random_bytes::<BLOCK>();
            *used = 0;
        }
        let mut out = [0u8; N];
        out.copy_from_slice(&block[*used..*used + N]);
        *used += N;
        out
    })
}

/// A new version-7 UUID (RFC 9562) in its canonical text form: 48 bits of
/// Unix milliseconds, then 74 random bits. Ids are identifiers, not secrets;
/// being time-ordered, new rows land at the right edge of the store's B-trees
/// instead of on random pages, which keeps each group commit small.
pub fn new_id() -> String {
    let mut b = id_bytes::<16>();
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    b[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    b[6] = (b[6] & 0x0f) | 0x70;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// True when `s` is a canonical lowercase UUID as produced by [`new_id`].
pub fn is_id(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
        })
}

/// A new random token: `prefix` followed by 256 bits from the OS CSPRNG in
/// unpadded base64url (43 characters). The broker's bearer credentials are
/// made through [`crate::secret::Secret::generate`]; this is also what the
/// gateway's placeholders and `tessera exec`'s local proxy password are.
pub fn new_secret(prefix: &str) -> SecretString {
    let mut raw = random_bytes::<32>();
    // Built at its final length, so moving it into the SecretString copies
    // nothing that would be left behind unzeroized.
    let mut text = String::with_capacity(prefix.len() + 43);
    text.push_str(prefix);
    URL_SAFE_NO_PAD.encode_string(raw, &mut text);
    zeroize::Zeroize::zeroize(&mut raw);
    SecretString::from(text)
}

/// Lowercase hex SHA-256.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, data).as_ref())
}

/// A request id (`req_` and 24 hex digits): in the error body, the log and the audit.
pub fn new_request_id() -> String {
    format!("req_{}", hex(&id_bytes::<12>()))
}

/// Lowercase hex encoding.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0x0f) as usize] as char);
    }
    out
}

/// The bytes of lowercase or uppercase hex; `None` for anything else.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    text.as_bytes()
        .chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_canonical_uuids_and_distinct() {
        let a = new_id();
        let b = new_id();
        assert!(is_id(&a), "{a}");
        assert_ne!(a, b);
        assert_eq!(&a[14..15], "7");
        assert!(a < b || a[..13] == b[..13], "time-ordered");
        assert!(!is_id("not-an-id"));
        assert!(!is_id(&a.to_uppercase()));
    }

    /// Ids drawn from the per-thread blocks never repeat: not across a
    /// block's end (16 and 12 bytes do not divide 512), nor between threads,
    /// each of which fetched blocks of its own.
    #[test]
    fn ids_from_pooled_randomness_never_repeat() {
        let per_thread = 2_000;
        let all: Vec<String> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(move || {
                        (0..per_thread)
                            .flat_map(|_| [new_id()[24..].to_owned(), new_request_id()])
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            threads
                .into_iter()
                .flat_map(|t| t.join().unwrap())
                .collect()
        });
        let distinct: std::collections::HashSet<&String> = all.iter().collect();
        assert_eq!(distinct.len(), all.len());
        assert_eq!(all.len(), 4 * per_thread * 2);
    }

    /// The shape checks of each kind of bearer secret are
    /// `crate::secret`'s tests.
    #[test]
    fn secrets_have_prefix_and_full_entropy_shape() {
        use secrecy::ExposeSecret;
        let s = new_secret("tsr_ph_");
        let text = s.expose_secret();
        let rest = text.strip_prefix("tsr_ph_").unwrap();
        assert_eq!(rest.len(), 43);
        assert_eq!(URL_SAFE_NO_PAD.decode(rest).unwrap().len(), 32);
        assert_ne!(text, new_secret("tsr_ph_").expose_secret());
        assert_eq!(sha256_hex(text.as_bytes()).len(), 64);
        assert!(!format!("{s:?}").contains(text));
    }
}
