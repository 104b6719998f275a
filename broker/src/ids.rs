//! Identifiers, bearer secrets and their hashes.
//!
//! Every bearer credential the broker mints carries a recognisable prefix
//! (`tsr_rt_`, `tsr_run_`, `tsr_adm_`) so that a leaked one is greppable and secret
//! scanners can find it, and holds 256 bits from the operating system's CSPRNG.
//! Only the SHA-256 of a bearer secret is ever stored or compared.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::{SecureRandom, SystemRandom};
use secrecy::{ExposeSecret, SecretString};

/// Prefix of runtime API keys.
pub const RUNTIME_KEY_PREFIX: &str = "tsr_rt_";
/// Prefix of run tokens.
pub const RUN_TOKEN_PREFIX: &str = "tsr_run_";
/// Prefix of admin tokens.
pub const ADMIN_TOKEN_PREFIX: &str = "tsr_adm_";
/// Prefix of approver keys (`tessera approvers create`).
pub const APPROVER_KEY_PREFIX: &str = "tsr_apr_";

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

/// A new bearer secret: `prefix` followed by 256 random bits in base64url.
pub fn new_secret(prefix: &str) -> SecretString {
    let raw = random_bytes::<32>();
    SecretString::from(format!("{prefix}{}", URL_SAFE_NO_PAD.encode(raw)))
}

/// Checks the shape of a presented bearer secret before it is hashed and looked up.
pub fn has_secret_shape(token: &str, prefix: &str) -> bool {
    token
        .strip_prefix(prefix)
        .is_some_and(|rest| rest.len() == 43 && URL_SAFE_NO_PAD.decode(rest).is_ok())
}

/// Lowercase hex SHA-256 of a secret: what the store keeps instead of the secret.
pub fn secret_hash(secret: &SecretString) -> String {
    sha256_hex(secret.expose_secret().as_bytes())
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

    #[test]
    fn secrets_have_prefix_and_full_entropy_shape() {
        let s = new_secret(RUN_TOKEN_PREFIX);
        assert!(has_secret_shape(s.expose_secret(), RUN_TOKEN_PREFIX));
        assert!(!has_secret_shape(s.expose_secret(), RUNTIME_KEY_PREFIX));
        assert!(!has_secret_shape("tsr_run_short", RUN_TOKEN_PREFIX));
        assert_eq!(secret_hash(&s).len(), 64);
        assert!(!format!("{s:?}").contains(s.expose_secret()));
    }
}
