//! `tessera login`: saves an admin token for a person at a terminal.
//!
//! It reads the token from standard input (not echoed on a terminal, with
//! Ctrl-C held back so the terminal is never left without echo), checks it
//! against the broker, and saves it where the admin commands look last
//! (`$XDG_CONFIG_HOME/tessera/admin.token`, mode 0600, [`super::saved_token`]).
//! A file named by `TESSERA_ADMIN_TOKEN_FILE` stays the recommended way for
//! scripts.
//!
//! Why its own file: the family owns its clap type and its run; the terminal
//! handling is `login`'s alone, and where the token is kept is shared with
//! [`super::remote`] through `saved_token`, so neither imports the other.

use super::remote::{admin_with, print_json, said, Remote};
use super::saved_token::{save_token, saved_token_file};
use crate::secret::AdminToken;
use anyhow::{bail, Context};
use clap::Args;
use std::io::{BufRead, Write};

#[derive(Debug, Args)]
pub struct LoginArgs {
    #[command(flatten)]
    pub remote: Remote,
}

/// `tessera login`: the token from standard input, checked, then saved.
pub async fn run(args: LoginArgs) -> anyhow::Result<()> {
    let remote = args.remote;
    let Ok(token) = AdminToken::parse(&read_token_from_stdin()?) else {
        bail!(
            "that is not an admin token (they start with {})",
            AdminToken::PREFIX
        );
    };
    let path =
        saved_token_file().context("cannot tell where to save it: set HOME or XDG_CONFIG_HOME")?;
    // Checked before it is saved: a typo must not replace a working token.
    admin_with(&remote, token.clone().into())?
        .keys()
        .await
        .map_err(said)?;
    save_token(&path, token.expose_secret())?;
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
