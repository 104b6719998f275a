//! How a command's outcome becomes the process's exit status: a command line
//! clap cannot use, a remote command's error (2 when the broker refused, 1
//! otherwise), a reader that went away (`… | head`, 141), and the
//! single-threaded runtime a client command's future runs on.
//!
//! Why its own file: the dispatch in `cli/mod.rs` and a family that runs one
//! of its subcommands against the broker (`policy reload`) end the same way;
//! with these rules in a leaf, no family depends on `cli/mod.rs`.

use std::process::ExitCode;

/// A command line clap cannot use: its message, and exit 1 (a problem on
/// this side; 2 is kept for the broker's refusals and `serve`'s configuration
/// errors). `--help` and `--version` print and exit 0.
pub fn usage_error(e: clap::Error) -> ExitCode {
    let _ = e.print();
    if e.use_stderr() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Runs a remote command to its exit code: its error on stderr, exit 2 when
/// the broker refused, 1 for anything else ([`super::remote`]).
pub fn block_on_remote(f: impl std::future::Future<Output = anyhow::Result<()>>) -> ExitCode {
    block_on(async {
        match f.await {
            Ok(()) => ExitCode::SUCCESS,
            // The reader of our output went away (`… | head`): end as the
            // signal would have ended us, saying nothing.
            Err(e) if is_broken_pipe(&e) => ExitCode::from(141),
            Err(e) => {
                eprintln!("tessera: {e:#}");
                super::remote::exit_status(&e)
            }
        }
    })
}

/// Runs a client command's future on a single-threaded runtime.
pub fn block_on(command: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(command),
        Err(e) => {
            eprintln!("tessera: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Whether `e` is a write to a pipe whose reader has gone.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Output piped into a reader that stops early (`tessera audit export | head`)
/// ends the command quietly, as a shell tool should. Rust ignores SIGPIPE, so
/// the write fails with EPIPE and `println!` panics; this hook turns exactly
/// that panic into exit status 141 (128 + SIGPIPE, what the shell reports for
/// a tool the signal ended) and leaves every other panic to the default hook.
pub fn quiet_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info)
    }));
}
