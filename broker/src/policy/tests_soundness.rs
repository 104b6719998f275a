//! The resource-set rule, proven by brute force: whenever a wildcard request is
//! issued, every member of its set, asked for on its own, would be issued too —
//! no member is forbidden, approval-gated or outside every permit.
//!
//! Random permit/forbid/`@approval` sets are drawn over a small universe of
//! concrete paths (every path of one to three segments from a five-word
//! vocabulary); the policies' literals and patterns use the same letters, so any
//! member that a condition could single out is in the universe.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::tests::{shipped_schema, ENTITIES};
use super::*;

const WORDS: [&str; 5] = ["a", "b", "aa", "ab", "ba"];

fn universe() -> Vec<String> {
    let mut all: Vec<String> = WORDS.iter().map(|w| w.to_string()).collect();
    let mut layer = all.clone();
    for _ in 1..3 {
        layer = layer
            .iter()
            .flat_map(|p| WORDS.iter().map(move |w| format!("{p}/{w}")))
            .collect();
        all.extend(layer.iter().cloned());
    }
    all
}

/// A path condition, as Cedar text.
fn atom() -> impl Strategy<Value = String> {
    let word = prop::sample::select(WORDS.to_vec());
    let lit = prop::collection::vec(word.clone(), 1..=3).prop_map(|w| w.join("/"));
    let pat = "[ab/*]{1,5}";
    prop_oneof![
        lit.clone()
            .prop_map(|l| format!("resource.path == \"{l}\"")),
        pat.prop_map(|p| format!("resource.path like \"{p}\"")),
        lit.clone()
            .prop_map(|l| format!("resource == Tessera::Resource::\"svc:{l}\"")),
        lit.prop_map(|l| format!("resource.path != \"{l}\"")),
    ]
}

fn condition() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => atom(),
        1 => atom().prop_map(|a| format!("!({a})")),
        1 => (atom(), atom()).prop_map(|(a, b)| format!("({a}) && ({b})")),
        1 => (atom(), atom()).prop_map(|(a, b)| format!("({a}) || ({b})")),
    ]
}

#[derive(Debug, Clone, Copy)]
enum Effect {
    Permit,
    Approval,
    Forbid,
}

fn policy_set() -> impl Strategy<Value = Vec<(Effect, String)>> {
    let effect = prop_oneof![
        3 => Just(Effect::Permit),
        1 => Just(Effect::Approval),
        2 => Just(Effect::Forbid),
    ];
    prop::collection::vec((effect, condition()), 1..6)
}

fn text(policies: &[(Effect, String)]) -> String {
    let mut out = String::new();
    for (i, (effect, cond)) in policies.iter().enumerate() {
        let head = match effect {
            Effect::Forbid => "forbid",
            _ => "permit",
        };
        let approval = if matches!(effect, Effect::Approval) {
            "@approval(\"required\")\n"
        } else {
            ""
        };
        out += &format!(
            "@id(\"p{i}\")\n{approval}{head} (principal, action == Tessera::Action::\"read\", resource) \
             when {{ resource.backend == \"svc\" && ({cond}) }};\n"
        );
    }
    out
}

/// A wildcard request: one to three segments, at least one with `*`.
fn request() -> impl Strategy<Value = String> {
    let seg = prop::sample::select(vec!["a", "b", "ab", "*", "a*", "*b", "*a*"]);
    prop::collection::vec(seg, 1..=3)
        .prop_map(|s| s.join("/"))
        .prop_filter("has a wildcard", |p| p.contains('*'))
}

fn glob_matches(pattern: &str, s: &str) -> bool {
    let p = super::glob::literal_as_like(pattern);
    super::glob::like_matches(&p, s)
}

fn ask<'a>(
    path: &'a str,
    labels: &'a [String],
    attrs: &'a BTreeMap<String, String>,
) -> PolicyRequest<'a> {
    PolicyRequest {
        user: "alice",
        action: "read",
        backend: "svc",
        backend_kind: "token",
        path,
        run_id: "r",
        run_labels: labels,
        task_id: "t",
        task_kind: "summarize",
        task_attributes: attrs,
        runtime: "rt",
        requested_ttl: None,
        now_unix: 0,
        arguments: None,
    }
}

fn issued(d: &PolicyDecision) -> bool {
    matches!(d, PolicyDecision::Allow { constraints, .. } if constraints.approval.is_none())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn a_wildcard_is_issued_only_if_every_member_would_be(policies in policy_set(), req in request()) {
        let files = vec![("p.cedar".to_string(), text(&policies))];
        let engine = PolicyEngine::from_sources(&shipped_schema(), &files, ENTITIES)
            .unwrap_or_else(|e| panic!("{e}\n{}", files[0].1));
        let (labels, attrs) = (Vec::new(), BTreeMap::new());
        let decision = engine.decide(&ask(&req, &labels, &attrs));
        if issued(&decision) {
            for member in universe().iter().filter(|m| glob_matches(&req, m)) {
                let one = engine.decide(&ask(member, &labels, &attrs));
                prop_assert!(
                    issued(&one),
                    "{req} was issued ({decision:?}) but its member {member} is not ({one:?})\n{}",
                    files[0].1
                );
            }
        }
    }
}

/// A request for one concrete path from the universe.
fn member() -> impl Strategy<Value = String> {
    prop::sample::select(universe())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The variants are faithful: a concrete request decided through them (every
    /// atom decided exactly) gets Cedar's own decision. So the set rule starts
    /// from the policies as written, and a rewriting that dropped or inverted a
    /// condition would fail here (the soundness test alone would not notice a
    /// rule that refuses everything).
    #[test]
    fn variants_agree_with_cedar_on_concrete_paths(policies in policy_set(), path in member()) {
        let files = vec![("p.cedar".to_string(), text(&policies))];
        let engine = PolicyEngine::from_sources(&shipped_schema(), &files, ENTITIES)
            .unwrap_or_else(|e| panic!("{e}\n{}", files[0].1));
        let (labels, attrs) = (Vec::new(), BTreeMap::new());
        let r = ask(&path, &labels, &attrs);
        let cedar = engine.decide(&r);
        let variants = engine.decide_through_variants(&r);
        // The set rule refuses an approval-gated permit instead of allowing it
        // with the gate: compare the gated permits as such.
        let verdict = |d: &PolicyDecision| match d {
            PolicyDecision::Allow { policies, .. } => {
                let gated: Vec<String> =
                    policies.iter().filter(|p| engine.is_approval_gated(p)).cloned().collect();
                if gated.is_empty() { ("allow", policies.clone()) } else { ("approval", gated) }
            }
            PolicyDecision::Deny { rule: DenyRule::WildcardOverlapsApproval, policies, .. } => {
                ("approval", policies.clone())
            }
            PolicyDecision::Deny { rule: DenyRule::Forbidden | DenyRule::NoPermit, policies, .. } => {
                ("deny", policies.clone())
            }
            PolicyDecision::Deny { rule, .. } => (rule.reason(), Vec::new()),
        };
        prop_assert_eq!(verdict(&cedar), verdict(&variants), "{}\n{}", path, files[0].1);
    }
}
