//! `tessera policy check | test | explain`: an administrator's tools for a policy
//! directory, run offline before a policy is rolled out (docs/policy.md).
//!
//! Why here: this module only parses arguments, reads files and prints; the checks,
//! the case runner and the explanation are library code in [`crate::policy`].
//!
//! Exit status: 0 when all is well; 1 when the policy fails what was asked (load
//! errors, or warnings with `--deny-warnings`; a failing case); 2 when the command
//! could not run (unreadable configuration, malformed case file, invalid request,
//! a policy directory that does not load for `test` or `explain`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::config::{BackendConfig, Config, PolicySettings};
use crate::grammar::parse_duration;
use crate::policy::simulate::{
    unconfigured_backend, RequestSpec, DEFAULT_RUNTIME, DEFAULT_TASK_ID,
};
use crate::policy::{cases, PolicyEngine, Severity};

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    #[command(
        after_help = "Examples:\n  tessera policy check policy\n  tessera policy check /etc/tessera/policy --config /etc/tessera/tessera.toml --deny-warnings\n  tessera policy check policy --json"
    )]
    /// Parse and validate a policy directory against its schema; warn about permits
    /// without @ttl and annotations above the server caps.
    Check {
        /// The policy directory (schema.cedarschema, *.cedar, entities.json).
        #[arg(default_value = "policy")]
        dir: PathBuf,
        /// tessera.toml whose [limits] bound the annotations (default: built-in limits).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Exit 1 on warnings too.
        #[arg(long)]
        deny_warnings: bool,
        /// Print {dir, valid, policies, errors, warnings} as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    #[command(
        after_help = "Examples:\n  tessera policy test policy\n  tessera policy test policy --junit policy-tests.xml\n  tessera policy test policy --json"
    )]
    /// Run the test cases in DIR/tests/*.toml against the policy directory.
    Test {
        /// The policy directory (schema.cedarschema, *.cedar, entities.json).
        #[arg(default_value = "policy")]
        dir: PathBuf,
        /// tessera.toml giving the backends and the server caps (default: each case
        /// file's [backends] table and the built-in limits).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print the results as JSON on stdout instead of tables.
        #[arg(long)]
        json: bool,
        /// Also write the results as JUnit XML to FILE (for CI test reports).
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
    },
    #[command(
        after_help = "Examples:\n  tessera policy explain --user alice --action read --resource svc-reports:reports/2026/q1.csv\n  tessera policy explain --user bob --action select --resource pg-main:analytics.public.orders --config tessera.toml --json"
    )]
    /// Explain the decision for one capability request: the deciding policies and
    /// the effective constraints, with what set each.
    Explain(Box<ExplainArgs>),
    #[command(after_help = "Examples:\n  tessera policy reload")]
    /// Ask a running broker to load its policy directory again (an invalid set is
    /// rejected with its errors and the old one stays in force).
    Reload {
        #[command(flatten)]
        remote: super::remote::Remote,
    },
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The user the run acts for.
    #[arg(long)]
    pub user: String,
    /// The action, as declared in the schema.
    #[arg(long)]
    pub action: String,
    /// BACKEND:PATH
    #[arg(long)]
    pub resource: String,
    /// The run's task kind.
    #[arg(long, default_value = "unspecified")]
    pub task_kind: String,
    /// The run's task id.
    #[arg(long, default_value = DEFAULT_TASK_ID)]
    pub task_id: String,
    /// A task attribute (repeatable).
    #[arg(long = "task-attr", value_name = "KEY=VALUE")]
    pub task_attrs: Vec<String>,
    /// A run label (repeatable).
    #[arg(long = "label", value_name = "LABEL")]
    pub labels: Vec<String>,
    /// Name of the runtime that started the run.
    #[arg(long, default_value = DEFAULT_RUNTIME)]
    pub runtime: String,
    /// The ttl the caller asks for, e.g. 10m.
    #[arg(long)]
    pub ttl: Option<String>,
    /// Evaluation time, RFC 3339 (default: now).
    #[arg(long)]
    pub now: Option<String>,
    /// The request's arguments, a JSON object (`context.arguments`).
    #[arg(long, value_name = "JSON")]
    pub arguments: Option<String>,
    /// Policy directory.
    #[arg(long, default_value = "policy")]
    pub dir: PathBuf,
    /// tessera.toml giving the backends and the server caps.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Kind of the resource's backend when no --config is given.
    #[arg(long, default_value = "token")]
    pub backend_kind: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

const UNRUNNABLE: u8 = 2;

pub fn run(command: PolicyCommand) -> ExitCode {
    let result = match command {
        PolicyCommand::Check {
            dir,
            config,
            deny_warnings,
            json,
        } => check(&dir, config.as_deref(), deny_warnings, json),
        PolicyCommand::Test {
            dir,
            config,
            json,
            junit,
        } => test(&dir, config.as_deref(), json, junit.as_deref()),
        PolicyCommand::Explain(args) => explain(*args),
        PolicyCommand::Reload { remote } => return super::exit::block_on_remote(reload(remote)),
    };
    result.unwrap_or_else(|message| {
        eprintln!("{message}");
        ExitCode::from(UNRUNNABLE)
    })
}

/// The caps and backends of `config`, or the built-in limits and no backend.
fn settings(config: Option<&Path>) -> Result<PolicySettings, String> {
    match config {
        Some(path) => Config::load_policy_settings(path).map_err(|e| e.to_string()),
        None => Ok(PolicySettings::default()),
    }
}

fn check(
    dir: &Path,
    config: Option<&Path>,
    deny_warnings: bool,
    json: bool,
) -> Result<ExitCode, String> {
    let settings = settings(config)?;
    let (engine, diagnostics) = match PolicyEngine::load_dir(dir) {
        Ok(engine) => {
            let warnings = engine.lint(&settings.limits);
            (Some(engine), warnings)
        }
        Err(e) => (None, e.diagnostics),
    };
    let warnings = diagnostics
        .iter()
        .filter(|w| w.severity == Severity::Warning)
        .count();
    if json {
        let list = |severity: Severity| -> Vec<serde_json::Value> {
            diagnostics
                .iter()
                .filter(|d| d.severity == severity)
                .map(|d| {
                    serde_json::json!({
                        "file": d.file, "line": d.line, "column": d.column,
                        "message": d.message, "hint": d.hint,
                    })
                })
                .collect()
        };
        println!(
            "{}",
            serde_json::json!({
                "dir": dir.display().to_string(),
                "valid": engine.is_some(),
                "policies": engine.as_ref().map(PolicyEngine::policy_count),
                "errors": list(Severity::Error),
                "warnings": list(Severity::Warning),
            })
        );
    } else {
        for d in &diagnostics {
            eprintln!("{d}");
        }
    }
    let Some(engine) = engine else {
        return Ok(ExitCode::FAILURE);
    };
    if !json {
        println!(
            "{}: {} policies, valid, {warnings} warning{}",
            dir.display(),
            engine.policy_count(),
            if warnings == 1 { "" } else { "s" }
        );
    }
    Ok(if deny_warnings && warnings > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn test(
    dir: &Path,
    config: Option<&Path>,
    json: bool,
    junit: Option<&Path>,
) -> Result<ExitCode, String> {
    let settings = settings(config)?;
    let engine = PolicyEngine::load_dir(dir).map_err(|e| e.to_string())?;
    let backends = config.map(|_| &settings.backends);
    let files = cases::load_dir(dir, &engine, backends, now()).map_err(|errors| {
        let mut shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
        shown.push("no case was run: fix the case files first".into());
        shown.join("\n")
    })?;
    let report = cases::run(&engine, &files, &settings.limits);
    if let Some(path) = junit {
        std::fs::write(path, report.junit())
            .map_err(|e| format!("--junit: cannot write {}: {e}", path.display()))?;
    }
    if json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.render());
    }
    Ok(if report.failed() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn explain(args: ExplainArgs) -> Result<ExitCode, String> {
    let settings = settings(args.config.as_deref())?;
    let engine = PolicyEngine::load_dir(&args.dir).map_err(|e| e.to_string())?;
    let backends = match &args.config {
        Some(_) => settings.backends.clone(),
        None => assumed_backend(&args.resource, &args.backend_kind)?,
    };
    let mut task_attributes = BTreeMap::new();
    for kv in &args.task_attrs {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("--task-attr {kv:?}: expected KEY=VALUE"))?;
        task_attributes.insert(k.to_string(), v.to_string());
    }
    let requested_ttl = args
        .ttl
        .as_deref()
        .map(|t| parse_duration(t).map_err(|e| format!("--ttl: {e}")))
        .transpose()?;
    let now_unix = match &args.now {
        None => now(),
        Some(t) => OffsetDateTime::parse(t, &Rfc3339)
            .map_err(|e| format!("--now {t:?}: {e} (expected e.g. 2026-01-05T09:00:00Z)"))?
            .unix_timestamp(),
    };
    let spec = RequestSpec {
        user: args.user,
        action: args.action,
        resource: args.resource,
        task_kind: args.task_kind,
        task_id: args.task_id,
        task_attributes,
        labels: args.labels,
        runtime: args.runtime,
        requested_ttl,
        now_unix,
        arguments: args
            .arguments
            .as_deref()
            .map(|a| serde_json::from_str(a).map_err(|e| format!("--arguments: {e}")))
            .transpose()?,
    };
    let request = engine
        .simulate(spec, &backends)
        .map_err(|e| format!("the broker would refuse this request before policy: {e}"))?;
    let explanation = engine.explain(&request, &settings.limits);
    if args.json {
        println!("{}", explanation.to_json());
    } else {
        print!("{}", explanation.render());
        if args.config.is_none() {
            println!(
                "(no --config: backend {} taken as kind {}, built-in server limits)",
                request.backend, request.backend_kind
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Without a configuration, the resource's backend is whatever it names, of `kind`.
fn assumed_backend(resource: &str, kind: &str) -> Result<BTreeMap<String, BackendConfig>, String> {
    let backend = unconfigured_backend(kind).ok_or_else(|| {
        format!("--backend-kind {kind:?}: not available in this build (supported: token, aws-sts, postgres, mysql)")
    })?;
    Ok(resource
        .split_once(':')
        .map(|(name, _)| BTreeMap::from([(name.to_string(), backend)]))
        .unwrap_or_default())
}

fn now() -> i64 {
    crate::clock::Clock::new().now()
}

/// `tessera policy reload`: asks the running broker to reload its policy.
async fn reload(remote: super::remote::Remote) -> anyhow::Result<()> {
    let v = super::remote::admin(&remote)?
        .reload_policy()
        .await
        .map_err(super::remote::said)?;
    if remote.json {
        super::remote::print_json(&v);
    } else {
        println!(
            "policy reloaded: version {}, {} policies in force (sha256 {}); {} live capabilities \
                 the new policy no longer grants were revoked",
            v.version, v.policies, v.sha256, v.revoked
        );
    }
    Ok(())
}
