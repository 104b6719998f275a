//! `tessera serve`: the configuration (fail fast, naming the setting), logging,
//! and the process's signals; the boot sequence itself is [`crate::boot`].

use crate::config::{self, Config, Overrides};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

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

pub fn run(args: ServeArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tessera: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(serve(args));
    // Connections dropped at the drain deadline and tasks that outlive the
    // jobs are abandoned, not awaited: the shutdown deadline has been spent.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if crate::boot::JSON_LOGS.load(std::sync::atomic::Ordering::Relaxed) {
                // JSON from the first line to the last: a collector parses the
                // reason a start failed like any other event.
                tracing::error!(error = %format!("{e:#}"), "tessera cannot start");
            } else {
                eprintln!("tessera: {e:#}");
            }
            ExitCode::from(2)
        }
    }
}

/// Starts logging as `TESSERA_LOG` (an `EnvFilter`, default `info,sqlx=warn`)
/// and `TESSERA_LOG_FORMAT` (`text`, the default, or `json`, in any case) say.
/// A value that cannot be used is an error: a broker whose operator asked for
/// JSON logs and got text, or for debug and got info, has lost what they
/// needed to see.
fn init_logging() -> anyhow::Result<()> {
    let filter = match config::process_env("TESSERA_LOG") {
        Some(directives) => tracing_subscriber::EnvFilter::try_new(&directives).map_err(|e| {
            anyhow::anyhow!("config error: TESSERA_LOG: {directives:?} is not a log filter ({e})")
        })?,
        None => tracing_subscriber::EnvFilter::new("info,sqlx=warn"),
    };
    let json = match config::process_env("TESSERA_LOG_FORMAT")
        .map(|f| f.to_ascii_lowercase())
        .as_deref()
    {
        None | Some("text") => false,
        Some("json") => true,
        Some(other) => anyhow::bail!(
            "config error: TESSERA_LOG_FORMAT: {other:?} is not a log format (text or json)"
        ),
    };
    // Colour only on a terminal: log files and collectors get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    if json {
        crate::boot::JSON_LOGS.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = builder.json().try_init();
    } else {
        let _ = builder.try_init();
    }
    Ok(())
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let overrides = Overrides {
        dev: args.dev,
        listen: args.listen,
        data_dir: args.data_dir,
        policy_dir: args.policy_dir,
    };
    // Logging first: its settings are checked before anything is read or written.
    init_logging()?;
    let config = Config::load(args.config.as_deref(), &overrides, &config::process_env)?;
    crate::boot::serve(config, shutdown_signal()).await
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down");
}
