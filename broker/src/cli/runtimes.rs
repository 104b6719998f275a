//! `tessera runtimes create | list | disable`: the agent runtimes
//! (orchestrators) a broker accepts, each with its API key and the users and
//! task kinds it may start runs for.
//!
//! Why its own file: a family owns its clap type and the calls it makes, so a
//! change to how runtimes are registered (a new flag, the client-certificate
//! pin) touches this file and no other command's.

use super::remote::{admin, print_json, said, Remote};
use super::table::print_table;
use anyhow::Context;
use clap::Subcommand;
use std::path::PathBuf;
use tessera_client::types::CreateRuntimeRequest;

#[derive(Debug, Subcommand)]
pub enum RuntimesCommand {
    #[command(
        after_help = "Examples:\n  tessera runtimes create demo --users '*' --task-kinds summarize\n  tessera runtimes create ci --users 'svc-*' --client-cert ci.pem --json | jq -r .key"
    )]
    /// Create a runtime; prints its API key once.
    Create {
        /// The runtime's name: 1-63 of [a-z0-9._-], starting with a letter or digit.
        name: String,
        /// Comma-separated globs of users it may start runs for (default "*").
        #[arg(long)]
        users: Option<String>,
        /// Comma-separated globs of task kinds it may start runs for (default "*").
        #[arg(long)]
        task_kinds: Option<String>,
        /// Pin the runtime to this TLS client certificate (PEM): its key is then
        /// accepted only on mTLS connections presenting exactly this certificate.
        #[arg(long)]
        client_cert: Option<PathBuf>,
        #[command(flatten)]
        remote: Remote,
    },
    #[command(after_help = "Examples:\n  tessera runtimes list\n  tessera runtimes list --json")]
    /// List runtimes.
    List {
        #[command(flatten)]
        remote: Remote,
    },
    #[command(after_help = "Examples:\n  tessera runtimes disable demo")]
    /// Disable a runtime: its key stops working and its open runs are ended.
    Disable {
        /// The runtime's name (as `runtimes list` shows it).
        name: String,
        #[command(flatten)]
        remote: Remote,
    },
}

pub async fn run(command: RuntimesCommand) -> anyhow::Result<()> {
    match command {
        RuntimesCommand::Create {
            name,
            users,
            task_kinds,
            client_cert,
            remote,
        } => {
            let client_cert_sha256 = client_cert.as_deref().map(certificate_sha256).transpose()?;
            let request = CreateRuntimeRequest {
                name,
                users,
                task_kinds,
                client_cert_sha256,
            };
            let v = admin(&remote)?
                .create_runtime(&request)
                .await
                .map_err(said)?;
            if remote.json {
                print_json(&v);
            } else {
                println!("runtime {} created (id {})", v.name, v.id);
                println!("users: {}  task kinds: {}", v.users, v.task_kinds);
                println!("API key (shown once, store it now): {}", v.key);
            }
        }
        RuntimesCommand::List { remote } => {
            let v = admin(&remote)?.runtimes().await.map_err(said)?;
            print_table(
                &remote,
                &v,
                "runtimes",
                &[
                    "name",
                    "id",
                    "users",
                    "task_kinds",
                    "created_at",
                    "disabled_at",
                ],
            );
        }
        RuntimesCommand::Disable { name, remote } => {
            let v = admin(&remote)?.disable_runtime(&name).await.map_err(said)?;
            if remote.json {
                print_json(&v);
            } else {
                println!(
                    "runtime {name} {}; ended {} open runs, revoked {} capabilities and {} leases",
                    if v.disabled {
                        "disabled"
                    } else {
                        "was already disabled"
                    },
                    v.runs_ended,
                    v.revoked.capabilities,
                    v.revoked.leases
                );
            }
        }
    }
    Ok(())
}

/// SHA-256 (hex) of the first certificate in a PEM file: the runtime's pin.
fn certificate_sha256(path: &std::path::Path) -> anyhow::Result<String> {
    let certs = crate::server::read_certificates(path, "--client-cert")?;
    let leaf = certs.first().context("--client-cert: no certificate")?;
    Ok(crate::ids::sha256_hex(leaf.as_ref()))
}
