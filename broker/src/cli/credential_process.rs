//! `tessera credential-process --action A --resource R`: AWS
//! `credential_process` JSON on stdout, for `~/.aws/config`, so an SDK or the
//! AWS CLI in the sandbox gets short-lived credentials from the broker.
//!
//! Why its own file: each sandbox command owns its clap type and its run; this
//! one holds nothing open and revokes nothing (each call supersedes the one
//! before), unlike `exec`.

use super::sandbox::{runtime, say, warnings_to_stderr};
use clap::Args;
use std::process::ExitCode;
use tessera_client::Client;

#[derive(Debug, Args)]
pub struct CredentialProcessArgs {
    #[arg(long)]
    pub action: String,
    #[arg(long)]
    pub resource: String,
}

/// `tessera credential-process`: AWS `credential_process` JSON on stdout.
pub fn run(args: CredentialProcessArgs) -> ExitCode {
    warnings_to_stderr();
    let result = runtime().and_then(|rt| {
        rt.block_on(async {
            let client = Client::from_env().map_err(|e| e.to_string())?;
            // Called again whenever the SDK wants fresh credentials: each call
            // supersedes the capability of the one before.
            let slot = format!("credential-process:{}={}", args.action, args.resource);
            let ask = tessera_client::Ask {
                slot: Some(&slot),
                ..Default::default()
            };
            let creds = client
                .aws_credentials_with(&args.action, &args.resource, &ask)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(creds.credential_process_json())
        })
    });
    match result {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            say!("tessera credential-process: {e}");
            ExitCode::FAILURE
        }
    }
}
