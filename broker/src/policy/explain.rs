//! `tessera policy explain`: why a request would be allowed or denied, and with which
//! constraints — an IAM-style policy simulator for administrators.
//!
//! Why: when a run is refused, the sandbox learns only a stable error code (never which
//! policy said no). The administrator needs the other half: which policies decided,
//! what each constraint will be and which annotation, default or cap set it.
//!
//! Invariants: the decision is [`PolicyEngine::decide`]'s (the broker's own, wildcard
//! and all-tables rules included), never recomputed here;
//! the constraints are [`Effective::new`]'s; the request is a [`Simulated`] one, so it
//! has passed the broker's own checks; rendering (text and JSON) adds nothing to the
//! decision.

use serde_json::{json, Value};

use super::effective::{Bounded, Effective, Source};
use super::simulate::Simulated;
use super::{DenyRule, PolicyDecision, PolicyEngine};
use crate::config::Limits;
use crate::grammar::{format_duration, Rate};

/// A decision with its reasons.
#[derive(Debug, Clone)]
pub struct Explanation {
    pub request: Simulated,
    /// The user's groups (all ancestors) from entities.json; `None`: not listed there.
    pub groups: Option<Vec<String>>,
    pub allowed: bool,
    /// Why a deny: the rule that refused.
    pub rule: Option<DenyRule>,
    /// Allow: the satisfied permits. Deny: the policies that decided (see
    /// [`PolicyDecision::Deny`]; empty: no permit matched).
    pub policies: Vec<String>,
    /// The constraints a capability would get, when allowed.
    pub effective: Option<Effective>,
    /// Evaluation errors (a policy that errors is skipped, as in the broker).
    pub errors: Vec<String>,
    /// The server defaults and caps applied.
    pub limits: Limits,
    /// Egress: the non-public ranges the satisfied permits open (`@allow_addresses`).
    pub allow_addresses: Vec<String>,
    /// Egress: a deciding forbid says `@on_deny("end_run")`.
    pub ends_run: bool,
}

impl PolicyEngine {
    /// Evaluates `request` and explains the decision under the server caps `limits`.
    pub fn explain(&self, request: &Simulated, limits: &Limits) -> Explanation {
        let groups = self.groups_of(&request.spec.user);
        let mut allow_addresses = Vec::new();
        let (rule, policies, effective, errors) = match self.decide(&request.request()) {
            PolicyDecision::Allow {
                policies,
                constraints,
            } => {
                let e = Effective::new(&constraints, limits, request.spec.requested_ttl);
                allow_addresses = constraints
                    .allow_addresses
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                (None, policies, Some(e), Vec::new())
            }
            PolicyDecision::Deny {
                rule,
                policies,
                errors,
            } => (Some(rule), policies, None, errors),
        };
        let ends_run = rule.is_some() && self.ends_run_on_deny(&policies);
        Explanation {
            request: request.clone(),
            groups,
            allowed: rule.is_none(),
            rule,
            policies,
            effective,
            errors,
            limits: limits.clone(),
            allow_addresses,
            ends_run,
        }
    }

    /// Ids of all the groups `user` is in (sorted), or `None` when entities.json does
    /// not list the user.
    pub fn groups_of(&self, user: &str) -> Option<Vec<String>> {
        let (_, _, parents) = self.users.get(user)?.clone().into_inner();
        let mut groups: Vec<String> = parents
            .iter()
            .map(|g| g.id().unescaped().to_string())
            .collect();
        groups.sort();
        Some(groups)
    }
}

impl Explanation {
    /// `"allow"` or `"deny"`.
    pub fn decision(&self) -> &'static str {
        if self.allowed {
            "allow"
        } else {
            "deny"
        }
    }

    /// The explanation for people.
    pub fn render(&self) -> String {
        let s = &self.request.spec;
        let mut out = format!(
            "request:  user {} {} {} (task kind {})\n",
            s.user, s.action, s.resource, s.task_kind
        );
        out += &match &self.groups {
            Some(g) if g.is_empty() => format!("user:     {} is in no group\n", s.user),
            Some(g) => format!("user:     {} is in {}\n", s.user, g.join(", ")),
            None => format!(
                "user:     {} is not in entities.json, so in no group\n",
                s.user
            ),
        };
        out += &format!("decision: {}\n", self.decision());
        let ids = self.policies.join(", ");
        out += &match self.rule {
            None => format!("  satisfied permits: {ids}\n"),
            Some(DenyRule::NoPermit) => "  no permit matched (default deny)\n".to_string(),
            Some(DenyRule::Forbidden) => format!("  forbidden by: {ids}\n"),
            Some(DenyRule::WildcardOverlapsForbid) => format!(
                "  wildcard_overlaps_forbid: the set {} names could include what {ids} \
                 forbids\n",
                s.resource
            ),
            Some(DenyRule::WildcardOverlapsApproval) => format!(
                "  wildcard_overlaps_approval: the set {} names could include what {ids} \
                 gates behind an approval\n",
                s.resource
            ),
            Some(DenyRule::WildcardNotCovered) if self.policies.is_empty() => format!(
                "  wildcard_not_covered: no permit grants the whole set {} names (this \
                 kind needs the wildcard named explicitly)\n",
                s.resource
            ),
            Some(DenyRule::WildcardNotCovered) => format!(
                "  wildcard_not_covered: no permit grants the whole set {} names; {ids} \
                 hold for part of it only, or (database `*`) do not name the wildcard \
                 explicitly\n",
                s.resource
            ),
        };
        for e in &self.errors {
            out += &format!("  evaluation error: {e}\n");
        }
        if self.ends_run {
            out += "  @on_deny(\"end_run\"): the egress gateway ends a run that tries this\n";
        }
        if self.allowed && s.action == crate::backends::net::grammar::CONNECT {
            out += &match self.allow_addresses.as_slice() {
                [] => "addresses: public only (no satisfied permit has @allow_addresses)\n"
                    .to_string(),
                opened => format!("addresses: public, and {}\n", opened.join(", ")),
            };
        }
        if let Some(e) = &self.effective {
            out += "constraints:\n";
            out += &constraint_lines(e, &self.limits);
            out += "  (a capability never outlives its run)\n";
        }
        out
    }

    /// The explanation for scripts.
    pub fn to_json(&self) -> Value {
        let s = &self.request.spec;
        let reason = self.rule.map_or("permitted", DenyRule::reason);
        let constraints = self.effective.as_ref().map(|e| {
            let mut ttl = bounded_json(&e.ttl, |d| json!(format_duration(*d)));
            if let Some(obj) = ttl.as_object_mut() {
                obj.insert("seconds".into(), json!(e.ttl.value.as_secs()));
            }
            json!({
                "ttl": ttl,
                "uses": bounded_json(&e.uses, |u| json!(u)),
                "rate": bounded_json(&e.rate, |r| json!(r.to_string())),
                "approval": { "required": e.approval.is_some(), "policy": e.approval, "approvers": e.approvers },
            })
        });
        json!({
            "request": {
                "user": s.user,
                "action": s.action,
                "resource": s.resource,
                "backend": self.request.backend,
                "backend_kind": self.request.backend_kind,
                "path": self.request.path,
                "task": { "id": s.task_id, "kind": s.task_kind, "attributes": s.task_attributes },
                "labels": s.labels,
                "runtime": s.runtime,
                "requested_ttl": s.requested_ttl.map(format_duration),
                "now": s.now_unix,
            },
            "user_groups": self.groups,
            "decision": self.decision(),
            "reason": reason,
            "policies": self.policies,
            "constraints": constraints,
            "allow_addresses": self.allow_addresses,
            "ends_run": self.ends_run,
            "errors": self.errors,
        })
    }
}

fn source_name(s: &Source) -> &'static str {
    match s {
        Source::Policy(_) => "policy",
        Source::ServerDefault => "server_default",
        Source::ServerCap => "server_cap",
        Source::Requested => "requested",
    }
}

fn bounded_json<T>(b: &Bounded<T>, value: impl Fn(&T) -> Value) -> Value {
    json!({
        "value": value(&b.value),
        "source": source_name(&b.source),
        "capped_by_server": b.capped,
        "policy": b.declared.as_ref().map(|(_, id)| id),
        "declared": b.declared.as_ref().map(|(d, _)| value(d)),
    })
}

/// Why a value is what it is, e.g. "@ttl of analysts-read-reports" or "bounded by the
/// server cap limits.max_capability_ttl (long-reads asks for 2h)".
fn why<T>(
    b: &Bounded<T>,
    key: &str,
    default_setting: &str,
    cap: (&str, &T),
    show: impl Fn(&T) -> String,
) -> String {
    let cap_setting = format!("{} = {}", cap.0, show(cap.1));
    let declared = match &b.declared {
        Some((v, id)) => format!("{id} asks for {}", show(v)),
        None => format!("no satisfied permit sets @{key}"),
    };
    match &b.source {
        Source::Policy(id) => format!("@{key} of {id}"),
        Source::ServerDefault => format!("server default {default_setting} ({declared})"),
        Source::ServerCap => format!("bounded by the server cap {cap_setting} ({declared})"),
        Source::Requested if b.capped => {
            format!("requested by the caller ({declared}, bounded by the server cap {cap_setting})")
        }
        Source::Requested => format!("requested by the caller ({declared})"),
    }
}

fn constraint_lines(e: &Effective, limits: &Limits) -> String {
    let rows = [
        (
            "ttl",
            format_duration(e.ttl.value),
            why(
                &e.ttl,
                "ttl",
                "limits.default_capability_ttl",
                ("limits.max_capability_ttl", &limits.max_capability_ttl),
                |d| format_duration(*d),
            ),
        ),
        (
            "uses",
            e.uses.value.to_string(),
            why(
                &e.uses,
                "uses",
                "limits.default_uses",
                ("limits.max_uses", &limits.max_uses),
                u32::to_string,
            ),
        ),
        (
            "rate",
            e.rate.value.to_string(),
            why(
                &e.rate,
                "rate",
                "",
                ("limits.max_rate", &limits.max_rate),
                Rate::to_string,
            ),
        ),
    ];
    let width = rows.iter().map(|(_, v, _)| v.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (key, value, why) in rows {
        out += &format!("  {key:<8}  {value:<width$}  {why}\n");
    }
    out += &match &e.approval {
        Some(p) => format!(
            "  approval  required by {p}: {} must approve; the broker answers 202 with an \
             approval bound to the arguments, and issues once it is approved\n",
            e.approvers.as_deref().unwrap_or("any")
        ),
        None => "  approval  not required\n".to_string(),
    };
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use super::super::simulate::{unconfigured_backend, RequestSpec};
    use super::super::tests::SHIPPED;
    use super::*;

    #[test]
    fn egress_decisions_say_what_the_gateway_will_do() {
        let x = explain("alice", "connect", "net:api.github.com:443", &[]);
        assert!(x.allowed);
        assert!(
            x.render().contains("addresses: public only"),
            "{}",
            x.render()
        );
        let x = explain("alice", "connect", "net:metadata.google.internal:80", &[]);
        assert!(!x.allowed && x.ends_run);
        assert!(x.render().contains("@on_deny(\"end_run\")"));
        assert_eq!(x.to_json()["ends_run"], true);
        let x = explain("alice", "connect", "net:api.github.com:80", &[]);
        assert!(!x.allowed && !x.ends_run, "no permit: nothing ends the run");
    }

    /// The text with runs of spaces collapsed, so tests do not depend on alignment.
    fn squash(text: &str) -> String {
        text.split(' ')
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn explain(user: &str, action: &str, resource: &str, labels: &[&str]) -> Explanation {
        explain_with(user, action, resource, labels, None)
    }

    fn explain_with(
        user: &str,
        action: &str,
        resource: &str,
        labels: &[&str],
        arguments: Option<serde_json::Value>,
    ) -> Explanation {
        let e = PolicyEngine::load_dir(Path::new(SHIPPED)).unwrap_or_else(|e| panic!("{e}"));
        let backends: BTreeMap<_, _> = [
            ("svc-reports", "token"),
            ("deployer", "token"),
            ("net", "net"),
        ]
        .into_iter()
        .filter_map(|(b, kind)| Some((b.to_string(), unconfigured_backend(kind)?)))
        .collect();
        let spec = RequestSpec {
            user: user.into(),
            action: action.into(),
            resource: resource.into(),
            task_kind: "summarize".into(),
            task_id: "t".into(),
            labels: labels.iter().map(|l| l.to_string()).collect(),
            runtime: "rt".into(),
            arguments,
            ..RequestSpec::default()
        };
        let sim = e
            .simulate(spec, &backends)
            .unwrap_or_else(|e| panic!("{e}"));
        e.explain(&sim, &Limits::default())
    }

    #[test]
    fn an_allow_names_the_permits_and_what_set_each_constraint() {
        let x = explain("alice", "read", "svc-reports:reports/public/a", &[]);
        let text = squash(&x.render());
        for part in [
            "user: alice is in analysts, staff",
            "decision: allow",
            "satisfied permits: analysts-read-reports, staff-read-public-reports",
            "ttl 15m @ttl of analysts-read-reports",
            "uses 20 @uses of analysts-read-reports",
            "rate 10/min @rate of staff-read-public-reports",
            "approval not required",
        ] {
            assert!(text.contains(part), "missing {part:?} in\n{text}");
        }
        let j = x.to_json();
        assert_eq!(j["decision"], "allow");
        assert_eq!(j["constraints"]["ttl"]["seconds"], 900);
        assert_eq!(j["constraints"]["ttl"]["policy"], "analysts-read-reports");
        assert_eq!(j["constraints"]["rate"]["value"], "10/min");
        assert_eq!(j["constraints"]["uses"]["source"], "policy");
        assert_eq!(j["user_groups"], json!(["analysts", "staff"]));
    }

    #[test]
    fn a_deny_names_the_forbid_or_says_no_permit_matched() {
        let x = explain(
            "alice",
            "read",
            "svc-reports:reports/q1",
            &["untrusted-input"],
        );
        assert!(x.render().contains("forbidden by: guard-untrusted-input"));
        assert_eq!(x.to_json()["reason"], "forbidden");
        assert_eq!(x.to_json()["constraints"], Value::Null);

        let x = explain("carol", "read", "svc-reports:reports/q1", &[]);
        let text = x.render();
        assert!(text.contains("carol is in no group"), "{text}");
        assert!(text.contains("no permit matched (default deny)"), "{text}");
        assert_eq!(x.to_json()["reason"], "no_permit");
        let x = explain("mallory", "read", "svc-reports:reports/q1", &[]);
        assert!(x.render().contains("mallory is not in entities.json"));
    }

    #[test]
    fn approval_and_server_defaults_are_explained() {
        let args = serde_json::json!({"service": "web", "commit": "c", "environment": "staging"});
        let x = explain_with("bob", "invoke", "deployer:prod", &[], Some(args));
        let text = squash(&x.render());
        assert!(
            text.contains("approval required by deploys-need-a-human"),
            "{text}"
        );
        assert!(
            text.contains(
                "rate 6000/min bounded by the server cap limits.max_rate = 6000/min \
                 (no satisfied permit sets @rate)"
            ),
            "{text}"
        );
        let j = x.to_json();
        assert_eq!(
            j["constraints"]["approval"]["policy"],
            "deploys-need-a-human"
        );
        assert_eq!(j["constraints"]["rate"]["source"], "server_cap");
    }
}
