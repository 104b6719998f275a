//! `tessera approvers create | list | revoke`: the admin mints, lists and
//! revokes approver keys, one per person (and device) who decides approvals.
//!
//! Why its own file: the family owns its clap type and its run. Minting keys
//! is the admin's act, with the admin token only; deciding approvals with
//! those keys is [`super::approvals`], which this file does not need.

use super::remote::{admin, print_json, said, Remote};
use super::table::print_table;
use clap::Subcommand;
use tessera_client::types::CreateApproverRequest;

#[derive(Debug, Subcommand)]
pub enum ApproversCommand {
    #[command(
        after_help = "Examples:\n  tessera approvers create dana-laptop --user dana\n  tessera approvers create dana-laptop --user dana --json | jq -r .key > dana.key"
    )]
    /// Mint an approver key for a user (entities.json); prints the key once.
    Create {
        /// A name for this key: 1-63 of [a-z0-9._-].
        name: String,
        /// The user whose decisions this key makes.
        #[arg(long)]
        user: String,
        #[command(flatten)]
        remote: Remote,
    },
    #[command(after_help = "Examples:\n  tessera approvers list")]
    /// List approver keys (never the keys themselves).
    List {
        #[command(flatten)]
        remote: Remote,
    },
    #[command(after_help = "Examples:\n  tessera approvers revoke APPROVER_ID")]
    /// Revoke an approver key: it stops working at once.
    Revoke {
        /// The approver's id (from `tessera approvers list`).
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
}

pub async fn run(cmd: ApproversCommand) -> anyhow::Result<()> {
    match cmd {
        ApproversCommand::Create { name, user, remote } => {
            let v = admin(&remote)?
                .create_approver(&CreateApproverRequest { name, user })
                .await
                .map_err(said)?;
            if remote.json {
                print_json(&v);
            } else {
                println!(
                    "approver {} created for user {} (id {})",
                    v.name, v.user, v.id
                );
                println!(
                    "approver key (shown once, hand it to {} now): {}",
                    v.user, v.key
                );
            }
        }
        ApproversCommand::List { remote } => {
            let v = admin(&remote)?.approvers().await.map_err(said)?;
            print_table(
                &remote,
                &v,
                "approvers",
                &["name", "user", "id", "created_at", "revoked_at"],
            );
        }
        ApproversCommand::Revoke { id, remote } => {
            let v = admin(&remote)?.revoke_approver(&id).await.map_err(said)?;
            if remote.json {
                print_json(&v);
            } else {
                println!("approver {} ({}) revoked", v.name, v.user);
            }
        }
    }
    Ok(())
}
