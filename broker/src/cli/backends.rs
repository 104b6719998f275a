//! `tessera backends check NAME`: asks a backend's downstream server which of
//! its defaults let a throw-away credential do more than its grant, and prints
//! each with the statement that closes it. Offline: reads the backend from
//! `tessera.toml` (and the environment it names) and connects as the broker.

use crate::backends::mysql::MysqlBackend;
use crate::backends::postgres::PostgresBackend;
use crate::backends::Backend;
use crate::config::{BackendConfig, Config};
use anyhow::{bail, Context};
use clap::Subcommand;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

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

/// Exit 0 when the server has no unsafe default, 1 when it has, 2 when it
/// could not be checked.
pub async fn run(command: BackendsCommand) -> ExitCode {
    let BackendsCommand::Check { name, config, json } = command;
    match check(&name, &config, json).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("tessera: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn check(name: &str, config: &Path, json: bool) -> anyhow::Result<bool> {
    let settings = Config::load_policy_settings(config)?;
    let Some(backend_config) = settings.backends.get(name) else {
        bail!("backend {name} is not in {}", config.display());
    };
    let backend: Box<dyn Backend> = match backend_config {
        BackendConfig::Postgres(db) => {
            Box::new(PostgresBackend::new(db).with_context(|| format!("backend {name}"))?)
        }
        BackendConfig::Mysql(db) => {
            Box::new(MysqlBackend::new(db).with_context(|| format!("backend {name}"))?)
        }
        other => bail!(
            "backend {name} is of kind {}: only database backends are checked",
            other.kind()
        ),
    };
    let findings = backend
        .unsafe_defaults()
        .await
        .with_context(|| format!("backend {name}: cannot check the server"))?;
    if json {
        println!(
            "{}",
            serde_json::json!({ "backend": name, "findings": findings })
        );
    } else if findings.is_empty() {
        println!(
            "backend {name}: no unsafe default found ({} checks)",
            backend.kind()
        );
    } else {
        println!("backend {name}: {} unsafe default(s)", findings.len());
        for f in &findings {
            println!("\n  {}: {}\n  fix: {}", f.id, f.what, f.fix);
        }
    }
    Ok(findings.is_empty())
}
