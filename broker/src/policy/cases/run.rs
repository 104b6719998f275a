//! Running checked cases and reporting them as a pass/fail table.
//!
//! Why: a failing case must say exactly what differs (the decision, a policy id, a
//! constraint and which bound set it) so the administrator can tell a wrong policy
//! from a wrong expectation without re-running anything.
//!
//! Invariants: each case is decided by [`PolicyEngine::explain`] (hence by
//! `decide`); constraints are compared only when both sides allow (a deny has none);
//! rates compare by pace, so `"60/min"` equals `"1/s"`.

use std::fmt::Write;

use super::{Case, CaseFile};
use crate::config::Limits;
use crate::grammar::format_duration;
use crate::policy::effective::{Bounded, Source};
use crate::policy::explain::Explanation;
use crate::policy::PolicyEngine;

/// The result of one case.
#[derive(Debug, Clone)]
pub struct CaseOutcome {
    pub name: String,
    pub expected: &'static str,
    pub got: &'static str,
    /// Empty: PASS.
    pub differences: Vec<String>,
}

/// The results of one file.
#[derive(Debug, Clone)]
pub struct FileOutcome {
    pub path: String,
    pub cases: Vec<CaseOutcome>,
}

/// The results of a whole run.
#[derive(Debug, Clone)]
pub struct Report {
    pub files: Vec<FileOutcome>,
}

/// Runs every case of `files` under the server caps `limits`.
pub fn run(engine: &PolicyEngine, files: &[CaseFile], limits: &Limits) -> Report {
    let files = files
        .iter()
        .map(|f| FileOutcome {
            path: f.path.clone(),
            cases: f
                .cases
                .iter()
                .map(|c| run_case(engine, c, limits))
                .collect(),
        })
        .collect();
    Report { files }
}

fn run_case(engine: &PolicyEngine, case: &Case, limits: &Limits) -> CaseOutcome {
    let got = engine.explain(&case.request, limits);
    let want = &case.expect;
    let mut diffs = Vec::new();
    if want.allow != got.allowed {
        diffs.push(format!(
            "decision: expected {}, got {} ({})",
            decision(want.allow),
            got.decision(),
            because(&got)
        ));
    }
    if let Some(ids) = want.policies.as_ref().filter(|ids| **ids != got.policies) {
        let mut diff = format!(
            "policies: expected [{}], got [{}]",
            ids.join(", "),
            got.policies.join(", ")
        );
        for id in ids.iter().filter(|id| !engine.has_policy(id)) {
            diff += &format!(" (no policy has the id {id})");
        }
        diffs.push(diff);
    }
    let got_reason = got.rule.map(|r| r.reason());
    if let Some(reason) = want.reason.as_deref().filter(|r| Some(*r) != got_reason) {
        diffs.push(format!(
            "reason: expected {reason}, got {}",
            got_reason.unwrap_or("an allow")
        ));
    }
    if let (true, Some(e)) = (want.allow, &got.effective) {
        if let Some(ttl) = want.ttl.filter(|t| *t != e.ttl.value) {
            diffs.push(format!(
                "ttl: expected {}, got {} ({})",
                format_duration(ttl),
                format_duration(e.ttl.value),
                set_by(&e.ttl, "ttl")
            ));
        }
        if let Some(uses) = want.uses.filter(|u| *u != e.uses.value) {
            diffs.push(format!(
                "uses: expected {uses}, got {} ({})",
                e.uses.value,
                set_by(&e.uses, "uses")
            ));
        }
        let same_pace = |r: &crate::grammar::Rate| {
            !r.is_stricter_than(&e.rate.value) && !e.rate.value.is_stricter_than(r)
        };
        if let Some(rate) = want.rate.filter(|r| !same_pace(r)) {
            diffs.push(format!(
                "rate: expected {rate}, got {} ({})",
                e.rate.value,
                set_by(&e.rate, "rate")
            ));
        }
        if want.approval.is_some_and(|a| a != e.approval.is_some()) {
            diffs.push(match &e.approval {
                Some(p) => format!("approval: expected not required, got required by {p}"),
                None => "approval: expected required, got not required".into(),
            });
        }
    }
    CaseOutcome {
        name: case.name.clone(),
        expected: decision(want.allow),
        got: got.decision(),
        differences: diffs,
    }
}

fn decision(allow: bool) -> &'static str {
    if allow {
        "allow"
    } else {
        "deny"
    }
}

fn because(got: &Explanation) -> String {
    match (got.allowed, got.policies.is_empty()) {
        (true, _) => format!("permitted by {}", got.policies.join(", ")),
        (false, true) => "no permit matched".into(),
        (false, false) => format!("forbidden by {}", got.policies.join(", ")),
    }
}

fn set_by<T>(b: &Bounded<T>, key: &str) -> String {
    match &b.source {
        Source::Policy(id) => format!("@{key} of {id}"),
        Source::ServerDefault => "server default".into(),
        Source::ServerCap => "server cap".into(),
        Source::Requested => "requested ttl".into(),
    }
}

impl Report {
    pub fn total(&self) -> usize {
        self.files.iter().map(|f| f.cases.len()).sum()
    }

    pub fn failed(&self) -> usize {
        self.files
            .iter()
            .flat_map(|f| &f.cases)
            .filter(|c| !c.differences.is_empty())
            .count()
    }

    /// One table per file (CASE, EXPECTED, GOT, RESULT) and a summary line.
    pub fn render(&self) -> String {
        let width = self
            .files
            .iter()
            .flat_map(|f| &f.cases)
            .map(|c| c.name.chars().count())
            .chain(["CASE".len()])
            .max()
            .unwrap_or(4);
        let mut out = String::new();
        for f in &self.files {
            let _ = writeln!(out, "{}", f.path);
            let _ = writeln!(out, "  {:<width$}  EXPECTED  GOT    RESULT", "CASE");
            for c in &f.cases {
                let result = if c.differences.is_empty() {
                    "PASS".to_string()
                } else {
                    format!("FAIL: {}", c.differences.join("; "))
                };
                let _ = writeln!(
                    out,
                    "  {:<width$}  {:<8}  {:<5}  {result}",
                    c.name, c.expected, c.got
                );
            }
            out.push('\n');
        }
        let (total, failed) = (self.total(), self.failed());
        let noun = if total == 1 { "case" } else { "cases" };
        let _ = writeln!(
            out,
            "{total} {noun}: {} passed, {failed} failed",
            total - failed
        );
        out
    }
}
