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

/// A path condition, as Cedar text: read directly, or (`wrapped`) also through
/// record, set and entity literals, the way a policy may spell it.
fn atom(wrapped: bool) -> impl Strategy<Value = String> {
    let word = prop::sample::select(WORDS.to_vec());
    let lit = prop::collection::vec(word.clone(), 1..=3).prop_map(|w| w.join("/"));
    let pat = "[ab/*]{1,5}";
    let path = if wrapped {
        path_expr().boxed()
    } else {
        Just("resource.path".to_string()).boxed()
    };
    let direct = prop_oneof![
        (path.clone(), lit.clone()).prop_map(|(p, l)| format!("{p} == \"{l}\"")),
        (path.clone(), pat).prop_map(|(p, l)| format!("{p} like \"{l}\"")),
        lit.clone()
            .prop_map(|l| format!("resource == Tessera::Resource::\"svc:{l}\"")),
        (path, lit.clone()).prop_map(|(p, l)| format!("{p} != \"{l}\"")),
    ];
    if !wrapped {
        return direct.boxed();
    }
    let word = prop::sample::select(WORDS.to_vec());
    prop_oneof![
        4 => direct,
        1 => lit.clone().prop_map(|l| format!("[resource.path].contains(\"{l}\")")),
        1 => (lit.clone(), word).prop_map(|(l, w)| {
            format!("[{{k: resource.path}}].containsAny([{{k: \"{l}\"}}, {{k: \"{w}\"}}])")
        }),
        1 => lit.clone().prop_map(|l| {
            format!("{{Value: resource}}.Value == Tessera::Resource::\"svc:{l}\"")
        }),
        // Holds for that one member; for every other, the entity does not exist.
        1 => lit.clone().prop_map(|l| format!("Tessera::Resource::\"svc:{l}\" has path")),
        1 => lit.prop_map(|l| format!("Tessera::Resource::\"svc:{l}\".path == \"{l}\"")),
    ]
    .boxed()
}

/// `resource.path`, possibly inside record and set literals whose keys look like
/// the JSON form's own (`Value`, `==`, `Record`, …).
fn path_expr() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "Value",
        "Var",
        "Record",
        "Set",
        "==",
        ".",
        "!",
        "&&",
        "like",
        "has",
        "is",
        "if-then-else",
        "__entity",
        "left",
        "attr",
    ]);
    let leaf = Just("resource.path".to_string());
    leaf.prop_recursive(3, 6, 1, move |inner| {
        prop_oneof![
            (inner.clone(), key.clone()).prop_map(|(e, k)| format!("{{\"{k}\": {e}}}[\"{k}\"]")),
            (inner.clone(), key.clone())
                .prop_map(|(e, k)| format!("{{\"{k}\": {e}, other: 1}}[\"{k}\"]")),
            inner.prop_map(|e| format!("(if true then {e} else \"\")")),
        ]
    })
}

fn condition(wrapped: bool) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => atom(wrapped),
        1 => atom(wrapped).prop_map(|a| format!("!({a})")),
        1 => (atom(wrapped), atom(wrapped)).prop_map(|(a, b)| format!("({a}) && ({b})")),
        1 => (atom(wrapped), atom(wrapped)).prop_map(|(a, b)| format!("({a}) || ({b})")),
    ]
}

#[derive(Debug, Clone, Copy)]
enum Effect {
    Permit,
    Approval,
    Forbid,
}

fn policy_set(wrapped: bool) -> impl Strategy<Value = Vec<(Effect, String)>> {
    let effect = prop_oneof![
        3 => Just(Effect::Permit),
        1 => Just(Effect::Approval),
        2 => Just(Effect::Forbid),
    ];
    prop::collection::vec((effect, condition(wrapped)), 1..6)
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
    fn a_wildcard_is_issued_only_if_every_member_would_be(policies in policy_set(true), req in request()) {
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
    /// rule that refuses everything). Only readings the rewriter analyses are
    /// drawn: an opaque one is never decided, not even for one path.
    #[test]
    fn variants_agree_with_cedar_on_concrete_paths(policies in policy_set(false), path in member()) {
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

/// Spellings of "the path is reports/secret" (or "the resource is
/// svc:reports/secret") that read it through a record literal, a set literal,
/// an entity literal or a resource attribute the broker does not set. Each holds
/// for `reports/secret` and for no other member of `reports/*`.
const SECRET: [&str; 31] = [
    r#"{Value: resource.path}.Value == "reports/secret""#,
    r#"{Value: resource.path}["Value"] like "reports/secre*""#,
    r#"{Value: resource.path, other: 1}.Value == "reports/secret""#,
    r#"{Var: resource.path}.Var == "reports/secret""#,
    r#"{Expr: resource.path}.Expr == "reports/secret""#,
    r#"{Record: {Value: resource.path}}.Record.Value == "reports/secret""#,
    r#"{a: {Value: resource.path}}.a.Value == "reports/secret""#,
    r#"{Value: {Value: {Value: resource.path}}}.Value.Value.Value == "reports/secret""#,
    r#"{Set: [resource.path]}.Set.contains("reports/secret")"#,
    r#"{"==": resource.path}["=="] == "reports/secret""#,
    r#"{".": resource.path}["."] == "reports/secret""#,
    r#"{"!": resource.path}["!"] == "reports/secret""#,
    r#"{"&&": resource.path}["&&"] == "reports/secret""#,
    r#"{"||": resource.path}["||"] == "reports/secret""#,
    r#"{"like": resource.path}["like"] == "reports/secret""#,
    r#"{"has": resource.path}["has"] == "reports/secret""#,
    r#"{"is": resource.path}["is"] == "reports/secret""#,
    r#"{"if-then-else": resource.path}["if-then-else"] == "reports/secret""#,
    r#"{"__entity": resource.path}["__entity"] == "reports/secret""#,
    r#"{Value: resource}.Value == Tessera::Resource::"svc:reports/secret""#,
    r#"if {Value: resource.path}.Value == "reports/secret" then true else false"#,
    r#"!({Value: resource.path}.Value != "reports/secret")"#,
    r#"[resource.path].contains("reports/secret")"#,
    r#"[{Value: resource.path}].contains({Value: "reports/secret"})"#,
    r#"[resource].contains(Tessera::Resource::"svc:reports/secret")"#,
    r#"Tessera::Resource::"svc:reports/secret".path == "reports/secret""#,
    r#"Tessera::Resource::"svc:reports/secret" has path"#,
    r#"{Value: Tessera::Resource::"svc:reports/secret"}.Value has path"#,
    r#"resource.path == "reports/secret" && !(resource has tsr_atom_0)"#,
    r#"resource.path == "reports/secret" && !(resource has tsr_local_0)"#,
    r#"resource.path == "reports/secret" && !(resource has tsr_atom_1)"#,
];

const REPORTS: &str =
    r#"permit (principal, action, resource) when { resource.path like "reports/*" };"#;

fn load(policies: &str) -> Result<PolicyEngine, PolicyLoadError> {
    let files = vec![("p.cedar".to_string(), policies.to_string())];
    PolicyEngine::from_sources(&shipped_schema(), &files, ENTITIES)
}

fn decide_with(engine: &PolicyEngine, path: &str) -> PolicyDecision {
    let (labels, attrs) = (Vec::new(), BTreeMap::new());
    engine.decide(&ask(path, &labels, &attrs))
}

fn decide_one(policies: &str, path: &str) -> PolicyDecision {
    let engine = load(policies).unwrap_or_else(|e| panic!("{e}\n{policies}"));
    decide_with(&engine, path)
}

/// What a set decision must be, and which spellings it was not for.
fn failures(gate: &str, expect_member: fn(&PolicyDecision) -> bool) -> Vec<String> {
    let mut failed = Vec::new();
    for cond in SECRET {
        let text = format!("{REPORTS}\n{gate} (principal, action, resource) when {{ {cond} }};");
        // A valid policy set must load (its set variants included).
        let engine = match load(&text) {
            Ok(engine) => engine,
            Err(e) => {
                failed.push(format!("{cond}  =>  does not load: {e}"));
                continue;
            }
        };
        // The spelling does single out the member: it is decided as such on its
        // own, and its neighbour is issued.
        let member = decide_with(&engine, "reports/secret");
        assert!(expect_member(&member), "{cond}: reports/secret: {member:?}");
        let other = decide_with(&engine, "reports/other");
        assert!(issued(&other), "{cond}: reports/other: {other:?}");
        let set = decide_with(&engine, "reports/*");
        if issued(&set) {
            failed.push(format!("{cond}  =>  {set:?}"));
        }
    }
    failed
}

/// A forbid that reads the path through a literal (record, set, entity) or a
/// resource attribute holds for its member: the wildcard is refused.
#[test]
fn no_spelling_of_a_forbid_lets_a_wildcard_through() {
    let failed = failures("forbid", |d| {
        matches!(
            d,
            PolicyDecision::Deny {
                rule: DenyRule::Forbidden,
                ..
            }
        )
    });
    assert!(
        failed.is_empty(),
        "wildcards walked around a forbid:\n{}",
        failed.join("\n")
    );
}

/// The same for an `@approval` permit: a member that would need approval keeps
/// the wildcard from being issued without it.
#[test]
fn no_spelling_of_an_approval_lets_a_wildcard_through() {
    let failed = failures(
        "@approval(\"required\")\npermit",
        |d| matches!(d, PolicyDecision::Allow { constraints, .. } if constraints.approval.is_some()),
    );
    assert!(
        failed.is_empty(),
        "wildcards walked around an approval:\n{}",
        failed.join("\n")
    );
}

/// A permit whose condition errors for some member (an entity literal of the
/// resource type that is not the resource) does not hold for that member, so it
/// does not grant the set, whatever else the condition says after it.
#[test]
fn a_permit_that_errors_for_a_member_does_not_grant_the_set() {
    for cond in [
        r#"Tessera::Resource::"svc:reports/a".path == "reports/a" || resource.path like "reports/*""#,
        r#"{x: Tessera::Resource::"svc:reports/a"}.x.kind == "token" || resource.path like "reports/*""#,
    ] {
        let text = format!("permit (principal, action, resource) when {{ {cond} }};");
        let member = decide_one(&text, "reports/b");
        assert!(!issued(&member), "{cond}: reports/b: {member:?}");
        let set = decide_one(&text, "reports/*");
        assert!(!issued(&set), "{cond}: reports/*: {set:?}");
    }
    // Where the covering condition comes first, Cedar never reaches the other.
    let text = r#"permit (principal, action, resource) when { resource.path like "reports/*" || Tessera::Resource::"svc:reports/a".path == "x" };"#;
    assert!(issued(&decide_one(text, "reports/*")));
}

/// A comparison of the resource with an entity of another type never holds.
#[test]
fn a_uid_of_another_type_is_not_the_resource() {
    for text in [
        r#"permit (principal, action, resource) when { resource == Tessera::User::"svc:reports/*" };"#,
        r#"permit (principal, action, resource) when { resource == Tessera::Group::"svc:reports/*" || resource.path == "x" };"#,
    ] {
        let member = decide_one(text, "reports/b");
        assert!(!issued(&member), "{text}: reports/b: {member:?}");
        let set = decide_one(text, "reports/*");
        assert!(!issued(&set), "{text}: reports/*: {set:?}");
    }
}
