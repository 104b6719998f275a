//! The HTTP side of every admin command: one [`AdminClient`] (from
//! `tessera-client`, typed by the wire types) built from the command's
//! `--addr`, `--token-file` and `--ca-file`, and the errors said the way an
//! operator reads them.
//!
//! Why its own module: the admin, audit and policy command families all call
//! the broker; with the client built here, none of them depends on another.
//! The admin token travels under the run token's rules (docs/clients.md): no
//! proxy from the environment unless `TESSERA_USE_PROXY=1`, no redirects,
//! `http://` only to loopback unless `TESSERA_INSECURE_HTTP=1`; `https://`
//! addresses are verified against `--ca-file` / `TESSERA_CA_FILE` (a private
//! CA, as brokers usually have).

use crate::cli::Remote;
use anyhow::Context;
use secrecy::SecretString;
use tessera_client::{AdminClient, Error};

/// The admin client for `remote`.
pub fn admin(remote: &Remote) -> anyhow::Result<AdminClient> {
    let flag = |name: &str| std::env::var(name).is_ok_and(|v| v == "1");
    let token_file = remote
        .token_file
        .as_ref()
        .context("no admin token: set TESSERA_ADMIN_TOKEN_FILE or pass --token-file")?;
    let token = std::fs::read_to_string(token_file)
        .with_context(|| format!("cannot read admin token file {}", token_file.display()))?;
    let mut builder = AdminClient::builder(&remote.addr, SecretString::from(token.trim()))
        .proxy_from_env(flag("TESSERA_USE_PROXY"))
        .insecure_http(flag("TESSERA_INSECURE_HTTP"));
    if let Some(ca) = &remote.ca_file {
        let pem = std::fs::read(ca).with_context(|| format!("CA file {}", ca.display()))?;
        builder = builder.ca_pem(pem);
    }
    builder.build().map_err(said)
}

/// A client error as an operator reads it.
pub fn said(e: Error) -> anyhow::Error {
    match e {
        Error::Unauthenticated { code, message, .. } => {
            anyhow::anyhow!("the broker rejected the admin token ({code}): {message}")
        }
        Error::Denied { code, message, .. } => anyhow::anyhow!("denied ({code}): {message}"),
        Error::Rejected {
            status,
            code,
            message,
            request_id,
        } => anyhow::anyhow!(
            "the broker answered {status} ({code}, request {request_id}): {message}"
        ),
        Error::Expired {
            code,
            message,
            request_id,
        } => anyhow::anyhow!("the broker refused ({code}, request {request_id}): {message}"),
        Error::Unavailable {
            code: Some(code),
            message,
            request_id,
        } => anyhow::anyhow!(
            "the broker could not answer ({code}, request {}): {message}",
            request_id.as_deref().unwrap_or("-")
        ),
        Error::Unavailable {
            code: None,
            message,
            ..
        } => anyhow::anyhow!("{message}"),
        other => anyhow::anyhow!("{other}"),
    }
}

/// Prints `value` as one line of JSON (what `--json` shows).
pub fn print_json(value: &impl serde::Serialize) {
    println!("{}", serde_json::to_string(value).unwrap_or_default());
}
