//! The broker's bearer secrets as types that know their shape: run tokens,
//! runtime keys, the admin token and approver keys.
//!
//! Why a module: each of these is minted in one place and presented at
//! several doors (a header, an OAuth form, the gateway's
//! `Proxy-Authorization`, a file read at boot, a terminal). Written as
//! strings, every door had to remember the same three steps — check the
//! prefix and the shape, hash, never print it — and a secret could reach a
//! log line through a `{:?}`. Here each kind is a type (on the model of
//! crates.io's `AccessToken`): [`Secret::generate`] makes one,
//! [`Secret::parse`] is the only way from presented text to a secret,
//! [`Secret::sha256`] is what the store keeps and compares, and
//! [`Secret::expose_secret`] is the one, greppable, way back to the text where
//! it must be sent or saved. `Debug` and `Display` show the prefix and nothing
//! of the rest; the text is zeroized when the value is dropped.
//!
//! A secret is its kind's prefix (`tsr_run_`, `tsr_rt_`, `tsr_adm_`,
//! `tsr_apr_`: a leaked one is greppable and secret scanners can find it)
//! followed by 256 bits from the operating system's CSPRNG in unpadded
//! base64url (43 characters).

use crate::ids::{new_secret, sha256_hex};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use secrecy::{ExposeSecret, SecretString};
use std::fmt;
use std::marker::PhantomData;

/// The kinds of bearer secret: each a prefix and a name for `Debug`.
pub mod kind {
    /// What a kind of secret is called and how its text starts.
    pub trait Kind: sealed::Sealed {
        /// The prefix every secret of this kind starts with.
        const PREFIX: &'static str;
        /// The kind's name, as `Debug` shows it.
        const NAME: &'static str;
    }

    mod sealed {
        pub trait Sealed {}
    }

    macro_rules! kinds {
        ($($(#[$doc:meta])* $name:ident = $prefix:literal;)+) => {$(
            $(#[$doc])*
            #[derive(Debug)]
            pub enum $name {}

            impl sealed::Sealed for $name {}

            impl Kind for $name {
                const PREFIX: &'static str = $prefix;
                const NAME: &'static str = stringify!($name);
            }
        )+};
    }

    kinds! {
        /// A run token: what a tool inside a run presents.
        RunToken = "tsr_run_";
        /// A runtime API key: what a runtime presents to start runs.
        RuntimeKey = "tsr_rt_";
        /// The admin token.
        AdminToken = "tsr_adm_";
        /// An approver key (`tessera approvers create`).
        ApproverKey = "tsr_apr_";
    }
}

pub use kind::Kind;

/// A run token.
pub type RunToken = Secret<kind::RunToken>;
/// A runtime API key.
pub type RuntimeKey = Secret<kind::RuntimeKey>;
/// The admin token.
pub type AdminToken = Secret<kind::AdminToken>;
/// An approver key.
pub type ApproverKey = Secret<kind::ApproverKey>;

/// Length of the random part: 32 bytes in unpadded base64url.
const ENCODED_LEN: usize = 43;

/// A bearer secret of kind `K`, well formed by construction.
pub struct Secret<K: Kind> {
    text: SecretString,
    kind: PhantomData<K>,
}

/// Presented text that is not a secret of the kind asked for. It carries
/// nothing of the text: a wrong secret is still a secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShapeError {
    kind: &'static str,
    prefix: &'static str,
}

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not a {}: expected {} and {ENCODED_LEN} base64url characters",
            self.kind, self.prefix
        )
    }
}

impl std::error::Error for ShapeError {}

impl<K: Kind> Secret<K> {
    /// The prefix of this kind.
    pub const PREFIX: &'static str = K::PREFIX;

    /// A new secret: the prefix and 256 bits from the OS CSPRNG.
    pub fn generate() -> Self {
        Secret {
            text: new_secret(K::PREFIX),
            kind: PhantomData,
        }
    }

    /// Presented text as a secret of this kind: exactly the prefix followed by
    /// 43 characters that decode as unpadded base64url (to 32 bytes, with no
    /// stray trailing bits). Anything else is a [`ShapeError`], before any
    /// hashing or lookup.
    pub fn parse(text: &str) -> Result<Self, ShapeError> {
        Self::check_shape(text)?;
        Ok(Secret {
            text: SecretString::from(text),
            kind: PhantomData,
        })
    }

    /// The hash a door looks up for presented `text`, once its shape is
    /// checked ([`Secret::parse`] then [`Secret::sha256`], without copying
    /// the text into a secret only to drop it: every authenticated request
    /// takes this path).
    pub fn sha256_of_presented(text: &str) -> Result<String, ShapeError> {
        Self::check_shape(text)?;
        Ok(sha256_hex(text.as_bytes()))
    }

    fn check_shape(text: &str) -> Result<(), ShapeError> {
        let well_formed = text
            .strip_prefix(K::PREFIX)
            .is_some_and(|rest| rest.len() == ENCODED_LEN && URL_SAFE_NO_PAD.decode(rest).is_ok());
        if well_formed {
            Ok(())
        } else {
            Err(ShapeError {
                kind: K::NAME,
                prefix: K::PREFIX,
            })
        }
    }

    /// Lowercase hex SHA-256 of the text: what the store keeps and looks up
    /// instead of the secret.
    pub fn sha256(&self) -> String {
        sha256_hex(self.text.expose_secret().as_bytes())
    }

    /// The text itself, for where it must go: a response shown once, a file
    /// of mode 0600, an `Authorization` header.
    pub fn expose_secret(&self) -> &str {
        self.text.expose_secret()
    }
}

impl<K: Kind> Clone for Secret<K> {
    fn clone(&self) -> Self {
        Secret {
            text: self.text.clone(),
            kind: PhantomData,
        }
    }
}

impl<K: Kind> From<Secret<K>> for SecretString {
    fn from(secret: Secret<K>) -> SecretString {
        secret.text
    }
}

/// `RunToken(tsr_run_…[redacted])`.
impl<K: Kind> fmt::Debug for Secret<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({}…[redacted])", K::NAME, K::PREFIX)
    }
}

/// `tsr_run_…[redacted]`.
impl<K: Kind> fmt::Display for Secret<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}…[redacted]", K::PREFIX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The shape check the doors used before these types, kept verbatim as
    /// the oracle `parse` must agree with.
    fn old_has_secret_shape(token: &str, prefix: &str) -> bool {
        token
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.len() == 43 && URL_SAFE_NO_PAD.decode(rest).is_ok())
    }

    /// A presented secret's hash is its parsed secret's hash; a malformed
    /// one is refused the same way.
    #[test]
    fn the_hash_of_presented_text_is_the_parsed_secrets() {
        let token = RunToken::generate();
        assert_eq!(
            RunToken::sha256_of_presented(token.expose_secret()).unwrap(),
            token.sha256()
        );
        for bad in [
            "",
            "tsr_run_",
            "tsr_rt_x",
            &format!("{}!", token.expose_secret()),
        ] {
            assert_eq!(
                RunToken::sha256_of_presented(bad).unwrap_err(),
                RunToken::parse(bad).map(|_| ()).unwrap_err()
            );
        }
    }

    /// The prefixes are the ones every issued secret carries.
    #[test]
    fn prefixes_are_those_issued() {
        assert_eq!(RunToken::PREFIX, "tsr_run_");
        assert_eq!(RuntimeKey::PREFIX, "tsr_rt_");
        assert_eq!(AdminToken::PREFIX, "tsr_adm_");
        assert_eq!(ApproverKey::PREFIX, "tsr_apr_");
    }

    #[test]
    fn generated_secrets_parse_as_their_kind_only() {
        let run = RunToken::generate();
        let text = run.expose_secret();
        assert!(text.starts_with("tsr_run_") && text.len() == "tsr_run_".len() + 43);
        assert!(RunToken::parse(text).is_ok());
        assert!(RuntimeKey::parse(text).is_err());
        assert!(AdminToken::parse(text).is_err());
        assert!(ApproverKey::parse(text).is_err());
        assert!(RuntimeKey::parse(RuntimeKey::generate().expose_secret()).is_ok());
        assert!(AdminToken::parse(AdminToken::generate().expose_secret()).is_ok());
        assert!(ApproverKey::parse(ApproverKey::generate().expose_secret()).is_ok());
        assert_ne!(
            RunToken::generate().expose_secret(),
            RunToken::generate().expose_secret()
        );
    }

    #[test]
    fn malformed_text_is_refused() {
        let good = format!("tsr_run_{}w", "A".repeat(42));
        assert!(RunToken::parse(&good).is_ok());
        for bad in [
            "",
            "tsr_run_",
            "tsr_run_short",
            &format!("tsr_run_{}", "A".repeat(42)),
            &format!("tsr_run_{}", "A".repeat(44)),
            // 43 characters, but the last one has bits past the 32 bytes.
            &format!("tsr_run_{}B", "A".repeat(42)),
            &format!("tsr_run_{}+", "A".repeat(42)),
            &format!("TSR_RUN_{}w", "A".repeat(42)),
            &format!(" {good}"),
            &format!("{good} "),
        ] {
            assert!(RunToken::parse(bad).is_err(), "{bad:?}");
        }
        let e = RunToken::parse("tsr_run_short").unwrap_err();
        assert_eq!(
            e.to_string(),
            "not a RunToken: expected tsr_run_ and 43 base64url characters"
        );
    }

    /// Hashes stored before these types still match: the hash is SHA-256 of
    /// the text, in lowercase hex.
    #[test]
    fn sha256_is_the_stored_hash() {
        let text = format!("tsr_adm_{}w", "A".repeat(42));
        assert_eq!(
            AdminToken::parse(&text).unwrap().sha256(),
            "a0039d2f851795edcf769e457f13bdf2bdaf8b4ffa72b6229b02ce2e67072f99"
        );
    }

    #[test]
    fn debug_and_display_show_only_the_prefix() {
        let key = RuntimeKey::generate();
        assert_eq!(format!("{key:?}"), "RuntimeKey(tsr_rt_…[redacted])");
        assert_eq!(format!("{key}"), "tsr_rt_…[redacted]");
        assert_eq!(
            format!("{:?}", Some(key.clone())),
            "Some(RuntimeKey(tsr_rt_…[redacted]))"
        );
    }

    /// Every presented-text candidate: arbitrary text, and text close to a
    /// secret (right or wrong prefix, 42–44 characters, base64url or not,
    /// canonical last character or not).
    fn candidate() -> impl Strategy<Value = String> {
        let prefix = prop_oneof![
            Just("tsr_run_"),
            Just("tsr_rt_"),
            Just("tsr_adm_"),
            Just("tsr_apr_"),
            Just("tsr_"),
            Just("TSR_RUN_"),
            Just(""),
        ];
        let rest = prop_oneof![
            3 => "[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]",
            1 => "[A-Za-z0-9_-]{43}",
            1 => "[A-Za-z0-9_-]{42,44}",
            1 => "[A-Za-z0-9_+/=. -]{43}",
            1 => "\\PC{0,50}",
        ];
        prop_oneof![
            3 => (prefix, rest).prop_map(|(p, r)| format!("{p}{r}")),
            1 => "\\PC{0,60}",
        ]
    }

    /// The hash the store has kept since before these types: SHA-256 of the
    /// text in lowercase hex, computed here without the module's helpers.
    fn old_hash(text: &str) -> String {
        ring::digest::digest(&ring::digest::SHA256, text.as_bytes())
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn agrees<K: Kind>(text: &str) -> Result<(), TestCaseError> {
        let parsed = Secret::<K>::parse(text);
        prop_assert_eq!(
            parsed.is_ok(),
            old_has_secret_shape(text, K::PREFIX),
            "{:?}",
            text
        );
        if let Ok(secret) = parsed {
            prop_assert_eq!(secret.expose_secret(), text);
            prop_assert_eq!(secret.sha256(), old_hash(text));
        }
        Ok(())
    }

    /// Checks that no rendering of `secret` shows its random part, and that
    /// it hashes as the store expects.
    fn redacted<K: Kind>(secret: &Secret<K>) -> Result<(), TestCaseError> {
        let text = secret.expose_secret();
        let random = &text[K::PREFIX.len()..];
        prop_assert_eq!(random.len(), 43);
        prop_assert_eq!(secret.sha256(), old_hash(text));
        for shown in [
            format!("{secret:?}"),
            format!("{secret:#?}"),
            format!("{secret}"),
            format!("{secret:>200}"),
            format!("{:?}", (secret, "x")),
        ] {
            prop_assert!(!shown.contains(random), "{}", shown);
            // Not one character of the random part: all that follows the
            // prefix is the fixed `…[redacted]`.
            let after = &shown[shown.find(K::PREFIX).unwrap() + K::PREFIX.len()..];
            prop_assert!(after.starts_with("…[redacted]"), "{}", shown);
        }
        Ok(())
    }

    proptest! {
        /// `parse` accepts exactly what the old shape check accepted, for
        /// every kind; what it accepts reads back and hashes as before.
        #[test]
        fn parse_accepts_exactly_the_old_shape(text in candidate()) {
            agrees::<kind::RunToken>(&text)?;
            agrees::<kind::RuntimeKey>(&text)?;
            agrees::<kind::AdminToken>(&text)?;
            agrees::<kind::ApproverKey>(&text)?;
        }

        /// No rendering of a secret, generated or parsed, shows its random
        /// part; each hashes as the old hash of its text.
        #[test]
        fn no_rendering_shows_the_secret(rest in "[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]") {
            redacted(&RunToken::generate())?;
            redacted(&RuntimeKey::generate())?;
            redacted(&AdminToken::generate())?;
            redacted(&ApproverKey::generate())?;
            redacted(&RunToken::parse(&format!("tsr_run_{rest}")).unwrap())?;
            redacted(&ApproverKey::parse(&format!("tsr_apr_{rest}")).unwrap())?;
        }
    }
}
