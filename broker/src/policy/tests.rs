//! Tests of loading and evaluation, against small in-memory policy sets and the
//! shipped `policy/` directory.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use super::*;

const SHIPPED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../policy");

fn shipped_schema() -> String {
    std::fs::read_to_string(Path::new(SHIPPED).join("schema.cedarschema")).unwrap_or_default()
}

const ENTITIES: &str = r#"[
  {"uid": {"type": "Tessera::Group", "id": "staff"}, "attrs": {}, "parents": []},
  {"uid": {"type": "Tessera::Group", "id": "analysts"}, "attrs": {},
   "parents": [{"type": "Tessera::Group", "id": "staff"}]},
  {"uid": {"type": "Tessera::User", "id": "alice"}, "attrs": {},
   "parents": [{"type": "Tessera::Group", "id": "analysts"}]}
]"#;

fn engine(files: &[(&str, &str)]) -> Result<PolicyEngine, PolicyLoadError> {
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
    PolicyEngine::from_sources(&shipped_schema(), &files, ENTITIES)
}

fn ok(files: &[(&str, &str)]) -> PolicyEngine {
    engine(files).unwrap_or_else(|e| panic!("load failed:\n{e}"))
}

fn load_err(files: &[(&str, &str)]) -> Vec<PolicyDiagnostic> {
    match engine(files) {
        Ok(_) => panic!("load should fail"),
        Err(e) => e.diagnostics,
    }
}

struct Req {
    user: &'static str,
    action: &'static str,
    backend: &'static str,
    path: &'static str,
    task_kind: &'static str,
    labels: Vec<String>,
    ttl: Option<Duration>,
}

fn req(user: &'static str, action: &'static str, backend: &'static str, path: &'static str) -> Req {
    Req {
        user,
        action,
        backend,
        path,
        task_kind: "summarize",
        labels: vec![],
        ttl: None,
    }
}

fn eval(engine: &PolicyEngine, r: &Req) -> PolicyDecision {
    let attrs = BTreeMap::from([("repo".to_string(), "x".to_string())]);
    engine.evaluate(&PolicyRequest {
        user: r.user,
        action: r.action,
        backend: r.backend,
        backend_kind: "token",
        path: r.path,
        run_id: "run-1",
        run_labels: &r.labels,
        task_id: "task-1",
        task_kind: r.task_kind,
        task_attributes: &attrs,
        runtime: "rt",
        requested_ttl: r.ttl,
        now_unix: 1_767_225_600,
    })
}

fn allowed(d: &PolicyDecision) -> (Vec<String>, Constraints) {
    match d {
        PolicyDecision::Allow {
            policies,
            constraints,
        } => (policies.clone(), constraints.clone()),
        other => panic!("expected Allow, got {other:?}"),
    }
}

fn denied(d: &PolicyDecision) -> (Vec<String>, Vec<String>) {
    match d {
        PolicyDecision::Deny { policies, errors } => (policies.clone(), errors.clone()),
        other => panic!("expected Deny, got {other:?}"),
    }
}

fn at(d: &PolicyDiagnostic) -> (&str, usize, usize) {
    (d.file.as_str(), d.line, d.column)
}

const READ_ALL: &str = r#"permit (principal in Tessera::Group::"staff", action == Tessera::Action::"read", resource);"#;

#[test]
fn engine_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<PolicyEngine>();
}

#[test]
fn shipped_directory_loads_and_decides() {
    let e = PolicyEngine::load_dir(Path::new(SHIPPED)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(e.policy_count(), 6);
    assert!(e.is_known_action("s3:GetObject") && e.is_known_action("select"));
    assert!(!e.is_known_action("deploy"));

    let (ids, c) = allowed(&eval(
        &e,
        &req("alice", "read", "svc-reports", "reports/q1"),
    ));
    assert_eq!(ids, ["analysts-read-reports"]);
    assert_eq!(
        c.ttl,
        Some((Duration::from_secs(900), "analysts-read-reports".into()))
    );
    assert_eq!(c.uses, Some((20, "analysts-read-reports".into())));
    assert_eq!(c.approval, None);

    // Strictest across two satisfied permits, each constraint from its own policy.
    let (ids, c) = allowed(&eval(
        &e,
        &req("alice", "read", "svc-reports", "reports/public/a"),
    ));
    assert_eq!(ids, ["analysts-read-reports", "staff-read-public-reports"]);
    assert_eq!(c.ttl.map(|t| t.1), Some("analysts-read-reports".into()));
    assert_eq!(
        c.rate.map(|(r, id)| (r.to_string(), id)),
        Some(("10/min".into(), "staff-read-public-reports".into()))
    );

    let (ids, c) = allowed(&eval(&e, &req("bob", "invoke", "deployer", "prod")));
    assert_eq!(ids, ["deploys-need-a-human"]);
    assert_eq!(c.approval.as_deref(), Some("deploys-need-a-human"));

    assert!(allowed(&eval(
        &e,
        &req("alice", "select", "pg-main", "analytics.public.orders")
    ))
    .1
    .uses
    .is_some());
    let mut other_task = req("alice", "select", "pg-main", "analytics.public.orders");
    other_task.task_kind = "chat";
    assert_eq!(denied(&eval(&e, &other_task)), (vec![], vec![]));
    assert_eq!(
        denied(&eval(
            &e,
            &req("carol", "read", "svc-reports", "reports/q1")
        )),
        (vec![], vec![])
    );

    let mut tainted = req("alice", "read", "svc-reports", "reports/q1");
    tainted.labels = vec!["untrusted-input".into()];
    assert_eq!(denied(&eval(&e, &tainted)).0, ["guard-untrusted-input"]);
    let mut long = req("alice", "read", "svc-reports", "reports/q1");
    long.ttl = Some(Duration::from_secs(2 * 86_400));
    assert_eq!(denied(&eval(&e, &long)).0, ["guard-no-long-ttl-requests"]);
}

#[test]
fn strictest_wins_across_two_permits() {
    let e = ok(&[(
        "a.cedar",
        r#"@id("loose") @ttl("1h") @uses("50") @rate("100/min")
           permit (principal, action == Tessera::Action::"read", resource);
           @id("tight") @ttl("5m") @uses("100") @rate("1/s") @approval("required")
           permit (principal, action == Tessera::Action::"read", resource);"#,
    )]);
    let (ids, c) = allowed(&eval(&e, &req("zed", "read", "b", "p")));
    assert_eq!(ids, ["loose", "tight"]);
    assert_eq!(c.ttl, Some((Duration::from_secs(300), "tight".into())));
    assert_eq!(c.uses, Some((50, "loose".into())));
    assert_eq!(
        c.rate.map(|(r, id)| (r.to_string(), id)),
        Some(("1/s".into(), "tight".into()))
    );
    assert_eq!(c.approval.as_deref(), Some("tight"));
}

#[test]
fn forbid_beats_permit() {
    let e = ok(&[
        ("a.cedar", READ_ALL),
        (
            "b.cedar",
            r#"forbid (principal, action, resource) when { resource.path like "secret/*" };"#,
        ),
    ]);
    assert!(matches!(
        eval(&e, &req("alice", "read", "b", "open/x")),
        PolicyDecision::Allow { .. }
    ));
    assert_eq!(
        denied(&eval(&e, &req("alice", "read", "b", "secret/x"))).0,
        ["b#0"]
    );
}

#[test]
fn nested_groups_and_unknown_users() {
    let e = ok(&[("a.cedar", READ_ALL)]);
    // alice is in analysts, which is in staff.
    assert_eq!(
        allowed(&eval(&e, &req("alice", "read", "b", "p"))).0,
        ["a#0"]
    );
    // A user absent from entities.json is in no group.
    assert_eq!(
        denied(&eval(&e, &req("mallory", "read", "b", "p"))),
        (vec![], vec![])
    );
    assert_eq!(
        e.users.get("alice").map(|u| u.uid().to_string()),
        Some(r#"Tessera::User::"alice""#.into())
    );
}

#[test]
fn unknown_action_is_denied_with_an_error() {
    let e = ok(&[("a.cedar", READ_ALL)]);
    assert_eq!(
        denied(&eval(&e, &req("alice", "frobnicate", "b", "p"))),
        (vec![], vec!["unknown action".into()])
    );
}

#[test]
fn duplicate_ids_name_both_files() {
    let p = r#"@id("same") permit (principal, action, resource);"#;
    let d = load_err(&[("one.cedar", p), ("two.cedar", p)]);
    assert_eq!(d.len(), 1);
    let msg = d.first().map(|d| d.to_string()).unwrap_or_default();
    assert!(
        msg.starts_with("two.cedar:1:1: error:") && msg.contains("one.cedar"),
        "{msg}"
    );
}

#[test]
fn annotation_errors_point_at_the_annotation() {
    let text = "permit (principal, action, resource);\n\n@id(\"x\")\n  @ttl(\"forever\")\npermit (principal, action, resource);\n\n@color(\"red\") permit (principal, action, resource);\n// ok\nforbid (principal, action, resource);\n@uses(\"3\") forbid (principal, action, resource);\n";
    let d = load_err(&[("p/a.cedar", text)]);
    let got: Vec<_> = d.iter().map(at).collect();
    assert_eq!(
        got,
        [
            ("p/a.cedar", 4, 3),
            ("p/a.cedar", 7, 1),
            ("p/a.cedar", 10, 1)
        ],
        "{d:?}"
    );
    assert!(d.iter().all(|d| !d.message.is_empty()));
    assert!(d.first().is_some_and(|d| d.message.contains("@ttl")));
}

#[test]
fn schema_invalid_policy_reports_file_line_col() {
    let text = "@id(\"ok\") permit (principal, action, resource);\n\npermit (principal, action, resource)\nwhen { resource.nosuchattr == \"x\" };\n";
    let d = load_err(&[("a.cedar", READ_ALL), ("b.cedar", text)]);
    assert_eq!(d.len(), 1, "{d:?}");
    let first = d
        .first()
        .map(|d| (d.file.clone(), d.line, d.column, d.to_string()));
    let (file, line, col, shown) = first.unwrap_or_default();
    assert_eq!((file.as_str(), line, col), ("b.cedar", 4, 8), "{shown}");
    assert!(shown.contains("nosuchattr"), "{shown}");
}

#[test]
fn parse_errors_and_templates_are_located() {
    let d = load_err(&[(
        "a.cedar",
        "permit (principal, action, resource)\nwhen { 1 + };",
    )]);
    assert_eq!(
        d.first().map(|d| (d.line, d.column > 0)),
        Some((2, true)),
        "{d:?}"
    );
    let d = load_err(&[(
        "t.cedar",
        "\n permit (principal == ?principal, action, resource);",
    )]);
    assert_eq!(d.iter().map(at).collect::<Vec<_>>(), [("t.cedar", 2, 2)]);
    let d = load_err(&[(
        "u.cedar",
        r#"permit (principal, action == Tessera::Action::"nope", resource);"#,
    )]);
    assert_eq!(d.len(), 1);
    assert!(
        d.first()
            .is_some_and(|d| d.line == 1 && d.to_string().contains("nope")),
        "{d:?}"
    );
}

#[test]
fn bad_schema_and_entities_are_reported() {
    let err = PolicyEngine::from_sources("namespace {", &[], "[]").err();
    let d = err.map(|e| e.diagnostics).unwrap_or_default();
    assert!(
        d.first()
            .is_some_and(|d| d.file == "schema.cedarschema" && d.line == 1),
        "{d:?}"
    );
    let bad_entities =
        r#"[{"uid": {"type": "Tessera::Nope", "id": "x"}, "attrs": {}, "parents": []}]"#;
    let err = PolicyEngine::from_sources(&shipped_schema(), &[], bad_entities).err();
    assert!(err.is_some_and(|e| e.to_string().starts_with("entities.json:")));
}

/// Measures evaluation time on the shipped policy set:
/// `cargo test --release -- --ignored --nocapture evaluation_speed`.
#[test]
#[ignore]
fn evaluation_speed() {
    let e = PolicyEngine::load_dir(Path::new(SHIPPED)).unwrap_or_else(|e| panic!("{e}"));
    let allow = req("alice", "read", "svc-reports", "reports/public/a");
    let deny = req("carol", "select", "pg-main", "analytics.public.orders");
    let n = 20_000u32;
    for (name, r) in [("allow", &allow), ("deny", &deny)] {
        let start = Instant::now();
        for _ in 0..n {
            std::hint::black_box(eval(&e, r));
        }
        println!(
            "{name}: {:.1} µs/evaluation",
            start.elapsed().as_secs_f64() * 1e6 / f64::from(n)
        );
    }
}

#[test]
#[ignore]
fn tmp_breakdown() {
    let e = PolicyEngine::load_dir(Path::new(SHIPPED)).unwrap_or_else(|e| panic!("{e}"));
    let attrs = BTreeMap::from([("repo".to_string(), "x".to_string())]);
    let labels: Vec<String> = vec![];
    let r = PolicyRequest {
        user: "alice", action: "read", backend: "svc-reports", backend_kind: "token", path: "reports/public/a",
        run_id: "run-1", run_labels: &labels, task_id: "t", task_kind: "summarize", task_attributes: &attrs,
        runtime: "rt", requested_ttl: None, now_unix: 0,
    };
    let n = 20_000u32;
    let action = e.actions.get("read").cloned().unwrap_or_else(|| panic!());
    let t = Instant::now();
    for _ in 0..n { std::hint::black_box(context::build(&e, &r, &action).ok()); }
    println!("build: {:.1}", t.elapsed().as_secs_f64() * 1e6 / f64::from(n));
    let (req, ents) = context::build(&e, &r, &action).unwrap_or_else(|_| panic!());
    let t = Instant::now();
    for _ in 0..n { std::hint::black_box(e.authorizer.is_authorized(&req, &e.policies, &ents)); }
    println!("authorize: {:.1}", t.elapsed().as_secs_f64() * 1e6 / f64::from(n));
    let t = Instant::now();
    for _ in 0..n { std::hint::black_box(cedar_policy::Entities::from_entities([action.clone()], None).ok()); }
    println!("entities: {:.1}", t.elapsed().as_secs_f64() * 1e6 / f64::from(n));
    let t = Instant::now();
    for _ in 0..n { std::hint::black_box(cedar_policy::Request::new(req.principal().cloned().unwrap_or_else(|| panic!()), action.uid(), req.resource().cloned().unwrap_or_else(|| panic!()), cedar_policy::Context::empty(), None).ok()); }
    println!("request no schema: {:.1}", t.elapsed().as_secs_f64() * 1e6 / f64::from(n));
}

#[test]
#[ignore]
fn tmp_breakdown2() {
    use cedar_policy::{Context, RestrictedExpression as RE, Request};
    let e = PolicyEngine::load_dir(Path::new(SHIPPED)).unwrap_or_else(|e| panic!("{e}"));
    let n = 20_000u32;
    let action = e.actions.get("read").cloned().unwrap_or_else(|| panic!());
    let s = |v: &str| RE::new_string(v.to_string());
    let mk = || Context::from_pairs([
        ("run".to_string(), RE::new_record([("id".to_string(), s("r")), ("labels".to_string(), RE::new_set([]))]).unwrap_or_else(|_| panic!())),
        ("task".to_string(), RE::new_record([("id".to_string(), s("r")), ("kind".to_string(), s("k")), ("attributes".to_string(), RE::new_set([s("a=b")]))]).unwrap_or_else(|_| panic!())),
        ("runtime".to_string(), s("rt")),
        ("requested_ttl".to_string(), RE::new_long(0)),
        ("now".to_string(), RE::new_long(0)),
    ]).unwrap_or_else(|_| panic!());
    let t = Instant::now();
    for _ in 0..n { std::hint::black_box(mk()); }
    println!("context: {:.1}", t.elapsed().as_secs_f64() * 1e6 / f64::from(n));
    let p = cedar_policy::EntityUid::from_type_name_and_id(e.user_type.clone(), cedar_policy::EntityId::new("alice"));
    let r = cedar_policy::EntityUid::from_type_name_and_id(e.resource_type.clone(), cedar_policy::EntityId::new("x:y"));
    let t = Instant::now();
    for _ in 0..n { std::hint::black_box(Request::new(p.clone(), action.uid(), r.clone(), mk(), Some(&e.schema)).ok()); }
    println!("context+request schema: {:.1}", t.elapsed().as_secs_f64() * 1e6 / f64::from(n));
    let t = Instant::now();
    for _ in 0..n { std::hint::black_box(Request::new(p.clone(), action.uid(), r.clone(), mk(), None).ok()); }
    println!("context+request no schema: {:.1}", t.elapsed().as_secs_f64() * 1e6 / f64::from(n));
}

#[test]
#[ignore]
fn tmp_breakdown3() {
    use cedar_policy::{RestrictedExpression as RE};
    use std::collections::HashSet;
    let e = PolicyEngine::load_dir(Path::new(SHIPPED)).unwrap_or_else(|e| panic!("{e}"));
    let n = 20_000u32;
    let action = e.actions.get("read").cloned().unwrap_or_else(|| panic!());
    let user = e.users.get("alice").cloned().unwrap_or_else(|| panic!());
    let s = |v: &str| RE::new_string(v.to_string());
    let r = cedar_policy::EntityUid::from_type_name_and_id(e.resource_type.clone(), cedar_policy::EntityId::new("x:y"));
    let mkr = || Entity::new(r.clone(), [("backend".to_string(), s("b")), ("kind".to_string(), s("k")), ("path".to_string(), s("p"))].into_iter().collect(), HashSet::new()).unwrap_or_else(|_| panic!());
    let t = Instant::now();
    for _ in 0..n { std::hint::black_box(mkr()); }
    println!("resource entity: {:.1}", t.elapsed().as_secs_f64() * 1e6 / f64::from(n));
    let t = Instant::now();
    for _ in 0..n { std::hint::black_box(user.clone()); }
    println!("user clone: {:.1}", t.elapsed().as_secs_f64() * 1e6 / f64::from(n));
    let t = Instant::now();
    for _ in 0..n { std::hint::black_box(cedar_policy::Entities::from_entities([user.clone(), mkr(), action.clone()], None).ok()); }
    println!("all entities: {:.1}", t.elapsed().as_secs_f64() * 1e6 / f64::from(n));
}

#[test]
#[ignore]
fn tmp_breakdown4() {
    use cedar_policy::{RestrictedExpression as RE};
    use std::collections::HashSet;
    let e = PolicyEngine::load_dir(Path::new(SHIPPED)).unwrap_or_else(|e| panic!("{e}"));
    let n = 20_000u32;
    let user = e.users.get("alice").cloned().unwrap_or_else(|| panic!());
    let s = |v: &str| RE::new_string(v.to_string());
    let r = cedar_policy::EntityUid::from_type_name_and_id(e.resource_type.clone(), cedar_policy::EntityId::new("x:y"));
    let mkr = || Entity::new(r.clone(), [("backend".to_string(), s("b")), ("kind".to_string(), s("k")), ("path".to_string(), s("p"))].into_iter().collect(), HashSet::new()).unwrap_or_else(|_| panic!());
    let t = Instant::now();
    for _ in 0..n { std::hint::black_box(cedar_policy::Entities::from_entities([user.clone()], None).ok()); }
    println!("user only: {:.1}", t.elapsed().as_secs_f64() * 1e6 / f64::from(n));
    let t = Instant::now();
    for _ in 0..n { std::hint::black_box(cedar_policy::Entities::from_entities([mkr()], None).ok()); }
    println!("resource only: {:.1}", t.elapsed().as_secs_f64() * 1e6 / f64::from(n));
    let t = Instant::now();
    for _ in 0..n { std::hint::black_box(cedar_policy::Entities::from_entities([user.clone(), mkr()], None).ok()); }
    println!("user+resource: {:.1}", t.elapsed().as_secs_f64() * 1e6 / f64::from(n));
}
