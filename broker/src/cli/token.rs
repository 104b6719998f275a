//! `tessera token capability --action A --resource R`: prints a capability
//! token for a tool that speaks Tessera itself (it presents the token to the
//! service, which verifies it against the broker's published keys).
//!
//! Why its own file: each sandbox command owns its clap type and its run; this
//! one only prints what the broker issued.

use super::sandbox::{runtime, say, warnings_to_stderr};
use clap::Subcommand;
use std::process::ExitCode;
use tessera_client::Client;

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    #[command(
        after_help = "Examples:\n  tessera token capability --action read --resource svc-reports:reports/2026/q1.csv\n  tessera token capability --action read --resource svc-reports:reports/* --ttl 5m --json"
    )]
    /// Print a capability token for ACTION on RESOURCE (for tools that speak Tessera).
    Capability {
        #[arg(long)]
        action: String,
        #[arg(long)]
        resource: String,
        /// At most this lifetime, e.g. 5m.
        #[arg(long)]
        ttl: Option<String>,
        /// Print {capability_id, token, expires_at, uses} as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `tessera token capability`.
pub fn run(command: TokenCommand) -> ExitCode {
    warnings_to_stderr();
    let TokenCommand::Capability {
        action,
        resource,
        ttl,
        json,
    } = command;
    let result = runtime().and_then(|rt| {
        rt.block_on(async {
            let client = Client::from_env().map_err(|e| e.to_string())?;
            client
                .capability_for(&action, &resource, ttl.as_deref())
                .await
                .map_err(|e| e.to_string())
        })
    });
    match result {
        Ok(cap) if json => {
            let v = serde_json::json!({
                "capability_id": cap.id(), "token": cap.token(),
                "expires_at": cap.expires_at, "uses": cap.uses,
            });
            println!("{v}");
            ExitCode::SUCCESS
        }
        Ok(cap) => {
            println!("{}", cap.token());
            ExitCode::SUCCESS
        }
        Err(e) => {
            say!("tessera token capability: {e}");
            ExitCode::FAILURE
        }
    }
}
