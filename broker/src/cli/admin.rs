//! Admin commands: HTTP calls to a running broker with the admin token.

use super::{
    CapabilitiesCommand, Command, KeysCommand, LeasesCommand, Remote, RunsCommand, RuntimesCommand,
};
use anyhow::{bail, Context};
use serde_json::{json, Value};
use std::process::ExitCode;

pub fn run(command: Command) -> ExitCode {
    super::block_on(async {
        match dispatch(command).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tessera: {e:#}");
                ExitCode::FAILURE
            }
        }
    })
}

async fn dispatch(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Runtimes(RuntimesCommand::Create {
            name,
            users,
            task_kinds,
            client_cert,
            remote,
        }) => {
            let pin = client_cert.as_deref().map(certificate_sha256).transpose()?;
            let body = json!({ "name": name, "users": users, "task_kinds": task_kinds, "client_cert_sha256": pin });
            let v = call(
                &remote,
                reqwest::Method::POST,
                "/v1/admin/runtimes",
                Some(body),
            )
            .await?;
            if remote.json {
                println!("{v}");
            } else {
                println!(
                    "runtime {} created (id {})",
                    v["name"].as_str().unwrap_or(""),
                    v["id"].as_str().unwrap_or("")
                );
                println!(
                    "users: {}  task kinds: {}",
                    v["users"].as_str().unwrap_or(""),
                    v["task_kinds"].as_str().unwrap_or("")
                );
                println!(
                    "API key (shown once, store it now): {}",
                    v["key"].as_str().unwrap_or("")
                );
            }
        }
        Command::Runtimes(RuntimesCommand::List { remote }) => {
            let v = call(&remote, reqwest::Method::GET, "/v1/admin/runtimes", None).await?;
            print_table(
                &remote,
                &v,
                "runtimes",
                &["name", "id", "users", "task_kinds", "created_at"],
            );
        }
        Command::Runtimes(RuntimesCommand::Disable { name, remote }) => {
            let v = call(
                &remote,
                reqwest::Method::POST,
                &format!("/v1/admin/runtimes/{name}/disable"),
                None,
            )
            .await?;
            if remote.json {
                println!("{v}");
            } else {
                let r = &v["revoked"];
                println!(
                    "runtime {name} {}; ended {} open runs, revoked {} capabilities and {} leases",
                    if v["disabled"] == true {
                        "disabled"
                    } else {
                        "was already disabled"
                    },
                    v["runs_ended"],
                    r["capabilities"],
                    r["leases"]
                );
            }
        }
        Command::Runs(RunsCommand::List {
            runtime,
            user,
            state,
            limit,
            remote,
        }) => {
            let mut query = vec![("state", state), ("limit", limit.to_string())];
            query.extend(runtime.map(|r| ("runtime", r)));
            query.extend(user.map(|u| ("user", u)));
            let v = call_query(
                &remote,
                reqwest::Method::GET,
                "/v1/admin/runs",
                &query,
                None,
            )
            .await?;
            print_table(
                &remote,
                &v,
                "runs",
                &[
                    "run_id",
                    "user",
                    "runtime",
                    "state",
                    "created_at",
                    "expires_at",
                ],
            );
        }
        Command::Leases(LeasesCommand::List {
            stuck,
            limit,
            remote,
        }) => {
            let query = [("stuck", stuck.to_string()), ("limit", limit.to_string())];
            let v = call_query(
                &remote,
                reqwest::Method::GET,
                "/v1/admin/leases",
                &query,
                None,
            )
            .await?;
            print_table(
                &remote,
                &v,
                "revocations",
                &[
                    "lease_id",
                    "backend",
                    "downstream_ref",
                    "reason",
                    "attempts",
                    "next_attempt_at",
                    "last_error",
                ],
            );
        }
        Command::Capabilities(CapabilitiesCommand::Revoke { id, remote }) => {
            let v = call(
                &remote,
                reqwest::Method::POST,
                &format!("/v1/capabilities/{id}/revoke"),
                None,
            )
            .await?;
            if remote.json {
                println!("{v}");
            } else if v["revoked"] == true {
                println!("capability {id} revoked");
            } else {
                println!("capability {id} was already revoked");
            }
        }
        Command::Runs(RunsCommand::Show { id, remote }) => {
            let v = call(
                &remote,
                reqwest::Method::GET,
                &format!("/v1/runs/{id}"),
                None,
            )
            .await?;
            if remote.json {
                println!("{v}");
            } else {
                println!(
                    "run {}  user {}  state {}",
                    v["run_id"].as_str().unwrap_or(""),
                    v["user"].as_str().unwrap_or(""),
                    v["state"].as_str().unwrap_or("")
                );
                print_table(
                    &remote,
                    &v,
                    "capabilities",
                    &[
                        "capability_id",
                        "action",
                        "resource",
                        "state",
                        "uses_left",
                        "expires_at",
                    ],
                );
            }
        }
        Command::Runs(RunsCommand::End { id, remote }) => {
            let v = call(
                &remote,
                reqwest::Method::POST,
                &format!("/v1/runs/{id}/end"),
                None,
            )
            .await?;
            if remote.json {
                println!("{v}");
            } else {
                let r = &v["revoked"];
                println!(
                    "run {id} ended; revoked {} capabilities, {} leases, {} pending",
                    r["capabilities"], r["leases"], r["pending"]
                );
            }
        }
        Command::Keys(KeysCommand::Rotate { remote }) => {
            let v = call(
                &remote,
                reqwest::Method::POST,
                "/v1/admin/keys/rotate",
                None,
            )
            .await?;
            if remote.json {
                println!("{v}");
            } else {
                println!("new signing key {}", v["kid"].as_str().unwrap_or(""));
                if let Some(prev) = v["previous_kid"].as_str() {
                    println!(
                        "previous key {prev} stays published until {}",
                        v["previous_published_until"].as_str().unwrap_or("")
                    );
                }
            }
        }
        Command::Keys(KeysCommand::List { remote }) => {
            let v = call(&remote, reqwest::Method::GET, "/v1/admin/keys", None).await?;
            print_table(
                &remote,
                &v,
                "keys",
                &["kid", "state", "created_at", "publish_until"],
            );
        }
        Command::Audit(cmd) => super::audit::run(cmd).await?,
        Command::Policy(super::policy::PolicyCommand::Reload { remote }) => {
            let v = call(
                &remote,
                reqwest::Method::POST,
                "/v1/admin/policy/reload",
                None,
            )
            .await?;
            if remote.json {
                println!("{v}");
            } else {
                println!(
                    "policy reloaded: {} policies in force (sha256 {}); {} live capabilities \
                     the new policy no longer grants were revoked",
                    v["policies"],
                    v["sha256"].as_str().unwrap_or(""),
                    v["revoked"]
                );
            }
        }
        Command::Serve(_)
        | Command::Policy(_)
        | Command::Backends(_)
        | Command::Exec(_)
        | Command::CredentialProcess(_)
        | Command::Token(_) => bail!("not an admin command"),
    }
    Ok(())
}

/// SHA-256 (hex) of the first certificate in a PEM file: the runtime's pin.
fn certificate_sha256(path: &std::path::Path) -> anyhow::Result<String> {
    let certs = crate::server::read_certificates(path, "--client-cert")?;
    let leaf = certs.first().context("--client-cert: no certificate")?;
    Ok(crate::ids::sha256_hex(leaf.as_ref()))
}

pub(super) fn print_table(remote: &Remote, v: &Value, key: &str, columns: &[&str]) {
    if remote.json {
        println!("{v}");
        return;
    }
    let rows = v[key].as_array().cloned().unwrap_or_default();
    let cell = |row: &Value, c: &str| match &row[c] {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    };
    let widths: Vec<usize> = columns
        .iter()
        .map(|c| {
            rows.iter()
                .map(|r| cell(r, c).len())
                .max()
                .unwrap_or(0)
                .max(c.len())
        })
        .collect();
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
    };
    println!(
        "{}",
        line(columns.iter().map(|c| c.to_uppercase()).collect())
    );
    for r in &rows {
        println!("{}", line(columns.iter().map(|c| cell(r, c)).collect()));
    }
}

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

pub(super) async fn call(
    remote: &Remote,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<Value> {
    call_query(remote, method, path, &[], body).await
}

/// [`call`] with query parameters (encoded by reqwest).
pub(super) async fn call_query(
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
