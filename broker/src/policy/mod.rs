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

pub mod admit;
mod annotations;
// The `@approval` grammar lives with the other grammars: the store checks a gate
// inside the transaction that records a vote, and imports no policy.
pub use crate::grammar::approval_gate;
mod assemble;
pub mod cases;
mod context;
mod decision_cache;
pub mod effective;
pub mod example;
pub mod explain;
pub mod files;
mod glob;
pub mod in_force;
mod lint;
mod load;
mod resource_set;
pub mod simulate;
mod source;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::time::Duration;
use tessera_client::types::ErrorCode;

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
    /// Every policy rewritten for deciding wildcard requests ([`resource_set`]).
    sets: resource_set::SetEvaluator,
    /// Decisions of recent requests (exact: see [`decision_cache`]). Owned by the
    /// snapshot, so a reload, which builds a new engine, starts it empty.
    decisions: decision_cache::DecisionCache,
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
    /// The request's arguments (a JSON object), `context.arguments` when given.
    pub arguments: Option<&'a serde_json::Value>,
}

/// Cedar's decision plus, when allowed, the effective constraints.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyDecision {
    /// `policies`: ids of the satisfied permit policies, sorted.
    Allow {
        policies: Vec<String>,
        constraints: Constraints,
    },
    /// `rule`: why; `policies`: the policies that decided (the forbids, the
    /// `@approval` permits a wildcard overlaps, or the permits that hold for only
    /// part of a wildcard's set; empty when no permit matched); `errors`:
    /// evaluation errors, for logs.
    Deny {
        rule: DenyRule,
        policies: Vec<String>,
        errors: Vec<String>,
    },
}

/// Which rule refused a request. Stable: the audit row's `reason` and, for the
/// wildcard rules, the 403 body's `code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyRule {
    /// No permit holds (Cedar's default deny).
    NoPermit,
    /// A forbid holds (for a wildcard: for every member of its set).
    Forbidden,
    /// A wildcard request that no permit grants as a whole: some permit holds for
    /// part of its set only, or the kind needs the wildcard named explicitly.
    WildcardNotCovered,
    /// A forbid could hold for some member of a wildcard's set.
    WildcardOverlapsForbid,
    /// An `@approval` permit could hold for some member of a wildcard's set.
    WildcardOverlapsApproval,
}

impl DenyRule {
    /// The audit row's reason.
    pub fn reason(self) -> &'static str {
        match self {
            DenyRule::NoPermit => "no_permit",
            DenyRule::Forbidden => "forbidden",
            DenyRule::WildcardNotCovered => "wildcard_not_covered",
            DenyRule::WildcardOverlapsForbid => "wildcard_overlaps_forbid",
            DenyRule::WildcardOverlapsApproval => "wildcard_overlaps_approval",
        }
    }

    /// The error code the caller gets. A plain deny never says which policy or
    /// rule: the sandbox learns only `capability_denied`. The wildcard rules say
    /// which, so a well-meaning tool knows to ask for a concrete resource instead.
    pub fn code(self) -> ErrorCode {
        match self {
            DenyRule::NoPermit | DenyRule::Forbidden => ErrorCode::CapabilityDenied,
            DenyRule::WildcardNotCovered => ErrorCode::WildcardNotCovered,
            DenyRule::WildcardOverlapsForbid => ErrorCode::WildcardOverlapsForbid,
            DenyRule::WildcardOverlapsApproval => ErrorCode::WildcardOverlapsApproval,
        }
    }

    /// All rules, for documentation checks.
    pub const ALL: [DenyRule; 5] = [
        DenyRule::NoPermit,
        DenyRule::Forbidden,
        DenyRule::WildcardNotCovered,
        DenyRule::WildcardOverlapsForbid,
        DenyRule::WildcardOverlapsApproval,
    ];
}

/// Strictest constraints across all satisfied permits; each names the policy that set it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Constraints {
    pub ttl: Option<(Duration, String)>,
    pub uses: Option<(u32, String)>,
    pub rate: Option<(Rate, String)>,
    /// Id of the first satisfied permit with `@approval`.
    pub approval: Option<String>,
    /// Every satisfied permit's approval gate, by policy id: all must be met.
    pub gates: Vec<(String, approval_gate::ApprovalGate)>,
    /// The smallest `@uses` among the permits that carry a gate.
    pub gated_uses: Option<u32>,
    /// Non-public address ranges the satisfied permits open (`@allow_addresses`,
    /// their union: each permit grants what it lists).
    pub allow_addresses: Vec<crate::backends::net::cidr::Cidr>,
}

impl Constraints {
    /// The gates as an approval records them (`2 of group:finance; user:bob`).
    pub fn approvers(&self) -> String {
        let gates: Vec<_> = self.gates.iter().map(|(_, g)| g.clone()).collect();
        approval_gate::describe(&gates)
    }

    /// Uses of a capability redeemed from an approval: the gated permits' `@uses`
    /// (1 when none says), never more than `effective` — a looser permit
    /// satisfied beside them cannot turn one approved action into many.
    pub fn approved_uses(&self, effective: u32) -> u32 {
        self.gated_uses.unwrap_or(1).min(effective)
    }

    /// How long an approval may wait: the shortest `@approval_ttl` of the gates.
    pub fn approval_ttl(&self) -> Duration {
        self.gates
            .iter()
            .map(|(_, g)| g.ttl)
            .min()
            .unwrap_or(approval_gate::DEFAULT_APPROVAL_TTL)
    }
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
        files::PolicyFiles::read_dir(dir)?.compile(dir)
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

    /// Whether `req.arguments` fit what the schema declares as this action's
    /// `context.arguments` (`Err`: why not). Without arguments, always.
    pub fn check_arguments(&self, req: &PolicyRequest<'_>) -> Result<(), String> {
        match (self.actions.get(req.action), req.arguments) {
            (Some(action), Some(_)) => context::request(self, req, action, None).map(|_| ()),
            _ => Ok(()),
        }
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

    /// `None` when this snapshot caches its decisions; otherwise why it does not
    /// (e.g. `policy "office-hours" reads context.now`). Decided once, at load.
    pub fn decision_cache_disabled(&self) -> Option<&str> {
        self.decisions.disabled()
    }

    /// The decision cache in a few words, for the log line of a (re)load:
    /// `on, keyed on context fields: run.labels, task.kind` or `off: <why>`.
    /// (`context.arguments` is never a key: requests with arguments are not
    /// cached.)
    pub fn decision_cache_summary(&self) -> String {
        match (self.decisions.reads(), self.decisions.disabled()) {
            (Some(reads), _) => format!(
                "on, keyed on context fields: {}",
                reads.without(decision_cache::ReadSet::ARGUMENTS)
            ),
            (None, why) => format!("off: {}", why.unwrap_or("unknown")),
        }
    }

    /// Decides `req`, the one decision procedure of the broker and of every policy
    /// tool. A concrete path is Cedar's decision (default deny, forbid wins); a path
    /// with wildcards is a set, decided by [`resource_set`]'s rule. When allowed,
    /// the constraints are the strictest across the permits that hold (for a set:
    /// that could hold for any member). Decisions are cached per snapshot,
    /// exactly: see [`decision_cache`].
    pub fn decide(&self, req: &PolicyRequest<'_>) -> PolicyDecision {
        let Some(action) = self.actions.get(req.action) else {
            return deny_error("unknown action".to_string());
        };
        self.decisions
            .get_or_decide(req, || self.decide_fresh(req, action))
    }

    /// Tests only: [`PolicyEngine::decide`] without the decision cache.
    #[cfg(test)]
    pub(crate) fn decide_uncached(&self, req: &PolicyRequest<'_>) -> PolicyDecision {
        let Some(action) = self.actions.get(req.action) else {
            return deny_error("unknown action".to_string());
        };
        self.decide_fresh(req, action)
    }

    /// The decision, evaluated.
    fn decide_fresh(&self, req: &PolicyRequest<'_>, action: &context::Action) -> PolicyDecision {
        if crate::resource::is_set(req.backend_kind, req.path) {
            self.decide_set(req, action)
        } else {
            self.decide_concrete(req, action)
        }
    }

    fn decide_concrete(&self, req: &PolicyRequest<'_>, action: &context::Action) -> PolicyDecision {
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
                let constraints = self.tightest(&policies);
                PolicyDecision::Allow {
                    policies,
                    constraints,
                }
            }
            Decision::Deny => PolicyDecision::Deny {
                rule: if policies.is_empty() {
                    DenyRule::NoPermit
                } else {
                    DenyRule::Forbidden
                },
                policies,
                errors: response
                    .diagnostics()
                    .errors()
                    .map(|e| e.to_string())
                    .collect(),
            },
        }
    }

    /// Whether one of the forbids `ids` (a denial's policies) says
    /// `@on_deny("end_run")`: the egress gateway then ends the run.
    pub fn ends_run_on_deny(&self, ids: &[String]) -> bool {
        ids.iter()
            .any(|id| self.constraints.get(id).is_some_and(|c| c.end_run_on_deny))
    }

    /// The strictest constraints of the permits `ids`.
    fn tightest(&self, ids: &[String]) -> Constraints {
        let mut constraints = Constraints::default();
        for id in ids {
            if let Some(c) = self.constraints.get(id) {
                constraints.tighten(id, c);
            }
        }
        constraints
    }

    fn is_approval_gated(&self, id: &str) -> bool {
        self.constraints
            .get(id)
            .is_some_and(|c| c.approval.is_some())
    }

    /// A wildcard request: issued only when a permit holds for every member of
    /// the set and no forbid and no `@approval` permit could hold for any.
    fn decide_set(&self, req: &PolicyRequest<'_>, action: &context::Action) -> PolicyDecision {
        let set = resource_set::SetRequest {
            backend: req.backend,
            path: req.path,
            elems: glob::request_elems(req.path, crate::resource::wildcards(req.backend_kind)),
            inclusion_grants: crate::resource::inclusion_grants(req.backend_kind),
            #[cfg(test)]
            exact: false,
        };
        self.decide_set_with(req, action, &set)
    }

    /// Tests only: a concrete request decided through the set variants, every atom
    /// decided exactly; must agree with Cedar's own decision.
    #[cfg(test)]
    pub(crate) fn decide_through_variants(&self, req: &PolicyRequest<'_>) -> PolicyDecision {
        let Some(action) = self.actions.get(req.action) else {
            return deny_error("unknown action".to_string());
        };
        let set = resource_set::SetRequest {
            backend: req.backend,
            path: req.path,
            elems: Vec::new(),
            inclusion_grants: true,
            exact: true,
        };
        self.decide_set_with(req, action, &set)
    }

    fn decide_set_with(
        &self,
        req: &PolicyRequest<'_>,
        action: &context::Action,
        set: &resource_set::SetRequest<'_>,
    ) -> PolicyDecision {
        let request = match context::request(self, req, action, None) {
            Ok(r) => r,
            Err(e) => return deny_error(e),
        };
        let mut errors = Vec::new();
        let holds = self.sets.holds(set, |attrs, failing| {
            let entities = context::entities_with(self, req, action, attrs)?;
            let response = self
                .authorizer
                .is_authorized(&request, &self.sets.variants, &entities);
            if errors.is_empty() {
                // Not the errors the evaluator causes on purpose (`failing`).
                errors.extend(
                    response
                        .diagnostics()
                        .errors()
                        .filter(|e| {
                            let cedar_policy::AuthorizationError::PolicyEvaluationError(e) = e;
                            !failing.contains(&e.policy_id().to_string())
                        })
                        .map(|e| e.to_string()),
                );
            }
            Ok(response
                .diagnostics()
                .reason()
                .map(|id| id.to_string())
                .collect())
        });
        let holds = match holds {
            Ok(h) => h,
            Err(e) => return deny_error(e),
        };
        let (mut forbid_all, mut forbid_some, mut approval, mut covering, mut partial) =
            (vec![], vec![], vec![], vec![], vec![]);
        for (p, resource_set::Holds { may, must }) in self.sets.policies.iter().zip(holds) {
            let id = p.id.clone();
            match (p.forbid, self.is_approval_gated(&id)) {
                (true, _) if must => forbid_all.push(id),
                (true, _) if may => forbid_some.push(id),
                (false, true) if may => approval.push(id),
                (false, false) if must => covering.push(id),
                (false, false) if may => partial.push(id),
                _ => {}
            }
        }
        let deny = |rule, mut policies: Vec<String>| {
            policies.sort();
            PolicyDecision::Deny {
                rule,
                policies,
                errors: errors.clone(),
            }
        };
        if !forbid_all.is_empty() {
            return deny(DenyRule::Forbidden, forbid_all);
        }
        if !forbid_some.is_empty() {
            return deny(DenyRule::WildcardOverlapsForbid, forbid_some);
        }
        if covering.is_empty() && partial.is_empty() && approval.is_empty() {
            return deny(DenyRule::NoPermit, Vec::new());
        }
        if !approval.is_empty() {
            return deny(DenyRule::WildcardOverlapsApproval, approval);
        }
        if covering.is_empty() {
            return deny(DenyRule::WildcardNotCovered, partial);
        }
        covering.sort();
        // A member may also satisfy a permit that holds for part of the set only:
        // its constraints bind the set too, or the wildcard would walk around them.
        let mut bound = covering.clone();
        bound.extend(partial);
        PolicyDecision::Allow {
            constraints: self.tightest(&bound),
            policies: covering,
        }
    }
}

fn deny_error(error: String) -> PolicyDecision {
    PolicyDecision::Deny {
        rule: DenyRule::NoPermit,
        policies: Vec::new(),
        errors: vec![error],
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_decision_cache;
#[cfg(test)]
mod tests_load;
#[cfg(test)]
mod tests_soundness;
