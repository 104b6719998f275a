//! The HTTP side of every admin command: one [`AdminClient`] (from
//! `tessera-client`, typed by the wire types) built from the command's
//! `--addr`, `--token-file` and `--ca-file`, and the errors said the way an
//! operator reads them.
//!
//! Why its own module: the admin, audit and policy command families all call
//! the broker; with the client built here, and [`Remote`] (the flags that say
//! which broker and which token) defined here, none of them depends on another
//! or on `cli/mod.rs`.
//! The admin token travels under the run token's rules (docs/clients.md): no
//! proxy from the environment unless `TESSERA_USE_PROXY=1`, no redirects,
//! `http://` only to loopback unless `TESSERA_INSECURE_HTTP=1`; `https://`
//! addresses are verified against `--ca-file` / `TESSERA_CA_FILE` when given (a
//! private CA, as brokers usually have), otherwise against the system's roots.
//!
//! The admin token comes from, in order: `--token-file` /
//! `TESSERA_ADMIN_TOKEN_FILE` (recommended: a file never shows in `ps` or a
//! shell's history), `TESSERA_ADMIN_TOKEN`, then the file `tessera login` saved.
//!
//! Exit status of a remote command: 0 done; 2 the broker answered and refused
//! (its code and request id are printed); 1 anything on this side (arguments,
//! files, no token, the broker unreachable).

use super::saved_token::{read_saved_token, saved_token_file};
use anyhow::Context;
use clap::Args;
use secrecy::SecretString;
use std::path::PathBuf;
use tessera_client::{AdminClient, Error};

/// How to reach a running broker as admin.
#[derive(Debug, Args, Clone)]
pub struct Remote {
    /// Broker address: https://HOST:PORT, http://HOST:PORT (loopback only) or HOST:PORT.
    #[arg(long, env = "TESSERA_ADDR", default_value = "http://127.0.0.1:8700")]
    pub addr: String,
    /// File holding the admin token (else TESSERA_ADMIN_TOKEN, else what `tessera login` saved).
    #[arg(long, env = "TESSERA_ADMIN_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// CA certificate(s) to verify an https:// broker (default: the system's roots).
    #[arg(long, env = "TESSERA_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The admin client for `remote`.
pub fn admin(remote: &Remote) -> anyhow::Result<AdminClient> {
    admin_with(remote, admin_token(remote)?)
}

/// The admin client for `remote` holding `token`.
pub fn admin_with(remote: &Remote, token: SecretString) -> anyhow::Result<AdminClient> {
    let flag = |name: &str| std::env::var(name).is_ok_and(|v| v == "1");
    let mut builder = AdminClient::builder(&remote.addr, token)
        .proxy_from_env(flag("TESSERA_USE_PROXY"))
        .insecure_http(flag("TESSERA_INSECURE_HTTP"));
    if let Some(ca) = &remote.ca_file {
        let pem = std::fs::read(ca).with_context(|| format!("CA file {}", ca.display()))?;
        builder = builder.ca_pem(pem);
    }
    builder.build().map_err(said)
}

/// The admin token, from the first place that has one (module docs).
fn admin_token(remote: &Remote) -> anyhow::Result<SecretString> {
    let from_file = |path: &std::path::Path| -> anyhow::Result<SecretString> {
        let token = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read admin token file {}", path.display()))?;
        Ok(SecretString::from(token.trim()))
    };
    if let Some(path) = &remote.token_file {
        return from_file(path);
    }
    if let Some(token) = crate::config::process_env("TESSERA_ADMIN_TOKEN") {
        return Ok(SecretString::from(token.trim()));
    }
    if let Some(path) = saved_token_file().filter(|p| p.exists()) {
        return read_saved_token(&path);
    }
    anyhow::bail!(
        "no admin token: set TESSERA_ADMIN_TOKEN_FILE (or pass --token-file), set \
         TESSERA_ADMIN_TOKEN, or run `tessera login`"
    )
}

/// The broker answered and refused: what makes a remote command exit 2.
#[derive(Debug)]
pub struct BrokerRefused(String);

impl std::fmt::Display for BrokerRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BrokerRefused {}

/// Exit status for a remote command's error (module docs).
pub fn exit_status(e: &anyhow::Error) -> std::process::ExitCode {
    if e.downcast_ref::<BrokerRefused>().is_some() {
        std::process::ExitCode::from(2)
    } else {
        std::process::ExitCode::FAILURE
    }
}

/// A client error as an operator reads it; a refusal from the broker is a
/// [`BrokerRefused`].
pub fn said(e: Error) -> anyhow::Error {
    let refused = |text: String| anyhow::Error::new(BrokerRefused(text));
    match e {
        Error::Unauthenticated { code, message, .. } => refused(format!(
            "the broker rejected the admin token ({code}): {message}"
        )),
        Error::Denied { code, message, .. } => refused(format!("denied ({code}): {message}")),
        Error::Rejected {
            status,
            code,
            message,
            request_id,
        } => refused(format!(
            "the broker answered {status} ({code}, request {request_id}): {message}"
        )),
        Error::Expired {
            code,
            message,
            request_id,
        } => refused(format!(
            "the broker refused ({code}, request {request_id}): {message}"
        )),
        Error::Unavailable {
            code: Some(code),
            message,
            request_id,
        } => refused(format!(
            "the broker could not answer ({code}, request {}): {message}",
            request_id.as_deref().unwrap_or("-")
        )),
        Error::Unavailable {
            code: None,
            message,
            ..
        } => anyhow::anyhow!("{message}"),
        other @ (Error::ApprovalRequired { .. } | Error::RateLimited { .. }) => {
            refused(other.to_string())
        }
        other => anyhow::anyhow!("{other}"),
    }
}

/// Prints `value` as one line of JSON (what `--json` shows).
pub fn print_json(value: &impl serde::Serialize) {
    println!("{}", serde_json::to_string(value).unwrap_or_default());
}
