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

mod approvals;
mod audit;
mod audit_segments;
mod backends;
mod capabilities;
mod child;
mod egress;
mod environment;
mod exit;
mod grants;
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
mod table;
mod trust;

use clap::{Args, Parser, Subcommand};
pub use exit::usage_error;
use exit::{block_on, block_on_remote, quiet_broken_pipe};
use remote::Remote;
use std::path::PathBuf;
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
    Serve(ServeArgs),
    /// Create the key-encryption key and the admin token a production broker needs
    /// (each in its own file, mode 0600; never overwritten).
    #[command(
        after_help = "Examples:\n  tessera init --dir /etc/tessera/secrets\n  \
        tessera init --dir ./secrets --json"
    )]
    Init {
        /// Folder to create them in (made with mode 0700 if missing).
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// Print the two paths as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Save an admin token (read from standard input) for the admin commands,
    /// after the broker accepted it.
    #[command(
        after_help = "Examples:\n  tessera login                       (paste the token; it is not echoed)\n  \
        tessera login --addr https://tessera.internal:8700 < admin.token"
    )]
    Login {
        #[command(flatten)]
        remote: Remote,
    },
    /// Whether the broker answers, is ready, and accepts the admin token.
    #[command(
        after_help = "Examples:\n  tessera status\n  tessera status --addr tessera.internal:8700 --json"
    )]
    Status {
        #[command(flatten)]
        remote: Remote,
    },
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  tessera completions bash > /etc/bash_completion.d/tessera\n  \
        tessera completions zsh > \"${fpath[1]}/_tessera\"\n  tessera completions fish > ~/.config/fish/completions/tessera.fish"
    )]
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
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
    Approvers(approvals::ApproversCommand),
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
    Exec(sandbox::ExecArgs),
    /// Print AWS credential_process JSON for one action on one resource.
    #[command(
        after_help = "Examples:\n  credential_process = tessera credential-process --action s3:GetObject --resource aws-main:arn:aws:s3:::reports/*   (in ~/.aws/config)"
    )]
    CredentialProcess(sandbox::CredentialProcessArgs),
    /// Print a capability token (for tools that speak Tessera).
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  tessera token capability --action read --resource svc-reports:reports/2026/q1.csv"
    )]
    Token(sandbox::TokenCommand),
    /// Read, export and verify the tamper-evident audit log.
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  tessera audit tail --run RUN_ID\n  tessera audit export --since 24h > audit.jsonl\n  tessera audit verify"
    )]
    Audit(AuditCommand),
    /// Check, test and explain a policy directory.
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  tessera policy check policy\n  tessera policy test policy --junit report.xml\n  tessera policy explain --user alice --action read --resource svc-reports:reports/q1.csv"
    )]
    Policy(policy::PolicyCommand),
    /// Inspect configured backends.
    #[command(subcommand)]
    #[command(after_help = "Examples:\n  tessera backends check pg-main --config tessera.toml")]
    Backends(BackendsCommand),
}

#[derive(Debug, Subcommand)]
pub enum BackendsCommand {
    #[command(
        after_help = "Examples:\n  tessera backends check pg-main\n  tessera backends check shop --config /etc/tessera/tessera.toml --json"
    )]
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

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    #[command(
        after_help = "Examples:\n  tessera audit verify\n  tessera audit verify --checkpoints /var/lib/witness/checkpoints.jsonl --max-tail 2000\n  tessera audit verify --segments audit-0001.jsonl --segments audit-0002.jsonl --checkpoints witness.jsonl"
    )]
    /// Walk the chain and report the first edited, deleted or reordered row;
    /// with --checkpoints, also prove every checkpointed row is still there
    /// unchanged and name the rows after the last checkpoint as unverified;
    /// with --segments, prove the rows retention pruned from their export.
    Verify {
        /// A checkpoint file kept by a witness (one JSON checkpoint per line,
        /// as `audit.checkpoint_file` writes it).
        #[arg(long)]
        checkpoints: Option<std::path::PathBuf>,
        /// An export written by `audit export --through-checkpoint` (repeat
        /// for several): the rows retention pruned are verified from it.
        #[arg(long)]
        segments: Vec<std::path::PathBuf>,
        /// With --checkpoints: fail when more rows than this follow the last
        /// checkpoint (e.g. twice `audit.checkpoint_rows`): a long unverified
        /// tail means checkpoints stopped, or the witness lost some.
        #[arg(long, requires = "checkpoints")]
        max_tail: Option<i64>,
        #[command(flatten)]
        remote: Remote,
    },
    #[command(
        after_help = "Examples:\n  tessera audit tail -n 50\n  tessera audit tail --run RUN_ID --follow\n  tessera audit tail --event 'capability.*' --user alice"
    )]
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
    #[command(
        after_help = "Examples:\n  tessera audit export --since 24h > audit.jsonl\n  tessera audit export --since 2026-11-01T00:00:00Z --until 2026-12-01T00:00:00Z | head\n  tessera audit export --through-checkpoint --output /archive/audit-$(date +%F).jsonl"
    )]
    /// Export rows as JSON lines (one object per row, oldest first) for a SIEM;
    /// with --through-checkpoint, every row the store holds up to its newest
    /// checkpoint, for retention (docs/operations.md).
    Export {
        /// From this time: RFC 3339 (2026-11-29T00:00:00Z) or an age (24h, 7d).
        #[arg(
            long,
            required_unless_present = "through_checkpoint",
            conflicts_with = "through_checkpoint"
        )]
        since: Option<String>,
        /// Until this time (exclusive), same forms as --since.
        #[arg(long, conflicts_with = "through_checkpoint")]
        until: Option<String>,
        /// Only rows about this run.
        #[arg(long, conflicts_with = "through_checkpoint")]
        run: Option<String>,
        /// Every row from the first the store keeps through the newest signed
        /// checkpoint, then that checkpoint's line; written to --output, synced,
        /// then recorded with the broker, which may then prune those rows.
        #[arg(long, requires = "output")]
        through_checkpoint: bool,
        /// The file to write (created, mode 0600; never overwritten).
        #[arg(long, requires = "through_checkpoint")]
        output: Option<std::path::PathBuf>,
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
        Command::Init { dir, json } => match login::init(&dir, json) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tessera: {e:#}");
                ExitCode::FAILURE
            }
        },
        Command::Login { remote } => block_on_remote(login::login(remote)),
        Command::Status { remote } => block_on_remote(login::status(remote)),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "tessera", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Exec(args) => sandbox::exec(args),
        Command::CredentialProcess(args) => sandbox::credential_process(args),
        Command::Token(cmd) => sandbox::token(cmd),
        Command::Policy(command) => policy::run(command),
        Command::Audit(cmd) => block_on_remote(audit::run(cmd)),
        Command::Approvers(cmd) => block_on_remote(approvals::approvers(cmd)),
        Command::Approvals(cmd) => block_on_remote(approvals::approvals(cmd)),
        Command::Backends(BackendsCommand::Check { name, config, json }) => {
            backends_check(&name, &config, json)
        }
        Command::Runtimes(cmd) => block_on_remote(runtimes::run(cmd)),
        Command::Runs(cmd) => block_on_remote(runs::run(cmd)),
        Command::Capabilities(cmd) => block_on_remote(capabilities::run(cmd)),
        Command::Leases(cmd) => block_on_remote(leases::run(cmd)),
        Command::Keys(cmd) => block_on_remote(keys::run(cmd)),
    }
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
