//! What every part of `tessera.toml` is resolved with: the error that names a
//! setting, the environment lookup, and one `[backends.NAME]` table as written.
//!
//! Why a module of its own: the configuration assembles sections that other
//! modules own (each backend kind resolves its own table), and those modules need
//! these few types. Here they import nothing of the broker's, so a kind depends on
//! this leaf and never on `config`, which depends on the kinds.

use serde::de::DeserializeOwned;

/// A setting that cannot be used, named the way an operator writes it
/// (`backends.pg-main.actions: ...`).
#[derive(Debug, thiserror::Error)]
#[error("config error: {setting}: {message}")]
pub struct ConfigError {
    pub setting: String,
    pub message: String,
}

/// A [`ConfigError`] for `setting`.
pub fn err(setting: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        setting: setting.to_owned(),
        message: message.into(),
    }
}

/// Reads an environment variable; `None` when unset or empty.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// One `[backends.NAME]` table as written; its `kind` says whose keys it holds.
pub type RawTable = toml::Value;

/// Reads `table` as a kind's typed keys (unknown keys are errors), naming the
/// table (`setting`) when it does not fit.
pub fn parse_table<T: DeserializeOwned>(setting: &str, table: RawTable) -> Result<T, ConfigError> {
    table
        .try_into()
        .map_err(|e: toml::de::Error| err(setting, e.message().to_owned()))
}
