//! `tessera leases list`: downstream removals (database users, …) the broker
//! still has to make, oldest first, and those stuck after repeated failures.
//!
//! Why its own file: a family owns its clap type and the calls it makes; the
//! revocation queue is an operator's view of its own.

use super::remote::{admin, said, Remote};
use super::table::print_table;
use clap::Subcommand;
use tessera_client::types::PendingRevocationsQuery;

#[derive(Debug, Subcommand)]
pub enum LeasesCommand {
    #[command(
        after_help = "Examples:\n  tessera leases list\n  tessera leases list --stuck --json"
    )]
    /// List leases whose downstream removal is still pending (oldest first).
    List {
        /// Only those that failed at least 3 times.
        #[arg(long)]
        stuck: bool,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: i64,
        #[command(flatten)]
        remote: Remote,
    },
}

pub async fn run(command: LeasesCommand) -> anyhow::Result<()> {
    match command {
        LeasesCommand::List {
            stuck,
            limit,
            remote,
        } => {
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
    }
    Ok(())
}
