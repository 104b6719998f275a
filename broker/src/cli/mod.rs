//! Command-line interface of the `tessera` binary.
//!
//! `serve` runs the broker; the other commands talk to a running broker over HTTP
//! with the admin token (`TESSERA_ADDR`, `TESSERA_ADMIN_TOKEN_FILE` or
//! `--token-file`), print a table for people and JSON with `--json`.

mod admin;
mod audit;
mod backends;
mod child;
mod policy;
mod remote;
mod sandbox;
mod serve;

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "tessera",
    version,
    about = "Tessera credential broker for AI-agent runtimes"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the broker.
    Serve(ServeArgs),
    /// Manage runtimes (agent orchestrators).
    #[command(subcommand)]
    Runtimes(RuntimesCommand),
    /// List, inspect and end runs.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Revoke capabilities.
    #[command(subcommand)]
    Capabilities(CapabilitiesCommand),
    /// Downstream removals (database users, …) still pending.
    #[command(subcommand)]
    Leases(LeasesCommand),
    /// Manage signing keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Run a command with an emptied environment plus only the credentials asked
    /// for; revoke them when it exits.
    Exec(sandbox::ExecArgs),
    /// Print AWS credential_process JSON for one action on one resource.
    CredentialProcess(sandbox::CredentialProcessArgs),
    /// Print a capability token (for tools that speak Tessera).
    #[command(subcommand)]
    Token(sandbox::TokenCommand),
    /// Read, export and verify the tamper-evident audit log.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Check, test and explain a policy directory.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Inspect configured backends.
    #[command(subcommand)]
    Backends(BackendsCommand),
}

#[derive(Debug, Subcommand)]
pub enum BackendsCommand {
    /// Ask a database backend's server which defaults let a throw-away user do
    /// more than its grant; print each with the SQL that closes it. Exit 1 if any.
    Check {
        /// The backend's name in tessera.toml.
        name: String,
        /// Configuration file.
        #[arg(long, default_value = "tessera.toml")]
        config: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Configuration file (tessera.toml).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Development mode: embedded SQLite in the data dir, generated keys and admin token.
    #[arg(long)]
    pub dev: bool,
    /// Listen address (default 127.0.0.1:8700).
    #[arg(long)]
    pub listen: Option<String>,
    /// Directory for the SQLite file and dev keys (default: working directory).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Policy directory (default: ./policy).
    #[arg(long)]
    pub policy_dir: Option<PathBuf>,
}

/// How to reach a running broker as admin.
#[derive(Debug, Args, Clone)]
pub struct Remote {
    /// Broker address.
    #[arg(long, env = "TESSERA_ADDR", default_value = "http://127.0.0.1:8700")]
    pub addr: String,
    /// File holding the admin token.
    #[arg(long, env = "TESSERA_ADMIN_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// CA certificate(s) to verify an https:// broker address.
    #[arg(long, env = "TESSERA_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum RuntimesCommand {
    /// Create a runtime; prints its API key once.
    Create {
        name: String,
        /// Comma-separated globs of users it may start runs for (default "*").
        #[arg(long)]
        users: Option<String>,
        /// Comma-separated globs of task kinds it may start runs for (default "*").
        #[arg(long)]
        task_kinds: Option<String>,
        /// Pin the runtime to this TLS client certificate (PEM): its key is then
        /// accepted only on mTLS connections presenting exactly this certificate.
        #[arg(long)]
        client_cert: Option<PathBuf>,
        #[command(flatten)]
        remote: Remote,
    },
    /// List runtimes.
    List {
        #[command(flatten)]
        remote: Remote,
    },
    /// Disable a runtime: its key stops working and its open runs are ended.
    Disable {
        name: String,
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// List runs (open ones by default).
    List {
        /// Only runs of this runtime (by name).
        #[arg(long)]
        runtime: Option<String>,
        /// Only runs for this user.
        #[arg(long)]
        user: Option<String>,
        /// open, ended or all.
        #[arg(long, default_value = "open")]
        state: String,
        /// At most this many runs (1-1000).
        #[arg(long, default_value_t = 100)]
        limit: i64,
        /// The next page: runs after this run id (the list says it when there are more).
        #[arg(long)]
        after: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Show a run with its capabilities and leases.
    Show {
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// End a run and revoke everything it was given.
    End {
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Debug, Subcommand)]
pub enum CapabilitiesCommand {
    /// Revoke one capability and its leases.
    Revoke {
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Debug, Subcommand)]
pub enum LeasesCommand {
    /// List leases whose downstream removal is still pending (oldest first).
    List {
        /// Only those that failed at least 3 times.
        #[arg(long)]
        stuck: bool,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: i64,
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Rotate the signing key; the old one stays published until its tokens expire.
    Rotate {
        #[command(flatten)]
        remote: Remote,
    },
    /// List signing keys.
    List {
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Walk the chain and report the first edited, deleted or reordered row;
    /// with --checkpoints, also prove every checkpointed row is still there
    /// unchanged and name the rows after the last checkpoint as unverified.
    Verify {
        /// A checkpoint file kept by a witness (one JSON checkpoint per line,
        /// as `audit.checkpoint_file` writes it).
        #[arg(long)]
        checkpoints: Option<std::path::PathBuf>,
        /// With --checkpoints: fail when more rows than this follow the last
        /// checkpoint (e.g. twice `audit.checkpoint_rows`): a long unverified
        /// tail means checkpoints stopped, or the witness lost some.
        #[arg(long, requires = "checkpoints")]
        max_tail: Option<i64>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Print the most recent rows; with --follow, keep printing new ones.
    Tail {
        /// Only rows about this run.
        #[arg(long)]
        run: Option<String>,
        /// Only rows for this user.
        #[arg(long)]
        user: Option<String>,
        /// Only this event, or a family such as `capability.*`.
        #[arg(long)]
        event: Option<String>,
        /// How many recent rows to print first.
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: i64,
        /// Keep polling for new rows (Ctrl-C to stop).
        #[arg(long)]
        follow: bool,
        #[command(flatten)]
        remote: Remote,
    },
    /// Export rows as JSON lines (one object per row, oldest first) for a SIEM.
    Export {
        /// From this time: RFC 3339 (2026-11-29T00:00:00Z) or an age (24h, 7d).
        #[arg(long)]
        since: String,
        /// Until this time (exclusive), same forms as --since.
        #[arg(long)]
        until: Option<String>,
        /// Only rows about this run.
        #[arg(long)]
        run: Option<String>,
        /// Output format; only `jsonl`.
        #[arg(long, default_value = "jsonl")]
        format: String,
        #[command(flatten)]
        remote: Remote,
    },
}

pub fn run(cli: Cli) -> ExitCode {
    crate::server::install_crypto_provider();
    quiet_broken_pipe();
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Exec(args) => sandbox::exec(args),
        Command::CredentialProcess(args) => sandbox::credential_process(args),
        Command::Token(cmd) => sandbox::token(cmd),
        Command::Policy(command) => policy::run(command),
        Command::Audit(cmd) => block_on_remote(audit::run(cmd)),
        Command::Backends(BackendsCommand::Check { name, config, json }) => {
            backends_check(&name, &config, json)
        }
        other => admin::run(other),
    }
}

/// Runs a remote command to its exit code: its error on stderr, exit 1.
fn block_on_remote(f: impl std::future::Future<Output = anyhow::Result<()>>) -> ExitCode {
    block_on(async {
        match f.await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tessera: {e:#}");
                ExitCode::FAILURE
            }
        }
    })
}

fn backends_check(name: &str, config: &std::path::Path, json: bool) -> ExitCode {
    block_on(async {
        match backends::check(name, config, json).await {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(1),
            Err(e) => {
                eprintln!("tessera: {e:#}");
                ExitCode::from(2)
            }
        }
    })
}

/// Runs a client command's future on a single-threaded runtime.
fn block_on(command: impl std::future::Future<Output = ExitCode>) -> ExitCode {
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

/// Output piped into a reader that stops early (`tessera audit export | head`)
/// ends the command quietly, as a shell tool should. Rust ignores SIGPIPE, so
/// the write fails with EPIPE and `println!` panics; this hook turns exactly
/// that panic into exit status 141 (128 + SIGPIPE, what the shell reports for
/// a tool the signal ended) and leaves every other panic to the default hook.
fn quiet_broken_pipe() {
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
