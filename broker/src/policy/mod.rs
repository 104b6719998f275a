//! Policy: Cedar policies with Tessera's constraint annotations (DESIGN.md §4).
//!
//! Why: every capability request is decided here. The decision is Cedar's (default
//! deny, `forbid` wins); the constraints (`@ttl`, `@uses`, `@rate`, `@approval`) ride on
//! the permit policies and the strictest across all satisfied permits applies.
//!
//! Invariants:
//! - a [`PolicyEngine`] is an immutable snapshot: built once by [`PolicyEngine::load_dir`]
//!   or [`PolicyEngine::from_sources`], only ever replaced whole (reload keeps the old one
//!   when the new one fails to load), `Send + Sync`, shared in an `Arc`;
//! - a loaded snapshot has been validated against the schema in strict mode, every
//!   annotation has been parsed, and every policy id is unique;
//! - evaluation never panics; anything unexpected becomes a `Deny` with an error.

mod annotations;
mod assemble;
pub mod cases;
mod context;
pub mod effective;
pub mod explain;
mod lint;
mod load;
pub mod simulate;
mod source;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::time::Duration;

use cedar_policy::{Authorizer, Decision, Entity, EntityTypeName, PolicySet, Schema};

use crate::grammar::Rate;
use annotations::PolicyConstraints;

/// The loaded, validated policy set plus what evaluation needs precomputed.
pub struct PolicyEngine {
    schema: Schema,
    policies: PolicySet,
    authorizer: Authorizer,
    /// Constraints of every permit policy, by policy id.
    constraints: HashMap<String, PolicyConstraints>,
    /// Where each policy is written, by policy id (for [`PolicyEngine::lint`]).
    sites: HashMap<String, source::Site>,
    /// Users from entities.json, each with ALL its ancestor groups as direct parents.
    users: HashMap<String, Entity>,
    /// Requestable actions declared in the schema (`Tessera::Action`), by action id.
    actions: HashMap<String, context::Action>,
    user_type: EntityTypeName,
    resource_type: EntityTypeName,
    /// Entity slices of recent requests (exact: see [`context::EntitiesCache`]).
    entities: context::EntitiesCache,
}

/// One capability request, as policy sees it. The resource is `BACKEND:PATH`.
#[derive(Debug, Clone, Copy)]
pub struct PolicyRequest<'a> {
    pub user: &'a str,
    pub action: &'a str,
    pub backend: &'a str,
    pub backend_kind: &'a str,
    pub path: &'a str,
    pub run_id: &'a str,
    pub run_labels: &'a [String],
    pub task_id: &'a str,
    pub task_kind: &'a str,
    pub task_attributes: &'a BTreeMap<String, String>,
    pub runtime: &'a str,
    pub requested_ttl: Option<Duration>,
    pub now_unix: i64,
}

/// Cedar's decision plus, when allowed, the effective constraints.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyDecision {
    /// `policies`: ids of the satisfied permit policies, sorted.
    Allow {
        policies: Vec<String>,
        constraints: Constraints,
    },
    /// `policies`: ids of the determining forbid policies (empty: no permit matched);
    /// `errors`: evaluation errors, for logs.
    Deny {
        policies: Vec<String>,
        errors: Vec<String>,
    },
}

/// Strictest constraints across all satisfied permits; each names the policy that set it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Constraints {
    pub ttl: Option<(Duration, String)>,
    pub uses: Option<(u32, String)>,
    pub rate: Option<(Rate, String)>,
    /// Id of a satisfied permit with `@approval("required")`.
    pub approval: Option<String>,
}

/// The policy directory could not be loaded; nothing of it is in force.
#[derive(Debug, thiserror::Error)]
#[error("{}", .diagnostics.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n"))]
pub struct PolicyLoadError {
    pub diagnostics: Vec<PolicyDiagnostic>,
}

/// One problem, located in a file. `line`/`column` are 1-based; 0:0 when unknown.
#[derive(Debug, Clone)]
pub struct PolicyDiagnostic {
    pub severity: Severity,
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
    pub hint: Option<String>,
}

/// An error stops a policy set from loading; a warning ([`PolicyEngine::lint`]) does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

impl fmt::Display for PolicyDiagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}: {}",
            self.file, self.line, self.column, self.severity, self.message
        )?;
        if let Some(hint) = &self.hint {
            write!(f, " (hint: {hint})")?;
        }
        Ok(())
    }
}

impl PolicyEngine {
    /// Loads DIR/schema.cedarschema, every DIR/*.cedar (sorted by name) and
    /// DIR/entities.json; validates policies against the schema in strict mode and
    /// parses and checks annotations.
    pub fn load_dir(dir: &Path) -> Result<PolicyEngine, PolicyLoadError> {
        load::load_dir(dir)
    }

    /// Same as [`PolicyEngine::load_dir`] from in-memory sources:
    /// `files` = [(file name, text)].
    pub fn from_sources(
        schema: &str,
        files: &[(String, String)],
        entities_json: &str,
    ) -> Result<PolicyEngine, PolicyLoadError> {
        load::build(
            &load::Named::new("schema.cedarschema", schema),
            files,
            &load::Named::new("entities.json", entities_json),
        )
    }

    /// True when `action` is declared in the schema as a `Tessera::Action`.
    pub fn is_known_action(&self, action: &str) -> bool {
        self.actions.contains_key(action)
    }

    /// True when a policy (permit or forbid) has this id.
    pub fn has_policy(&self, id: &str) -> bool {
        self.policies
            .policy(&cedar_policy::PolicyId::new(id))
            .is_some()
    }

    /// Number of policies in force.
    pub fn policy_count(&self) -> usize {
        self.policies.policies().count()
    }

    /// Decides `req`: Cedar's decision (default deny, forbid wins) and, when allowed,
    /// the strictest constraints across all satisfied permits.
    pub fn evaluate(&self, req: &PolicyRequest<'_>) -> PolicyDecision {
        let Some(action) = self.actions.get(req.action) else {
            return deny_error("unknown action".to_string());
        };
        let built = context::request(self, req, action, None)
            .and_then(|request| Ok((request, self.entities.get(self, req, action)?)));
        let (request, entities) = match built {
            Ok(built) => built,
            Err(e) => return deny_error(e),
        };
        let response = self
            .authorizer
            .is_authorized(&request, &self.policies, &entities);
        let mut policies: Vec<String> = response
            .diagnostics()
            .reason()
            .map(|id| id.to_string())
            .collect();
        policies.sort();
        match response.decision() {
            Decision::Allow => {
                let mut constraints = Constraints::default();
                for id in &policies {
                    if let Some(c) = self.constraints.get(id) {
                        constraints.tighten(id, c);
                    }
                }
                PolicyDecision::Allow {
                    policies,
                    constraints,
                }
            }
            Decision::Deny => PolicyDecision::Deny {
                policies,
                errors: response
                    .diagnostics()
                    .errors()
                    .map(|e| e.to_string())
                    .collect(),
            },
        }
    }
}

impl PolicyEngine {
    /// Decides a request whose path names *every* table of a schema or database
    /// (`analytics.public.*`). Cedar's `like "analytics.public.*"` also matches the
    /// literal `*`, so a permit written for "any one table" would otherwise grant all
    /// of them at once, forbids on single tables notwithstanding. Allowed only when
    /// some satisfied permit names the wildcard *explicitly*: it matches the literal
    /// path but not a concrete table in the same place (`== "analytics.public.*"` or
    /// `like "analytics.public.\*"` do; `like "analytics.public.*"` does not).
    pub fn evaluate_all_tables(&self, req: &PolicyRequest<'_>) -> PolicyDecision {
        let decision = self.evaluate(req);
        let PolicyDecision::Allow { policies, .. } = &decision else {
            return decision;
        };
        let concrete_path = format!("{}{ANY_TABLE}", req.path.trim_end_matches('*'));
        let concrete = self.evaluate(&PolicyRequest {
            path: &concrete_path,
            ..*req
        });
        let explicit = match &concrete {
            PolicyDecision::Allow { policies: p, .. } => policies.iter().any(|id| !p.contains(id)),
            // A forbid hides which permits matched: refuse rather than guess.
            PolicyDecision::Deny {
                policies: forbids, ..
            } => forbids.is_empty(),
        };
        if explicit {
            decision
        } else {
            PolicyDecision::Deny {
                policies: Vec::new(),
                errors: Vec::new(),
            }
        }
    }
}

/// Stands for "some table" when testing whether a permit names `*` explicitly;
/// not an identifier, so never a real table's name.
const ANY_TABLE: &str = "<any table>";

fn deny_error(error: String) -> PolicyDecision {
    PolicyDecision::Deny {
        policies: Vec::new(),
        errors: vec![error],
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_load;
