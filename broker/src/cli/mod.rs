//! Command-line interface of the `tessera` binary.
//!
//! `serve` runs the broker; the other commands talk to a running broker over HTTP
//! with the admin token (`TESSERA_ADDR`, `TESSERA_ADMIN_TOKEN_FILE` or
//! `--token-file`, `TESSERA_ADMIN_TOKEN`, `tessera login`), print a table for
//! people and JSON with `--json`.
//!
//! Every command's `--help` ends with examples (a test walks the whole tree to
//! hold that, and that every positional argument says what it is). Exit status:
//! 0 done; for commands that call the broker, 2 when the broker refused and 1
//! for anything on this side; `serve` exits 2 on a configuration error; the
//! policy tools, `exec` and `backends check` document their own (docs/cli.md).
//!
//! Layout: each command family is a file of its own that owns its clap type
//! (its `Subcommand` enum or `Args` struct) and its `run` (`runtimes.rs` owns
//! `RuntimesCommand` and `runtimes::run`); this file holds only the top-level
//! [`Cli`] and [`Command`], whose variants wrap those types, and the dispatch.
//! What several families share lives in leaves they import instead of each
//! other: `remote` (the admin client and the `Remote` flags), `table`, `exit`,
//! `saved_token`, and `sandbox` for the commands run inside a sandbox. No two
//! files of `cli/` import each other, and none imports this one.

mod approvals;
mod approvers;
mod audit;
mod audit_segments;
mod backends;
mod capabilities;
mod child;
mod completions;
mod credential_process;
mod egress;
mod environment;
mod exec;
mod exit;
mod grants;
mod holds;
mod init;
mod keys;
mod leases;
mod login;
mod policy;
mod remote;
mod runs;
mod runtimes;
mod sandbox;
mod saved_token;
mod serve;
mod status;
mod table;
mod token;
mod trust;

use clap::{CommandFactory, Parser, Subcommand};
pub use exit::usage_error;
use exit::{block_on, block_on_remote, quiet_broken_pipe};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "tessera",
    version,
    about = "Tessera credential broker for AI-agent runtimes",
    after_help = "Examples:\n  tessera serve --dev                      a broker on 127.0.0.1:8700 with embedded SQLite\n  \
                  tessera status                           is the broker up, ready, and is my token accepted?\n  \
                  tessera runtimes create demo --users '*' register an agent runtime\n  \
                  tessera exec --db select=pg-main:analytics.public.orders -- python report.py\n\n\
                  Exit status: 0 done; 1 a problem on this side (arguments, files, the broker unreachable);\n\
                  2 the broker refused (its code and request id are printed). See docs/cli.md."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the broker.
    #[command(
        after_help = "Examples:\n  tessera serve --dev\n  tessera serve --config /etc/tessera/tessera.toml\n  \
        TESSERA_LOG_FORMAT=json tessera serve --config tessera.toml --listen 0.0.0.0:8700\n\n\
        Exit status 2: the configuration, key, token or policy cannot be used (every problem is listed)."
    )]
    Serve(serve::ServeArgs),
    /// Create the key-encryption key and the admin token a production broker needs
    /// (each in its own file, mode 0600; never overwritten).
    #[command(
        after_help = "Examples:\n  tessera init --dir /etc/tessera/secrets\n  \
        tessera init --dir ./secrets --json"
    )]
    Init(init::InitArgs),
    /// Save an admin token (read from standard input) for the admin commands,
    /// after the broker accepted it.
    #[command(
        after_help = "Examples:\n  tessera login                       (paste the token; it is not echoed)\n  \
        tessera login --addr https://tessera.internal:8700 < admin.token"
    )]
    Login(login::LoginArgs),
    /// Whether the broker answers, is ready, and accepts the admin token.
    #[command(
        after_help = "Examples:\n  tessera status\n  tessera status --addr tessera.internal:8700 --json"
    )]
    Status(status::StatusArgs),
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  tessera completions bash > /etc/bash_completion.d/tessera\n  \
        tessera completions zsh > \"${fpath[1]}/_tessera\"\n  tessera completions fish > ~/.config/fish/completions/tessera.fish"
    )]
    Completions(completions::CompletionsArgs),
    /// Manage runtimes (agent orchestrators).
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  tessera runtimes create demo --users '*' --task-kinds summarize\n  tessera runtimes list\n  tessera runtimes disable demo"
    )]
    Runtimes(runtimes::RuntimesCommand),
    /// List, inspect and end runs.
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  tessera runs list --user alice\n  tessera runs show RUN_ID\n  tessera runs end RUN_ID"
    )]
    Runs(runs::RunsCommand),
    /// Revoke capabilities.
    #[command(subcommand)]
    #[command(after_help = "Examples:\n  tessera capabilities revoke CAPABILITY_ID")]
    Capabilities(capabilities::CapabilitiesCommand),
    /// Downstream removals (database users, …) still pending.
    #[command(subcommand)]
    #[command(after_help = "Examples:\n  tessera leases list --stuck")]
    Leases(leases::LeasesCommand),
    /// Manage signing keys.
    #[command(subcommand)]
    #[command(after_help = "Examples:\n  tessera keys list\n  tessera keys rotate")]
    Keys(keys::KeysCommand),
    /// Mint, list and revoke approver keys (the people who approve).
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  tessera approvers create dana-laptop --user dana\n  tessera approvers list\n  tessera approvers revoke APPROVER_ID"
    )]
    Approvers(approvers::ApproversCommand),
    /// List, show, approve and deny approvals.
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  tessera approvals list\n  tessera approvals show APPROVAL_ID\n  TESSERA_APPROVER_KEY_FILE=dana.key tessera approvals approve APPROVAL_ID --comment ok\n  tessera approvals deny APPROVAL_ID --comment 'not now'"
    )]
    Approvals(approvals::ApprovalsCommand),
    /// Run a command with an emptied environment plus only the credentials asked
    /// for; revoke them when it exits.
    #[command(
        after_help = "Examples:\n  tessera exec --db select=pg-main:analytics.public.orders -- python report.py\n  tessera exec --aws s3:GetObject=aws-main:arn:aws:s3:::reports/q1.csv -- aws s3 cp s3://reports/q1.csv .\n  tessera exec --db orders@select=pg-main:shop.public.orders --db audit@insert=pg-main:shop.public.audit -- ./job\n  tessera exec --env-file .env --keep-env TERM -- ./tool\n\nExit status: the command's own; 125 Tessera failed before the command ran; 126/127 the command cannot be run / was not found; 124 a credential could not be revoked; 123 the holds lapsed and the command was stopped."
    )]
    Exec(exec::ExecArgs),
    /// Print AWS credential_process JSON for one action on one resource.
    #[command(
        after_help = "Examples:\n  credential_process = tessera credential-process --action s3:GetObject --resource aws-main:arn:aws:s3:::reports/*   (in ~/.aws/config)"
    )]
    CredentialProcess(credential_process::CredentialProcessArgs),
    /// Print a capability token (for tools that speak Tessera).
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  tessera token capability --action read --resource svc-reports:reports/2026/q1.csv"
    )]
    Token(token::TokenCommand),
    /// Read, export and verify the tamper-evident audit log.
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  tessera audit tail --run RUN_ID\n  tessera audit export --since 24h > audit.jsonl\n  tessera audit verify"
    )]
    Audit(audit::AuditCommand),
    /// Check, test and explain a policy directory.
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  tessera policy check policy\n  tessera policy test policy --junit report.xml\n  tessera policy explain --user alice --action read --resource svc-reports:reports/q1.csv"
    )]
    Policy(policy::PolicyCommand),
    /// Inspect configured backends.
    #[command(subcommand)]
    #[command(after_help = "Examples:\n  tessera backends check pg-main --config tessera.toml")]
    Backends(backends::BackendsCommand),
}

/// Runs the command to its exit status: each family's `run`, a remote
/// command's future on a single-threaded runtime (`exit`).
pub fn run(cli: Cli) -> ExitCode {
    crate::server::install_crypto_provider();
    quiet_broken_pipe();
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Init(args) => init::run(args),
        Command::Login(args) => block_on_remote(login::run(args)),
        Command::Status(args) => block_on_remote(status::run(args)),
        Command::Completions(args) => completions::run(args, Cli::command()),
        Command::Runtimes(cmd) => block_on_remote(runtimes::run(cmd)),
        Command::Runs(cmd) => block_on_remote(runs::run(cmd)),
        Command::Capabilities(cmd) => block_on_remote(capabilities::run(cmd)),
        Command::Leases(cmd) => block_on_remote(leases::run(cmd)),
        Command::Keys(cmd) => block_on_remote(keys::run(cmd)),
        Command::Approvers(cmd) => block_on_remote(approvers::run(cmd)),
        Command::Approvals(cmd) => block_on_remote(approvals::run(cmd)),
        Command::Exec(args) => exec::run(args),
        Command::CredentialProcess(args) => credential_process::run(args),
        Command::Token(cmd) => token::run(cmd),
        Command::Audit(cmd) => block_on_remote(audit::run(cmd)),
        Command::Policy(cmd) => policy::run(cmd),
        Command::Backends(cmd) => block_on(backends::run(cmd)),
    }
}
