//! Reading and checking case files.
//!
//! Why: a test suite that silently skips a misspelled key or a request the broker would
//! refuse tests nothing. Every key is known, every value parsed, every request checked
//! as the broker checks it, and every problem is reported with file, line and case.
//!
//! Backends: a resource's backend kind comes from the configuration when `--config` is
//! given (a file's `[backends]` table must then agree with it), otherwise from the
//! file's `[backends]` table (backend name → kind).

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use serde::Deserialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::{Case, CaseError, CaseFile, Expectation};
use crate::config::BackendConfig;
use crate::grammar::{parse_duration, quote, Rate};
use crate::policy::simulate::{
    unconfigured_backend, RequestSpec, DEFAULT_RUNTIME, DEFAULT_TASK_ID,
};
use crate::policy::{DenyRule, PolicyEngine};
use crate::resource::is_backend_name;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    backends: BTreeMap<String, String>,
    #[serde(default)]
    case: Vec<toml::Spanned<RawCase>>,
}

/// Only to name the case a syntax or type error is in: any keys, spans kept.
#[derive(Deserialize)]
struct LooseFile {
    #[serde(default)]
    case: Vec<toml::Spanned<toml::Table>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    name: String,
    user: String,
    action: String,
    resource: String,
    task_kind: String,
    task_id: Option<String>,
    #[serde(default)]
    task_attributes: BTreeMap<String, String>,
    #[serde(default)]
    labels: Vec<String>,
    runtime: Option<String>,
    requested_ttl: Option<String>,
    now: Option<toml::value::Datetime>,
    /// The request's arguments, as a TOML table (`arguments = { service = "web" }`).
    arguments: Option<toml::Table>,
    expect: Decision,
    policies: Option<Vec<String>>,
    ttl: Option<String>,
    uses: Option<u32>,
    rate: Option<String>,
    approval: Option<bool>,
    reason: Option<String>,
}

#[derive(Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Decision {
    Allow,
    Deny,
}

/// Reads every `DIR/tests/*.toml`, in name order.
pub fn load_dir(
    dir: &Path,
    engine: &PolicyEngine,
    config_backends: Option<&BTreeMap<String, BackendConfig>>,
    now_unix: i64,
) -> Result<Vec<CaseFile>, Vec<CaseError>> {
    let tests = dir.join("tests");
    let shown = tests.display().to_string();
    let fail = |message: String| {
        vec![CaseError {
            file: shown.clone(),
            line: 0,
            case: None,
            message,
        }]
    };
    let listing = std::fs::read_dir(&tests).map_err(|e| fail(format!("cannot list: {e}")))?;
    let mut paths = Vec::new();
    for entry in listing {
        let path = entry.map_err(|e| fail(format!("cannot list: {e}")))?.path();
        if path.extension().is_some_and(|x| x == "toml") && path.is_file() {
            paths.push(path);
        }
    }
    if paths.is_empty() {
        return Err(fail("no case files (*.toml) here".into()));
    }
    paths.sort();
    let (mut files, mut errors) = (Vec::new(), Vec::new());
    for path in paths {
        let name = path.display().to_string();
        match std::fs::read_to_string(&path) {
            Err(e) => errors.push(CaseError {
                file: name,
                line: 0,
                case: None,
                message: format!("cannot read: {e}"),
            }),
            Ok(text) => match parse_file(&name, &text, engine, config_backends, now_unix) {
                Ok(f) => files.push(f),
                Err(e) => errors.extend(e),
            },
        }
    }
    if errors.is_empty() {
        Ok(files)
    } else {
        Err(errors)
    }
}

/// Parses and checks one case file named `name`. `now_unix` is the time of a case
/// that does not say `now`.
pub fn parse_file(
    name: &str,
    text: &str,
    engine: &PolicyEngine,
    config_backends: Option<&BTreeMap<String, BackendConfig>>,
    now_unix: i64,
) -> Result<CaseFile, Vec<CaseError>> {
    let err = |line: usize, case: Option<&str>, message: String| CaseError {
        file: name.to_string(),
        line,
        case: case.map(str::to_string),
        message,
    };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let offset = e.span().map(|s| s.start);
        let line = offset.map_or(0, |o| line_of(text, o));
        let case = offset.and_then(|o| case_name_at(text, o));
        vec![err(line, case.as_deref(), e.message().to_string())]
    })?;
    let backends =
        file_backends(&raw.backends, config_backends).map_err(|m| vec![err(0, None, m)])?;
    if raw.case.is_empty() {
        return Err(vec![err(0, None, "no [[case]] in this file".into())]);
    }
    let (mut cases, mut errors) = (Vec::new(), Vec::new());
    let mut names = HashSet::new();
    for spanned in raw.case {
        let line = line_of(text, spanned.span().start);
        let raw = spanned.into_inner();
        let label = raw.name.clone();
        match check_case(raw, line, engine, &backends, now_unix) {
            Ok(c) if !names.insert(c.name.clone()) => {
                errors.push(err(
                    line,
                    Some(&label),
                    "duplicate case name in this file".into(),
                ));
            }
            Ok(c) => cases.push(c),
            Err(m) => errors.push(err(line, Some(&label), m)),
        }
    }
    if errors.is_empty() {
        Ok(CaseFile {
            path: name.to_string(),
            cases,
        })
    } else {
        Err(errors)
    }
}

/// The backend map the cases of one file are checked against.
fn file_backends(
    declared: &BTreeMap<String, String>,
    config: Option<&BTreeMap<String, BackendConfig>>,
) -> Result<BTreeMap<String, BackendConfig>, String> {
    if let Some(config) = config {
        for (name, kind) in declared {
            match config.get(name) {
                Some(b) if b.kind() == kind => {}
                Some(b) => {
                    return Err(format!(
                        "[backends] says {name} is of kind {}, the configuration says {}",
                        quote(kind),
                        quote(b.kind())
                    ))
                }
                None => {
                    return Err(format!(
                        "[backends] names {name}, which the configuration does not have"
                    ))
                }
            }
        }
        return Ok(config.clone());
    }
    let mut out = BTreeMap::new();
    for (name, kind) in declared {
        if !is_backend_name(name) {
            return Err(format!(
                "[backends]: invalid backend name {} (1-63 of [a-z0-9-], starting with a letter)",
                quote(name)
            ));
        }
        let backend = unconfigured_backend(kind).ok_or_else(|| {
            format!(
                "[backends] {name}: kind {} is not available in this build (supported: token, aws-sts, postgres, mysql)",
                quote(kind)
            )
        })?;
        out.insert(name.clone(), backend);
    }
    Ok(out)
}

fn check_case(
    raw: RawCase,
    line: usize,
    engine: &PolicyEngine,
    backends: &BTreeMap<String, BackendConfig>,
    now_unix: i64,
) -> Result<Case, String> {
    if let Some((backend, _)) = raw.resource.split_once(':') {
        if is_backend_name(backend) && !backends.contains_key(backend) {
            return Err(format!(
                "resource {}: backend {backend} is unknown (unknown_backend): declare it in \
                 this file's [backends] table (e.g. {backend} = \"token\") or pass --config",
                quote(&raw.resource)
            ));
        }
    }
    let requested_ttl = raw
        .requested_ttl
        .as_deref()
        .map(|t| parse_duration(t).map_err(|e| format!("requested_ttl: {e}")))
        .transpose()?;
    let now_unix = match raw.now {
        None => now_unix,
        Some(t) => OffsetDateTime::parse(&t.to_string(), &Rfc3339)
            .map_err(|_| {
                format!("now: {t} is not a date and time with an offset, e.g. 2026-01-05T09:00:00Z")
            })?
            .unix_timestamp(),
    };
    let expect = expectation(&raw)?;
    let spec = RequestSpec {
        user: raw.user,
        action: raw.action,
        resource: raw.resource,
        task_kind: raw.task_kind,
        task_id: raw.task_id.unwrap_or_else(|| DEFAULT_TASK_ID.into()),
        task_attributes: raw.task_attributes,
        labels: raw.labels,
        runtime: raw.runtime.unwrap_or_else(|| DEFAULT_RUNTIME.into()),
        requested_ttl,
        now_unix,
        arguments: raw
            .arguments
            .map(|t| serde_json::to_value(t).map_err(|e| format!("arguments: {e}")))
            .transpose()?,
    };
    Ok(Case {
        name: raw.name,
        line,
        request: engine.simulate(spec, backends)?,
        expect,
    })
}

fn expectation(raw: &RawCase) -> Result<Expectation, String> {
    let allow = raw.expect == Decision::Allow;
    let constrained = raw.ttl.is_some() || raw.uses.is_some() || raw.rate.is_some();
    if !allow && (constrained || raw.approval.is_some()) {
        return Err(
            "ttl, uses, rate and approval describe an allowed capability; a case that \
             expects \"deny\" cannot check them"
                .into(),
        );
    }
    if let Some(reason) = &raw.reason {
        if allow {
            return Err(
                "reason names the rule that refused; a case that expects \"allow\" has none".into(),
            );
        }
        if !DenyRule::ALL.iter().any(|r| r.reason() == reason) {
            let known: Vec<&str> = DenyRule::ALL.iter().map(|r| r.reason()).collect();
            return Err(format!(
                "reason {}: not a rule (one of {})",
                quote(reason),
                known.join(", ")
            ));
        }
    }
    let mut policies = raw.policies.clone();
    if let Some(ids) = &mut policies {
        ids.sort();
        ids.dedup();
    }
    Ok(Expectation {
        allow,
        policies,
        ttl: raw
            .ttl
            .as_deref()
            .map(|t| parse_duration(t).map_err(|e| format!("ttl: {e}")))
            .transpose()?,
        uses: raw.uses,
        rate: raw
            .rate
            .as_deref()
            .map(|r| r.parse::<Rate>().map_err(|e| format!("rate: {e}")))
            .transpose()?,
        approval: raw.approval,
        reason: raw.reason.clone(),
    })
}

/// The name (or `#N`) of the last `[[case]]` starting at or before byte `offset`.
fn case_name_at(text: &str, offset: usize) -> Option<String> {
    let loose: LooseFile = toml::from_str(text).ok()?;
    let (i, case) = loose
        .case
        .iter()
        .enumerate()
        .rfind(|(_, c)| c.span().start <= offset)?;
    Some(match case.get_ref().get("name").and_then(|n| n.as_str()) {
        Some(n) => n.to_string(),
        None => format!("#{}", i + 1),
    })
}

/// 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(0, |t| t.matches('\n').count() + 1)
}
