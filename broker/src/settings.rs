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

/// A file that toml cannot read as the configuration: named `FILE:LINE:COL`
/// where toml's position says the problem is (a syntax error, an unknown or
/// mistyped key), so an operator goes straight to it.
pub fn file_error(file: &str, text: &str, e: &toml::de::Error) -> ConfigError {
    let message = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let (line, col) = line_col(text, span.start);
            err(&format!("{file}:{line}:{col}"), message)
        }
        None => err(file, message),
    }
}

/// 1-based line and column (in characters) of byte `offset` of `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..text.floor_char_boundary(offset.min(text.len()))];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, col)
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
