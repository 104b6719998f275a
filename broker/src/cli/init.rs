//! `tessera init --dir DIR`: creates what a production broker needs and cannot
//! invent: the key-encryption key and the admin token, each in its own file
//! with mode 0600, refusing to overwrite either (losing a KEK loses every
//! signing key).
//!
//! Why its own file: the family owns its clap type and its run; `init` works
//! offline, on files only, and shares nothing with the commands that call a
//! broker but the private-folder rule of [`super::saved_token`].

use super::remote::print_json;
use super::saved_token::create_private_dir;
use crate::secret::AdminToken;
use anyhow::bail;
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Folder to create them in (made with mode 0700 if missing).
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// Print the two paths as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Exit 0 when both files were created, 1 otherwise (the reason on stderr).
pub fn run(args: InitArgs) -> ExitCode {
    match init(&args.dir, args.json) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tessera: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `tessera init --dir DIR`: DIR/kek and DIR/admin.token, mode 0600, never
/// overwritten.
fn init(dir: &Path, json: bool) -> anyhow::Result<()> {
    let kek_file = dir.join("kek");
    let token_file = dir.join("admin.token");
    for f in [&kek_file, &token_file] {
        if f.exists() {
            bail!(
                "{} exists; init never overwrites a key or a token (move it away first)",
                f.display()
            );
        }
    }
    create_private_dir(dir, 0o022)?;
    let (_, kek_text) = crate::keys::Kek::generate();
    crate::private_fs::write_new(&kek_file, &kek_text)?;
    let token = AdminToken::generate();
    if let Err(e) = crate::private_fs::write_new(&token_file, token.expose_secret()) {
        let _ = std::fs::remove_file(&kek_file);
        return Err(e);
    }
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    if json {
        print_json(&serde_json::json!({
            "kek_file": abs(&kek_file),
            "admin_token_file": abs(&token_file),
        }));
    } else {
        println!("created (mode 0600; back up the KEK: without it the signing keys are lost):");
        println!("  TESSERA_KEK_FILE={}", abs(&kek_file).display());
        println!("  TESSERA_ADMIN_TOKEN_FILE={}", abs(&token_file).display());
    }
    Ok(())
}
