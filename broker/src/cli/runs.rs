//! `tessera runs list | show | end`: the runs runtimes started, with what
//! each was given, and ending one (which revokes all of it).
//!
//! Why its own file: a family owns its clap type and the calls it makes; the
//! run listing's paging and the run's two tables are this family's alone.

use super::remote::{admin, print_json, said, Remote};
use super::table::print_table;
use clap::Subcommand;
use tessera_client::types::RunListQuery;

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    #[command(
        after_help = "Examples:\n  tessera runs list\n  tessera runs list --state all --user alice --limit 50\n  tessera runs list --after RUN_ID   (the next page)"
    )]
    /// List runs (open ones by default).
    List {
        /// Only runs of this runtime (by name).
        #[arg(long)]
        runtime: Option<String>,
        /// Only runs for this user.
        #[arg(long)]
        user: Option<String>,
        /// open, ended or all.
        #[arg(long, default_value = "open")]
        state: String,
        /// At most this many runs (1-1000).
        #[arg(long, default_value_t = 100)]
        limit: i64,
        /// The next page: runs after this run id (the list says it when there are more).
        #[arg(long)]
        after: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    #[command(after_help = "Examples:\n  tessera runs show 0b9c6f7e-2a1d-4c3b-9f8e-1d2c3b4a5f60")]
    /// Show a run with its capabilities and leases.
    Show {
        /// The run's id (a UUID, as `runs list` shows it).
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
    #[command(after_help = "Examples:\n  tessera runs end 0b9c6f7e-2a1d-4c3b-9f8e-1d2c3b4a5f60")]
    /// End a run and revoke everything it was given.
    End {
        /// The run's id (a UUID, as `runs list` shows it).
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
}

pub async fn run(command: RunsCommand) -> anyhow::Result<()> {
    match command {
        RunsCommand::List {
            runtime,
            user,
            state,
            limit,
            after,
            remote,
        } => {
            let query = RunListQuery {
                runtime,
                user,
                state: Some(state),
                after: after.map(Into::into),
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
        RunsCommand::Show { id, remote } => show(&id, &remote).await?,
        RunsCommand::End { id, remote } => {
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
    }
    Ok(())
}

/// `tessera runs show ID`: the run, then its capabilities and its leases.
async fn show(id: &str, remote: &Remote) -> anyhow::Result<()> {
    let v = admin(remote)?.run(id).await.map_err(said)?;
    if remote.json {
        print_json(&v);
    } else {
        println!("run {}  user {}  state {}", v.run_id, v.user, v.state);
        print_table(
            remote,
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
            remote,
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
    Ok(())
}
