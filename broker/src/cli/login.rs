//! `tessera login`, `tessera init` and `tessera status`: getting an operator's
//! shell and a new deployment to a working state.
//!
//! - `login` reads an admin token (from standard input, not echoed on a
//!   terminal), checks it against the broker, and saves it where the admin
//!   commands look last (`$XDG_CONFIG_HOME/tessera/admin.token`, mode 0600). A
//!   file named by `TESSERA_ADMIN_TOKEN_FILE` stays the recommended way for
//!   scripts; `login` is for a person at a terminal.
//! - `init` creates what a production broker needs and cannot invent: the
//!   key-encryption key and the admin token, each in its own file with mode
//!   0600, refusing to overwrite either (losing a KEK loses every signing key).
//! - `status` says whether the broker answers, is ready, and accepts the token.

use super::remote::{admin, admin_with, print_json, said};
use super::Remote;
use crate::ids::{new_secret, ADMIN_TOKEN_PREFIX};
use anyhow::{bail, Context};
use secrecy::ExposeSecret;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

/// Where `tessera login` keeps the token: `$XDG_CONFIG_HOME/tessera/admin.token`
/// (default `~/.config/tessera/admin.token`).
pub fn saved_token_file() -> Option<PathBuf> {
    let base = crate::config::process_env("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| crate::config::process_env("HOME").map(|h| Path::new(&h).join(".config")))?;
    Some(base.join("tessera").join("admin.token"))
}

pub async fn login(remote: Remote) -> anyhow::Result<()> {
    let token = read_token_from_stdin()?;
    if !crate::ids::has_secret_shape(&token, ADMIN_TOKEN_PREFIX) {
        bail!("that is not an admin token (they start with {ADMIN_TOKEN_PREFIX})");
    }
    let path =
        saved_token_file().context("cannot tell where to save it: set HOME or XDG_CONFIG_HOME")?;
    // Checked before it is saved: a typo must not replace a working token.
    admin_with(&remote, secrecy::SecretString::from(token.clone()))?
        .keys()
        .await
        .map_err(said)?;
    if let Some(dir) = path.parent() {
        create_private_dir(dir)?;
    }
    replace_private(&path, &token)?;
    if remote.json {
        print_json(&serde_json::json!({ "saved": path }));
    } else {
        println!(
            "admin token accepted by {}; saved to {} (mode 0600)",
            remote.addr,
            path.display()
        );
    }
    Ok(())
}

/// One line from standard input; not echoed when it is a terminal.
fn read_token_from_stdin() -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    let terminal = std::io::IsTerminal::is_terminal(&stdin);
    let saved = if terminal {
        eprint!("Admin token (input hidden): ");
        let _ = std::io::stderr().flush();
        let fd = std::io::stdin();
        let old = nix::sys::termios::tcgetattr(&fd).ok();
        if let Some(old) = &old {
            let mut quiet = old.clone();
            quiet
                .local_flags
                .remove(nix::sys::termios::LocalFlags::ECHO);
            let _ = nix::sys::termios::tcsetattr(&fd, nix::sys::termios::SetArg::TCSANOW, &quiet);
        }
        old
    } else {
        None
    };
    let mut line = String::new();
    let read = stdin.lock().read_line(&mut line);
    if let Some(old) = saved {
        let _ = nix::sys::termios::tcsetattr(
            std::io::stdin(),
            nix::sys::termios::SetArg::TCSANOW,
            &old,
        );
        eprintln!();
    }
    read.context("reading the admin token from standard input")?;
    Ok(line.trim().to_owned())
}

fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating {}", dir.display())),
    }
}

/// Writes `contents` to `path` with mode 0600 through a new file renamed over
/// the old one, so the token is never in a file others could read.
fn replace_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    write_new_private(&tmp, contents)?;
    std::fs::rename(&tmp, path).with_context(|| format!("saving {}", path.display()))
}

/// Creates `path` (it must not exist) with mode 0600 holding `contents` and a newline.
fn write_new_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(contents.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    Ok(())
}

/// `tessera init --dir DIR`: DIR/kek and DIR/admin.token, mode 0600, never
/// overwritten.
pub fn init(dir: &Path, json: bool) -> anyhow::Result<()> {
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
    create_private_dir(dir)?;
    let (_, kek_text) = crate::keys::Kek::generate();
    write_new_private(&kek_file, &kek_text)?;
    let token = new_secret(ADMIN_TOKEN_PREFIX);
    if let Err(e) = write_new_private(&token_file, token.expose_secret()) {
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

/// `tessera status`: reachable, ready, token accepted.
pub async fn status(remote: Remote) -> anyhow::Result<()> {
    let client = admin(&remote)?;
    let ready = client.ready().await.map_err(said)?;
    let keys = client.keys().await.map_err(said)?;
    let active = keys
        .keys
        .iter()
        .find(|k| k.state == "active")
        .map(|k| k.kid.clone());
    if remote.json {
        print_json(&serde_json::json!({
            "addr": remote.addr,
            "ready": ready.status == "ready",
            "admin_token": "accepted",
            "signing_keys": keys.keys.len(),
            "active_kid": active,
        }));
    } else {
        println!("broker:      {} ({})", remote.addr, ready.status);
        println!("admin token: accepted");
        println!(
            "signing keys: {} (active {})",
            keys.keys.len(),
            active.as_deref().unwrap_or("none")
        );
    }
    Ok(())
}
