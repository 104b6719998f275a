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

use super::remote::{admin, admin_with, print_json, said, Remote};
use super::saved_token::{create_private_dir, save_token, saved_token_file};
use crate::ids::{new_secret, ADMIN_TOKEN_PREFIX};
use anyhow::{bail, Context};
use secrecy::ExposeSecret;
use std::io::{BufRead, Write};
use std::path::Path;

pub async fn login(remote: Remote) -> anyhow::Result<()> {
    let token = read_token_from_stdin()?;
    if !crate::ids::has_secret_shape(token.as_str(), ADMIN_TOKEN_PREFIX) {
        bail!("that is not an admin token (they start with {ADMIN_TOKEN_PREFIX})");
    }
    let path =
        saved_token_file().context("cannot tell where to save it: set HOME or XDG_CONFIG_HOME")?;
    // Checked before it is saved: a typo must not replace a working token.
    admin_with(&remote, secrecy::SecretString::from(token.as_str()))?
        .keys()
        .await
        .map_err(said)?;
    save_token(&path, &token)?;
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
fn read_token_from_stdin() -> anyhow::Result<zeroize::Zeroizing<String>> {
    let stdin = std::io::stdin();
    let _quiet = if std::io::IsTerminal::is_terminal(&stdin) {
        eprint!("Admin token (input hidden, Ctrl-D to cancel): ");
        let _ = std::io::stderr().flush();
        Some(Quiet::start())
    } else {
        None
    };
    let mut line = zeroize::Zeroizing::new(String::new());
    stdin
        .lock()
        .read_line(&mut line)
        .context("reading the admin token from standard input")?;
    Ok(zeroize::Zeroizing::new(line.trim().to_owned()))
}

/// The terminal without echo, and Ctrl-C / Ctrl-Z / Ctrl-\ held back, until
/// dropped: a signal while the token is typed would otherwise leave the
/// terminal without echo. A held signal is delivered once echo is back.
struct Quiet {
    saved: Option<nix::sys::termios::Termios>,
    mask: Option<nix::sys::signal::SigSet>,
}

impl Quiet {
    fn start() -> Quiet {
        use nix::sys::signal::{SigSet, SigmaskHow, Signal};
        use nix::sys::termios::{tcgetattr, tcsetattr, LocalFlags, SetArg};
        let mut held = SigSet::empty();
        for s in [Signal::SIGINT, Signal::SIGTSTP, Signal::SIGQUIT] {
            held.add(s);
        }
        let mut old_mask = SigSet::empty();
        let mask =
            nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&held), Some(&mut old_mask))
                .ok()
                .map(|()| old_mask);
        let saved = tcgetattr(std::io::stdin()).ok();
        if let Some(old) = &saved {
            let mut quiet = old.clone();
            quiet.local_flags.remove(LocalFlags::ECHO);
            let _ = tcsetattr(std::io::stdin(), SetArg::TCSANOW, &quiet);
        }
        Quiet { saved, mask }
    }
}

impl Drop for Quiet {
    fn drop(&mut self) {
        use nix::sys::termios::{tcsetattr, SetArg};
        if let Some(old) = &self.saved {
            let _ = tcsetattr(std::io::stdin(), SetArg::TCSANOW, old);
            eprintln!();
        }
        if let Some(mask) = &self.mask {
            let _ = nix::sys::signal::sigprocmask(
                nix::sys::signal::SigmaskHow::SIG_SETMASK,
                Some(mask),
                None,
            );
        }
    }
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
    create_private_dir(dir, 0o022)?;
    let (_, kek_text) = crate::keys::Kek::generate();
    crate::private_fs::write_new(&kek_file, &kek_text)?;
    let token = new_secret(ADMIN_TOKEN_PREFIX);
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

/// `tessera status`: reachable, ready, token accepted.
pub async fn status(remote: Remote) -> anyhow::Result<()> {
    let client = admin(&remote)?;
    let ready = client.ready().await.map_err(said)?;
    let keys = client.keys().await.map_err(said)?;
    let replicas = client.status().await.map_err(said)?;
    // As the client reached it: `host:port` is shown as `http://host:port`.
    let addr = tessera_client::broker_address(&remote.addr);
    let active = keys
        .keys
        .iter()
        .find(|k| k.state == "active")
        .map(|k| k.kid.clone());
    let scheduled = keys.keys.iter().find(|k| k.state == "scheduled");
    if remote.json {
        print_json(&serde_json::json!({
            "addr": addr,
            "ready": ready.status == "ready",
            "reasons": ready.reasons,
            "admin_token": "accepted",
            "signing_keys": keys.keys.len(),
            "active_kid": active,
            "scheduled_kid": scheduled.map(|k| &k.kid),
            "store": replicas.store,
            "published_policy": replicas.published_policy,
            "unsealed_versions": replicas.unsealed_versions,
            "replicas": replicas.replicas,
        }));
        return Ok(());
    }
    println!("broker:      {addr} ({})", ready.status);
    for r in &ready.reasons {
        println!("  not ready: {} ({})", r.code, r.message);
    }
    println!("admin token: accepted");
    println!(
        "signing keys: {} (active {})",
        keys.keys.len(),
        active.as_deref().unwrap_or("none")
    );
    if let Some(k) = scheduled {
        println!("  {} signs from {}", k.kid, k.signs_from);
    }
    // What other replicas wrote to the store is shown, never interpreted by
    // the terminal: control characters become '?'.
    let shown = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect()
    };
    let short = |s: &str| shown(&s.chars().take(12).collect::<String>());
    match &replicas.published_policy {
        Some(p) => println!(
            "policy:      version {} (sha256 {}), published {} by {} ({})",
            p.version,
            short(&p.sha256),
            p.published_at,
            short(&p.replica),
            shown(&p.trigger)
        ),
        None => println!("policy:      no version published"),
    }
    if !replicas.unsealed_versions.is_empty() {
        println!(
            "  REFUSED versions {:?}: not sealed under the KEK (written to the store directly)",
            replicas.unsealed_versions
        );
    }
    println!("store:       {}", replicas.store);
    println!("replicas:    {}", replicas.replicas.len());
    for r in &replicas.replicas {
        let behind = match (&replicas.published_policy, r.policy_version) {
            (Some(p), Some(v)) if v < p.version => " BEHIND",
            _ => "",
        };
        println!(
            "  {}{} {}:{} v{} policy {} (sha256 {}){behind} key {} up {}s{}",
            short(&r.id),
            if r.this { "*" } else { " " },
            shown(&r.machine),
            r.pid,
            shown(r.software.as_deref().unwrap_or("?")),
            r.policy_version.map_or("?".into(), |v| v.to_string()),
            r.policy_sha256.as_deref().map_or("?".into(), short),
            r.signing_kid.as_deref().map_or("?".into(), short),
            r.uptime_seconds,
            if r.live { "" } else { " (no heartbeat)" },
        );
    }
    Ok(())
}
