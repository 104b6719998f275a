//! `tessera keys rotate | list`: the broker's signing keys, and rotating to a
//! new one while the old stays published until its tokens expire.
//!
//! Why its own file: a family owns its clap type and the calls it makes; key
//! rotation's output (when the new key signs, until when the old one is
//! published) is this family's alone.

use super::remote::{admin, print_json, said, Remote};
use super::table::print_table;
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    #[command(after_help = "Examples:\n  tessera keys rotate")]
    /// Rotate the signing key; the old one stays published until its tokens expire.
    Rotate {
        #[command(flatten)]
        remote: Remote,
    },
    #[command(after_help = "Examples:\n  tessera keys list --json")]
    /// List signing keys.
    List {
        #[command(flatten)]
        remote: Remote,
    },
}

pub async fn run(command: KeysCommand) -> anyhow::Result<()> {
    match command {
        KeysCommand::Rotate { remote } => {
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
        KeysCommand::List { remote } => {
            let v = admin(&remote)?.keys().await.map_err(said)?;
            print_table(
                &remote,
                &v,
                "keys",
                &["kid", "state", "signs_from", "retired_at", "publish_until"],
            );
        }
    }
    Ok(())
}
