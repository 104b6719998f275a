//! `tessera capabilities revoke ID`: one capability ended before its time,
//! with the leases (downstream credentials) it was exchanged for.
//!
//! Why its own file: a family owns its clap type and the calls it makes;
//! revoking a single capability is a different act from ending its run
//! (`runs end`), and its command evolves on its own.

use super::remote::{admin, print_json, said, Remote};
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum CapabilitiesCommand {
    #[command(
        after_help = "Examples:\n  tessera capabilities revoke 5d0e8a3c-7b6f-4e2d-a1c9-8f7e6d5c4b3a"
    )]
    /// Revoke one capability and its leases.
    Revoke {
        /// The capability's id (its `jti`; `runs show` lists them).
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
}

pub async fn run(command: CapabilitiesCommand) -> anyhow::Result<()> {
    match command {
        CapabilitiesCommand::Revoke { id, remote } => {
            let v = admin(&remote)?.revoke_capability(&id).await.map_err(said)?;
            if remote.json {
                print_json(&v);
            } else if v.revoked {
                println!("capability {id} revoked");
            } else {
                println!("capability {id} was already revoked");
            }
        }
    }
    Ok(())
}
