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

/// Every problem one reading of the configuration found, in the order the
/// settings are resolved: an operator fixes them all before the next start
/// instead of meeting them one restart at a time.
#[derive(Debug)]
pub struct ConfigErrors(Vec<ConfigError>);

impl ConfigErrors {
    /// The problems found; never empty.
    pub fn errors(&self) -> &[ConfigError] {
        &self.0
    }

    /// Names each problem that is about a key written in `text` (the file
    /// `file`) by its place, `FILE:LINE:COL: setting`. A setting that comes from
    /// the environment or from no key at all keeps its bare name.
    pub fn locate(mut self, file: &str, text: &str) -> Self {
        let Ok(doc) = toml_edit::ImDocument::parse(text) else {
            return self;
        };
        for e in &mut self.0 {
            if let Some(offset) = key_offset(&doc, &e.setting) {
                let (line, col) = line_col(text, offset);
                e.setting = format!("{file}:{line}:{col}: {}", e.setting);
            }
        }
        self
    }
}

/// Where the value of dotted `setting` (`limits.max_uses`, `backends.b`) is
/// written; for a key that is missing (`backends.b.audience: required`), where
/// the table that lacks it is. `None` when no part of it is in the file.
fn key_offset(doc: &toml_edit::ImDocument<&str>, setting: &str) -> Option<usize> {
    if setting.contains(':') || setting.contains(' ') {
        return None;
    }
    let mut item = doc.as_item();
    let mut found = None;
    for segment in setting.split('.') {
        match item.get(segment) {
            Some(next) => {
                item = next;
                found = item.span().map(|s| s.start).or(found);
            }
            None => break,
        }
    }
    found
}

/// The first problem: what callers that report one error show.
impl std::ops::Deref for ConfigErrors {
    type Target = ConfigError;
    fn deref(&self) -> &ConfigError {
        &self.0[0]
    }
}

impl From<ConfigError> for ConfigErrors {
    fn from(e: ConfigError) -> Self {
        ConfigErrors(vec![e])
    }
}

impl From<Vec<ConfigError>> for ConfigErrors {
    /// `errors` must not be empty.
    fn from(errors: Vec<ConfigError>) -> Self {
        assert!(!errors.is_empty(), "ConfigErrors needs at least one error");
        ConfigErrors(errors)
    }
}

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let [one] = self.0.as_slice() {
            return write!(f, "{one}");
        }
        write!(f, "{} configuration errors:", self.0.len())?;
        for e in &self.0 {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Collects the problems of settings resolved one after another: each result
/// is kept if good and recorded if not, so the next setting is still checked.
#[derive(Debug, Default)]
pub struct Problems(Vec<ConfigError>);

impl Problems {
    /// `r`'s value, or `None` after recording its error.
    pub fn take<T>(&mut self, r: Result<T, ConfigError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.0.push(e);
                None
            }
        }
    }

    /// `Ok(())` when nothing was recorded.
    pub fn finish(self) -> Result<(), ConfigErrors> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ConfigErrors(self.0))
        }
    }
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

/// Whether the broker may send to `url`: `https://`, or `http://` only to a
/// loopback address (`127.0.0.0/8`, `[::1]`, `localhost`), parsed as a URL —
/// never a prefix match, which `http://127.0.0.1@elsewhere/` would pass — and
/// without credentials in it for plain http, which would travel in clear.
pub(crate) fn is_safe_destination(url: &str) -> bool {
    if url.len() > 2048 || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return false;
    }
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return false;
    };
    match parsed.scheme() {
        "https" => parsed.host().is_some(),
        "http" => {
            let host = parsed.host_str().unwrap_or_default();
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let loopback = host.eq_ignore_ascii_case("localhost")
                || host
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            loopback && parsed.username().is_empty() && parsed.password().is_none()
        }
        _ => false,
    }
}
