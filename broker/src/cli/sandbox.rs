//! What the sandbox commands share: `tessera exec`, `tessera credential-process`
//! and `tessera token capability` run inside an agent's sandbox with a run
//! token, on the client library, and print to a stderr that may be closed.
//!
//! Why its own file: each of the three commands is a file of its own
//! ([`super::exec`], [`super::credential_process`], [`super::token`]); the
//! few rules they share (a `say!` that cannot panic, the client library's
//! warnings on stderr only, a single-threaded runtime) live in this leaf so
//! none of them imports another.

/// A message on stderr that cannot fail: with stderr closed (a pipe nobody
/// reads), `eprintln!` panics, and a panic before revocation would leave what
/// `exec` obtained alive.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

pub(crate) use say;

/// Warnings (the client library's, e.g. a run token taken from the
/// environment) go to stderr, one line each; nothing below WARN, so a sandbox
/// command's stderr stays the command's. A closed stderr is ignored.
pub fn warnings_to_stderr() {
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(std::io::stderr)
        .without_time()
        .with_target(false)
        .with_ansi(false)
        .try_init();
}

/// The single-threaded runtime a sandbox command runs on.
pub fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}
