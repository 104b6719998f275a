//! `[audit]`: signed checkpoints of the audit chain and where they go.

use super::{duration_setting, err, ConfigError};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAudit {
    checkpoint_rows: Option<i64>,
    checkpoint_interval: Option<String>,
    checkpoint_file: Option<PathBuf>,
    checkpoint_stdout: Option<bool>,
    witness_url: Option<String>,
}

#[derive(Debug, Clone)]
pub struct AuditConfig {
    /// A checkpoint after at most this many new rows…
    pub checkpoint_rows: i64,
    /// …or this long after the last one, when rows were added meanwhile.
    pub checkpoint_interval: Duration,
    /// Append-only JSON-lines file (one checkpoint per line, fsynced).
    pub checkpoint_file: Option<PathBuf>,
    /// Print each checkpoint as one JSON line on standard output (for a log
    /// collector or syslog to keep).
    pub checkpoint_stdout: bool,
    /// POSTed each checkpoint as JSON, retried from a durable outbox until it
    /// answers 2xx. Secret: it may carry credentials (never logged, redacted in `Debug`).
    pub witness_url: Option<secrecy::SecretString>,
}

pub(super) fn resolve(
    raw: RawAudit,
    dev: bool,
    data_dir: &Path,
) -> Result<AuditConfig, ConfigError> {
    let checkpoint_rows = raw.checkpoint_rows.unwrap_or(1000);
    if !(1..=10_000_000).contains(&checkpoint_rows) {
        return Err(err(
            "audit.checkpoint_rows",
            "must be between 1 and 10000000",
        ));
    }
    let checkpoint_interval = duration_setting(
        "audit.checkpoint_interval",
        &raw.checkpoint_interval,
        Duration::from_secs(60),
    )?;
    if !(Duration::from_secs(1)..=Duration::from_secs(86_400)).contains(&checkpoint_interval) {
        return Err(err(
            "audit.checkpoint_interval",
            "must be between 1s and 24h",
        ));
    }
    if let Some(url) = &raw.witness_url {
        // Plain http only to this machine: a checkpoint on the wire in clear
        // could be dropped or replaced by anyone on the path.
        if !super::is_safe_destination(url) {
            return Err(err(
                "audit.witness_url",
                "must be an https:// URL (http:// only to a loopback address)",
            ));
        }
    }
    let checkpoint_file = raw
        .checkpoint_file
        .or_else(|| dev.then(|| data_dir.join("audit-checkpoints.jsonl")));
    Ok(AuditConfig {
        checkpoint_rows,
        checkpoint_interval,
        checkpoint_file,
        checkpoint_stdout: raw.checkpoint_stdout.unwrap_or(false),
        witness_url: raw.witness_url.map(secrecy::SecretString::from),
    })
}
