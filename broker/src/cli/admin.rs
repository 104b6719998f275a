//! Admin commands (runtimes, runs, capabilities, keys, leases): calls to a
//! running broker with the admin token, through [`super::remote`].

use super::remote::{call, call_query};
use super::{
    CapabilitiesCommand, Command, KeysCommand, LeasesCommand, Remote, RunsCommand, RuntimesCommand,
};
use anyhow::{bail, Context};
use serde_json::{json, Value};
use std::process::ExitCode;

pub fn run(command: Command) -> ExitCode {
    super::block_on_remote(dispatch(command))
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
        Command::Serve(_)
        | Command::Audit(_)
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
