//! Admin commands (runtimes, runs, capabilities, keys, leases): calls to a
//! running broker with the admin token, through [`super::remote`].

use super::remote::{admin, print_json, said};
use super::table::print_table;
use super::{
    CapabilitiesCommand, Command, KeysCommand, LeasesCommand, RunsCommand, RuntimesCommand,
};
use anyhow::{bail, Context};
use std::process::ExitCode;
use tessera_client::types::{CreateRuntimeRequest, PendingRevocationsQuery, RunListQuery};

pub fn run(command: Command) -> ExitCode {
    super::exit::block_on_remote(dispatch(command))
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
        Command::Runtimes(RuntimesCommand::List { remote }) => {
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
        Command::Runtimes(RuntimesCommand::Disable { name, remote }) => {
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
        Command::Runs(RunsCommand::List {
            runtime,
            user,
            state,
            limit,
            after,
            remote,
        }) => {
            let query = RunListQuery {
                runtime,
                user,
                state: Some(state),
                after,
                limit: Some(limit),
            };
            let v = admin(&remote)?.runs(&query).await.map_err(said)?;
            if let (Some(next), false) = (&v.next_cursor, remote.json) {
                // On stderr: stdout stays the table a script reads.
                eprintln!("tessera: more runs follow: tessera runs list --after {next} …");
            }
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
            let query = PendingRevocationsQuery {
                stuck: Some(stuck),
                limit: Some(limit),
            };
            let v = admin(&remote)?
                .pending_revocations(&query)
                .await
                .map_err(said)?;
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
            let v = admin(&remote)?.revoke_capability(&id).await.map_err(said)?;
            if remote.json {
                print_json(&v);
            } else if v.revoked {
                println!("capability {id} revoked");
            } else {
                println!("capability {id} was already revoked");
            }
        }
        Command::Runs(RunsCommand::Show { id, remote }) => {
            let v = admin(&remote)?.run(&id).await.map_err(said)?;
            if remote.json {
                print_json(&v);
            } else {
                println!("run {}  user {}  state {}", v.run_id, v.user, v.state);
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
                println!();
                print_table(
                    &remote,
                    &v,
                    "leases",
                    &[
                        "lease_id",
                        "capability_id",
                        "backend",
                        "kind",
                        "expires_at",
                        "revoked_at",
                    ],
                );
            }
        }
        Command::Runs(RunsCommand::End { id, remote }) => {
            let v = admin(&remote)?.end_run(&id).await.map_err(said)?;
            if remote.json {
                print_json(&v);
            } else {
                let r = &v.revoked;
                println!(
                    "run {id} ended; revoked {} capabilities, {} leases, {} pending",
                    r.capabilities, r.leases, r.pending
                );
            }
        }
        Command::Keys(KeysCommand::Rotate { remote }) => {
            let v = admin(&remote)?.rotate_key().await.map_err(said)?;
            if remote.json {
                print_json(&v);
            } else {
                println!(
                    "new signing key {}: published now, signing from {}",
                    v.kid, v.signs_from
                );
                if let Some(prev) = &v.previous_kid {
                    println!(
                        "previous key {prev} signs until then and stays published until {}",
                        v.previous_published_until.as_deref().unwrap_or("")
                    );
                }
            }
        }
        Command::Keys(KeysCommand::List { remote }) => {
            let v = admin(&remote)?.keys().await.map_err(said)?;
            print_table(
                &remote,
                &v,
                "keys",
                &["kid", "state", "signs_from", "retired_at", "publish_until"],
            );
        }
        Command::Serve(_)
        | Command::Audit(_)
        | Command::Policy(_)
        | Command::Backends(_)
        | Command::Exec(_)
        | Command::CredentialProcess(_)
        | Command::Token(_)
        | Command::Init { .. }
        | Command::Login { .. }
        | Command::Status { .. }
        | Command::Completions { .. }
        | Command::Approvers(_)
        | Command::Approvals(_) => bail!("not an admin command"),
    }
    Ok(())
}

/// SHA-256 (hex) of the first certificate in a PEM file: the runtime's pin.
fn certificate_sha256(path: &std::path::Path) -> anyhow::Result<String> {
    let certs = crate::server::read_certificates(path, "--client-cert")?;
    let leaf = certs.first().context("--client-cert: no certificate")?;
    Ok(crate::ids::sha256_hex(leaf.as_ref()))
}
