//! `tessera policy test`: policy test cases, in `DIR/tests/*.toml`, run against the
//! real evaluation.
//!
//! Why: a policy change should be reviewed like a code change, with the cases it must
//! keep allowing and denying written down and checked before rollout (an IAM policy
//! simulator, kept in version control next to the policies).
//!
//! A case file:
//!
//! ```toml
//! [backends]                  # backend name -> kind (when no --config is given)
//! svc-reports = "token"
//!
//! [[case]]
//! name = "analysts read reports, briefly"
//! user = "alice"
//! action = "read"
//! resource = "svc-reports:reports/2026/q1.csv"
//! task_kind = "summarize"
//! expect = "allow"            # or "deny"
//! policies = ["analysts-read-reports"]   # the deciding policies, exactly
//! ttl = "15m"                 # effective constraints (after defaults and caps)
//! uses = 20
//! rate = "60/min"
//! approval = false
//! ```
//!
//! Invariants: unknown keys are errors at every level; every case is checked the way
//! the broker checks a request ([`PolicyEngine::simulate`]), so a case cannot pass
//! against a request that could never reach policy; a malformed file is reported
//! (file, line, case name) and nothing is run; decisions come from
//! [`PolicyEngine::decide`] through [`PolicyEngine::explain`]; an expected policy id
//! that does not exist fails its case (it may have been removed or misspelt).

mod file;
mod report;
mod run;

use std::fmt;
use std::time::Duration;

pub use file::{load_dir, parse_file};
pub use run::{run, CaseOutcome, FileOutcome, Report};

use super::simulate::Simulated;
use crate::grammar::Rate;

/// One checked case, ready to run.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    /// 1-based line of its `[[case]]` header.
    pub line: usize,
    pub request: Simulated,
    pub expect: Expectation,
}

/// What a case expects. `None`: not checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Expectation {
    pub allow: bool,
    /// The deciding policies: satisfied permits (allow) or forbids (deny), sorted.
    pub policies: Option<Vec<String>>,
    pub ttl: Option<Duration>,
    pub uses: Option<u32>,
    pub rate: Option<Rate>,
    pub approval: Option<bool>,
    /// For a deny: the rule that refused (`no_permit`, `forbidden`,
    /// `wildcard_overlaps_forbid`, …).
    pub reason: Option<String>,
}

/// The cases of one file.
#[derive(Debug, Clone)]
pub struct CaseFile {
    pub path: String,
    pub cases: Vec<Case>,
}

/// A case file that cannot be run: where, which case, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseError {
    pub file: String,
    /// 1-based; 0 when unknown.
    pub line: usize,
    pub case: Option<String>,
    pub message: String,
}

impl fmt::Display for CaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: error: ", self.file, self.line)?;
        if let Some(case) = &self.case {
            write!(f, "case \"{case}\": ")?;
        }
        f.write_str(&self.message)
    }
}

#[cfg(test)]
mod tests;
