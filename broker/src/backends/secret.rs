//! Static secrets a backend's settings name (`*_env` or `*_file`), read once
//! when `serve` starts and never by the policy tools.
//!
//! Written once because every kind that holds one (an injected API key, a
//! resource server's introspection secret) must refuse the same things: an
//! unset variable, a file others may read, a value that is not printable ASCII
//! (each goes into an HTTP header or is compared with one).

use crate::settings::{err, ConfigError, EnvLookup};
use std::path::PathBuf;

/// Where a static secret comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    Env(String),
    File(PathBuf),
}

impl SecretSource {
    /// The source `{key}_env` / `{key}_file` name, if any; both is an error.
    pub fn pick(
        setting: &str,
        key: &str,
        env_name: Option<&String>,
        file: Option<&PathBuf>,
    ) -> Result<Option<SecretSource>, ConfigError> {
        match (env_name, file) {
            (Some(_), Some(_)) => Err(err(setting, format!("{key}_env and {key}_file: name one"))),
            (Some(e), None) if is_env_name(e) => Ok(Some(SecretSource::Env(e.clone()))),
            (Some(e), None) => Err(err(
                &format!("{setting}.{key}_env"),
                format!("not a variable name: {e:?}"),
            )),
            (None, Some(f)) => Ok(Some(SecretSource::File(f.clone()))),
            (None, None) => Ok(None),
        }
    }
}

/// `[A-Z_][A-Z0-9_]*`, at most 128 bytes.
pub fn is_env_name(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && !s.as_bytes()[0].is_ascii_digit()
        && s.bytes()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_')
}

/// Reads the secret (`key` is the setting's stem: `secret`, `introspection_secret`).
pub fn read(
    setting: &str,
    key: &str,
    source: &SecretSource,
    env: EnvLookup<'_>,
) -> Result<String, ConfigError> {
    let value = match source {
        SecretSource::Env(name) => env(name).ok_or_else(|| {
            err(
                &format!("{setting}.{key}_env"),
                format!("{name} is not set in the broker's environment"),
            )
        })?,
        SecretSource::File(path) => {
            use std::os::unix::fs::MetadataExt;
            let what = format!("{setting}.{key}_file");
            let meta = std::fs::metadata(path)
                .map_err(|e| err(&what, format!("{}: {e}", path.display())))?;
            if meta.mode() & 0o077 != 0 {
                return Err(err(
                    &what,
                    format!(
                        "{} is readable by group or others (chmod 600)",
                        path.display()
                    ),
                ));
            }
            std::fs::read_to_string(path)
                .map_err(|e| err(&what, format!("{}: {e}", path.display())))?
                .trim_end_matches(['\r', '\n'])
                .to_owned()
        }
    };
    if value.is_empty() || !value.bytes().all(|c| (0x20..0x7f).contains(&c)) {
        return Err(err(
            setting,
            "the secret must be printable ASCII (it goes into a header)",
        ));
    }
    Ok(value)
}
