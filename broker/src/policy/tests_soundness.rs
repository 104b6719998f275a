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

/// Literals and patterns that name the request `req` (a wildcard path) rather
/// than a member: spelled exactly as it, with its `*` escaped (`\*`), with some of
/// its literal segments replaced by `*`, or anything ending in a literal `*`.
fn naming(req: &str) -> impl Strategy<Value = String> {
    let escaped = req.replace('*', "\\*");
    let segments: Vec<String> = escaped.split('/').map(str::to_owned).collect();
    let loose = prop::collection::vec(any::<bool>(), segments.len()).prop_map(move |star| {
        segments
            .iter()
            .zip(star)
            .map(|(s, star)| {
                if star && !s.contains('*') {
                    "*"
                } else {
                    s.as_str()
                }
            })
            .collect::<Vec<_>>()
            .join("/")
    });
    prop_oneof![
        Just(escaped),
        loose,
        Just("*\\*".to_string()),
        Just("*\\**".to_string()),
    ]
}

/// A path condition, as Cedar text: read directly, or (`wrapped`) also through
/// record, set and entity literals, the way a policy may spell it. Some of them
/// name the request `req` (literals and patterns with a literal `*`).
fn atom(wrapped: bool, req: String) -> impl Strategy<Value = String> {
    let word = prop::sample::select(WORDS.to_vec());
    let lit = prop::collection::vec(word.clone(), 1..=3).prop_map(|w| w.join("/"));
    let pat = "[ab/*]{1,5}";
    let r = req.clone();
    let named = prop_oneof![
        Just(format!("resource.path == \"{r}\"")),
        Just(format!("resource.path != \"{r}\"")),
        Just(format!("resource == Tessera::Resource::\"svc:{r}\"")),
        naming(&req).prop_map(|p| format!("resource.path like \"{p}\"")),
    ];
    let path = if wrapped {
        path_expr().boxed()
    } else {
        Just("resource.path".to_string()).boxed()
    };
    let direct = prop_oneof![
        1 => (path.clone(), lit.clone()).prop_map(|(p, l)| format!("{p} == \"{l}\"")),
        1 => (path.clone(), pat).prop_map(|(p, l)| format!("{p} like \"{l}\"")),
        1 => lit.clone()
            .prop_map(|l| format!("resource == Tessera::Resource::\"svc:{l}\"")),
        1 => (path, lit.clone()).prop_map(|(p, l)| format!("{p} != \"{l}\"")),
        3 => named,
    ];
    if !wrapped {
        return direct.boxed();
    }
    let word = prop::sample::select(WORDS.to_vec());
    prop_oneof![
        6 => direct,
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

fn condition(wrapped: bool, req: String) -> impl Strategy<Value = String> {
    let a = || atom(wrapped, req.clone());
    prop_oneof![
        3 => a(),
        1 => a().prop_map(|a| format!("!({a})")),
        1 => (a(), a()).prop_map(|(a, b)| format!("({a}) && ({b})")),
        1 => (a(), a()).prop_map(|(a, b)| format!("({a}) || ({b})")),
    ]
}

#[derive(Debug, Clone, Copy)]
enum Effect {
    Permit,
    Approval,
    Forbid,
}

/// Random policies, some of whose conditions name the wildcard request `req`.
fn policy_set(wrapped: bool, req: String) -> impl Strategy<Value = Vec<(Effect, String)>> {
    let effect = prop_oneof![
        3 => Just(Effect::Permit),
        1 => Just(Effect::Approval),
        2 => Just(Effect::Forbid),
    ];
    prop::collection::vec((effect, condition(wrapped, req)), 1..6)
}

/// A wildcard request and policies some of whose conditions name it.
fn policies_and_request(wrapped: bool) -> impl Strategy<Value = (Vec<(Effect, String)>, String)> {
    request().prop_flat_map(move |req| (policy_set(wrapped, req.clone()), Just(req)))
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

/// Whether a condition drawn by [`atom`] may name the request `req` (a literal
/// spelled as it, or a pattern with a literal `*`).
fn names_request(cond: &str, req: &str) -> bool {
    cond.contains("\\*")
        || cond.contains(&format!("== \"{req}\""))
        || cond.contains(&format!("!= \"{req}\""))
        || cond.contains(&format!("\"svc:{req}\""))
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
    fn a_wildcard_is_issued_only_if_every_member_would_be((policies, req) in policies_and_request(true)) {
        let files = vec![("p.cedar".to_string(), text(&policies))];
        let engine = PolicyEngine::from_sources(&shipped_schema(), &files, ENTITIES)
            .unwrap_or_else(|e| panic!("{e}\n{}", files[0].1));
        let (labels, attrs) = (Vec::new(), BTreeMap::new());
        let decision = engine.decide(&ask(&req, &labels, &attrs));
        if issued(&decision) {
            // A plain permit that names the set grants the set, not its members
            // (docs/policy.md): a member may then fall outside every permit, but
            // it is never forbidden nor approval-gated.
            let named = policies.iter().any(|(effect, cond)| {
                matches!(effect, Effect::Permit) && names_request(cond, &req)
            });
            for member in universe().iter().filter(|m| glob_matches(&req, m)) {
                let one = engine.decide(&ask(member, &labels, &attrs));
                let no_permit =
                    matches!(one, PolicyDecision::Deny { rule: DenyRule::NoPermit, .. });
                prop_assert!(
                    issued(&one) || (named && no_permit),
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
    fn variants_agree_with_cedar_on_concrete_paths((policies, _) in policies_and_request(false), path in member()) {
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

/// Conditions that *name* a set (spelled exactly as the request, or matching it
/// with a literal `\*` at its wildcards) are false for every member: a member
/// never contains a wildcard character. Under `!`, `!=` or `unless` they hold for
/// every member, and a forbid or `@approval` permit written so applies to each of
/// them. Each is a policy clause (after the head) about `reports/*`.
const NAMED_NEGATED: [&str; 12] = [
    r#"when { resource.path like "reports/*" } unless { resource.path == "reports/*" }"#,
    r#"when { resource.path like "reports/*" } unless { resource == Tessera::Resource::"svc:reports/*" }"#,
    r#"when { !(resource.path like "reports/\*") }"#,
    r#"when { resource.path != "reports/*" }"#,
    r#"unless { resource.path like "*\*" }"#,
    r#"when { !(resource.path == "reports/*") }"#,
    r#"when { !(resource == Tessera::Resource::"svc:reports/*") }"#,
    r#"when { resource != Tessera::Resource::"svc:reports/*" }"#,
    r#"when { if resource.path == "reports/*" then false else true }"#,
    r#"when { (resource.path == "reports/*") == false }"#,
    r#"when { resource.path like "reports/*" } unless { resource.path like "reports/\*" }"#,
    r#"unless { resource.path like "*\**" || resource.path == "reports/*" }"#,
];

/// The same for `backend` of `kind`: which clauses let `set` through although
/// `member` is decided as `expect_member` on its own.
fn named_failures(
    gate: &str,
    permit: &str,
    clauses: &[&str],
    (backend, kind, member, set): (&str, &str, &str, &str),
    expect_member: fn(&PolicyDecision) -> bool,
) -> Vec<String> {
    let mut failed = Vec::new();
    for clause in clauses {
        let text = format!("{permit}\n{gate} (principal, action, resource) {clause};");
        let engine = match load(&text) {
            Ok(engine) => engine,
            Err(e) => {
                failed.push(format!("{clause}  =>  does not load: {e}"));
                continue;
            }
        };
        let (labels, attrs) = (Vec::new(), BTreeMap::new());
        let ask_kind = |path| PolicyRequest {
            backend,
            backend_kind: kind,
            ..ask(path, &labels, &attrs)
        };
        let one = engine.decide(&ask_kind(member));
        assert!(expect_member(&one), "{clause}: {member}: {one:?}");
        let whole = engine.decide(&ask_kind(set));
        if issued(&whole) {
            failed.push(format!("{clause}  =>  {whole:?}"));
        }
    }
    failed
}

fn forbidden(d: &PolicyDecision) -> bool {
    matches!(
        d,
        PolicyDecision::Deny {
            rule: DenyRule::Forbidden,
            ..
        }
    )
}

fn needs_approval(d: &PolicyDecision) -> bool {
    matches!(d, PolicyDecision::Allow { constraints, .. } if constraints.approval.is_some())
}

const TOKEN: (&str, &str, &str, &str) = ("svc", "token", "reports/a", "reports/*");

/// A forbid whose naming condition is negated applies to every member: the
/// wildcard is refused.
#[test]
fn a_negated_name_does_not_turn_a_forbid_off() {
    let failed = named_failures("forbid", REPORTS, &NAMED_NEGATED, TOKEN, forbidden);
    assert!(
        failed.is_empty(),
        "wildcards walked around a forbid:\n{}",
        failed.join("\n")
    );
}

/// The same for an `@approval` permit: every member needs approval.
#[test]
fn a_negated_name_does_not_turn_an_approval_off() {
    let failed = named_failures(
        "@approval(\"required\")\npermit",
        REPORTS,
        &NAMED_NEGATED,
        TOKEN,
        needs_approval,
    );
    assert!(
        failed.is_empty(),
        "wildcards walked around an approval:\n{}",
        failed.join("\n")
    );
}

const DB: (&str, &str, &str, &str) = (
    "pg-main",
    "postgres",
    "analytics.public.orders",
    "analytics.public.*",
);

/// A database `*` is granted by a permit that names it.
const DB_NAMED: &str =
    r#"permit (principal, action, resource) when { resource.path == "analytics.public.*" };"#;

const DB_NAMED_NEGATED: [&str; 6] = [
    r#"when { resource.path like "analytics.public.*" } unless { resource.path == "analytics.public.*" }"#,
    r#"when { resource.path like "analytics.public.*" } unless { resource.path like "analytics.public.\*" }"#,
    r#"when { resource.path != "analytics.public.*" }"#,
    r#"when { !(resource.path like "analytics.*.\*") }"#,
    r#"when { resource != Tessera::Resource::"pg-main:analytics.public.*" }"#,
    r#"when { resource.backend == "pg-main" } unless { resource.path like "*\*" }"#,
];

#[test]
fn a_negated_name_does_not_turn_a_database_forbid_or_approval_off() {
    let mut failed = named_failures("forbid", DB_NAMED, &DB_NAMED_NEGATED, DB, forbidden);
    failed.extend(named_failures(
        "@approval(\"required\")\npermit",
        DB_NAMED,
        &DB_NAMED_NEGATED,
        DB,
        needs_approval,
    ));
    assert!(
        failed.is_empty(),
        "database wildcards walked around a forbid or an approval:\n{}",
        failed.join("\n")
    );
}

/// A permit whose naming condition is negated holds for every member, so its
/// tighter `@ttl`, `@uses` and `@rate` bind the set (or the set is refused).
#[test]
fn a_negated_name_does_not_unbind_a_permits_constraints() {
    let cases = [
        (TOKEN, REPORTS, NAMED_NEGATED.as_slice()),
        (DB, DB_NAMED, DB_NAMED_NEGATED.as_slice()),
    ];
    let mut failed = Vec::new();
    for ((backend, kind, member, set), loose, clauses) in cases {
        for clause in clauses {
            let text = format!(
                "@ttl(\"1h\") @uses(\"50\") @rate(\"100/min\")\n{loose}\n\
                 @id(\"tight\") @ttl(\"5m\") @uses(\"2\") @rate(\"1/s\")\n\
                 permit (principal, action, resource) {clause};"
            );
            let engine = load(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            let (labels, attrs) = (Vec::new(), BTreeMap::new());
            let ask_kind = |path| PolicyRequest {
                backend,
                backend_kind: kind,
                ..ask(path, &labels, &attrs)
            };
            let tight = |d: &PolicyDecision| match d {
                PolicyDecision::Allow { constraints: c, .. } => {
                    c.ttl == Some((std::time::Duration::from_secs(300), "tight".into()))
                        && c.uses == Some((2, "tight".into()))
                        && c.rate
                            .as_ref()
                            .is_some_and(|(r, id)| r.to_string() == "1/s" && id == "tight")
                }
                _ => false,
            };
            let one = engine.decide(&ask_kind(member));
            assert!(tight(&one), "{clause}: {member}: {one:?}");
            let whole = engine.decide(&ask_kind(set));
            if issued(&whole) && !tight(&whole) {
                failed.push(format!("{set}: {clause}  =>  {whole:?}"));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "wildcards walked around a tighter permit:\n{}",
        failed.join("\n")
    );
}

/// Where the wildcard must be named (database `*`), a permit grants it only
/// because of a condition that names it, not because of one that holds for
/// every member anyway while a naming condition sits there negated.
#[test]
fn a_database_wildcard_is_granted_only_by_naming_it() {
    let (labels, attrs) = (Vec::new(), BTreeMap::new());
    let (backend, kind, _, set) = DB;
    let decide = |cond: &str| {
        let text = format!("permit (principal, action, resource) when {{ {cond} }};");
        let engine = load(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        engine.decide(&PolicyRequest {
            backend,
            backend_kind: kind,
            ..ask(set, &labels, &attrs)
        })
    };
    for cond in [
        r#"!(resource.path like "analytics.public.\*") || resource.backend == "pg-main""#,
        r#"resource.path != "analytics.public.*" || resource.backend == "pg-main""#,
        r#"resource.backend == "pg-main" || resource.path == "analytics.public.*""#,
        r#"resource.backend == "pg-main""#,
        r#"resource.path like "analytics.public.*""#,
    ] {
        let d = decide(cond);
        assert!(!issued(&d), "{cond}: {d:?}");
    }
    for cond in [
        r#"resource.path == "analytics.public.*""#,
        r#"resource.path like "analytics.*.\*" && resource.backend == "pg-main""#,
        r#"resource.path == "analytics.public.*" || resource.path == "analytics.public.orders""#,
        r#"resource == Tessera::Resource::"pg-main:analytics.public.*""#,
    ] {
        let d = decide(cond);
        assert!(issued(&d), "{cond}: {d:?}");
    }
}
