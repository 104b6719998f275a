//! The HTTP side of every admin command: one client that sends the admin
//! token to the broker only, and the calls built on it.
//!
//! Why its own module: the admin, audit and policy command families all call
//! the broker; with the helpers here, none of them depends on another.

use crate::cli::Remote;
use anyhow::{bail, Context};
use serde_json::Value;

/// An HTTP client that sends the admin token to the broker only, under the
/// same rules as the run token (docs/clients.md): no proxy from the
/// environment unless `TESSERA_USE_PROXY=1`, no redirects, `http://` only to
/// loopback unless `TESSERA_INSECURE_HTTP=1`; `https://` addresses are
/// verified against `--ca-file` / `TESSERA_CA_FILE` (a private CA, as brokers
/// usually have).
fn client(remote: &Remote) -> anyhow::Result<reqwest::Client> {
    let flag = |name: &str| std::env::var(name).is_ok_and(|v| v == "1");
    let https = remote.addr.starts_with("https://");
    tessera_client::check_transport(
        &remote.addr,
        remote.ca_file.is_some(),
        flag("TESSERA_INSECURE_HTTP"),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut builder = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none());
    if !flag("TESSERA_USE_PROXY") {
        builder = builder.no_proxy();
    }
    if !https {
        return Ok(builder.build()?);
    }
    let ca = remote
        .ca_file
        .as_ref()
        .context("an https:// broker address needs TESSERA_CA_FILE or --ca-file")?;
    let roots = crate::server::read_roots(ca, "CA file")?;
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(builder.use_preconfigured_tls(config).build()?)
}

pub async fn call(
    remote: &Remote,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<Value> {
    call_query(remote, method, path, &[], body).await
}

/// [`call`] with query parameters (encoded by reqwest).
pub async fn call_query(
    remote: &Remote,
    method: reqwest::Method,
    path: &str,
    query: &[(&str, String)],
    body: Option<Value>,
) -> anyhow::Result<Value> {
    let token_file = remote
        .token_file
        .as_ref()
        .context("no admin token: set TESSERA_ADMIN_TOKEN_FILE or pass --token-file")?;
    let token = std::fs::read_to_string(token_file)
        .with_context(|| format!("cannot read admin token file {}", token_file.display()))?;
    let url = format!("{}{path}", remote.addr.trim_end_matches('/'));
    let client = client(remote)?;
    let mut req = client
        .request(method, &url)
        .query(query)
        .bearer_auth(token.trim());
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach the broker at {}: {e}", remote.addr))?;
    let status = resp.status();
    if status.is_redirection() {
        bail!(
            "the broker answered {status}, a redirect: the admin token is never re-sent elsewhere"
        );
    }
    let v: Value = resp.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        let code = v["error"]["code"].as_str().unwrap_or("unknown");
        let msg = v["error"]["message"].as_str().unwrap_or("");
        match status.as_u16() {
            401 => bail!("the broker rejected the admin token ({code}): {msg}"),
            403 => bail!("denied ({code}): {msg}"),
            _ => bail!("broker answered {status} ({code}): {msg}"),
        }
    }
    Ok(v)
}
