//! Tests of loading and evaluation, against small in-memory policy sets and the
//! shipped `policy/` directory.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use super::*;

pub(super) const SHIPPED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../policy");

pub(super) fn shipped_schema() -> String {
    std::fs::read_to_string(Path::new(SHIPPED).join("schema.cedarschema")).unwrap_or_default()
}

pub(super) const ENTITIES: &str = r#"[
  {"uid": {"type": "Tessera::Group", "id": "staff"}, "attrs": {}, "parents": []},
  {"uid": {"type": "Tessera::Group", "id": "analysts"}, "attrs": {},
   "parents": [{"type": "Tessera::Group", "id": "staff"}]},
  {"uid": {"type": "Tessera::User", "id": "alice"}, "attrs": {},
   "parents": [{"type": "Tessera::Group", "id": "analysts"}]}
]"#;

pub(super) fn engine(files: &[(&str, &str)]) -> Result<PolicyEngine, PolicyLoadError> {
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
    PolicyEngine::from_sources(&shipped_schema(), &files, ENTITIES)
}

pub(super) fn ok(files: &[(&str, &str)]) -> PolicyEngine {
    engine(files).unwrap_or_else(|e| panic!("load failed:\n{e}"))
}

pub(super) fn load_err(files: &[(&str, &str)]) -> Vec<PolicyDiagnostic> {
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
    arguments: Option<serde_json::Value>,
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
        arguments: None,
    }
}

fn eval(engine: &PolicyEngine, r: &Req) -> PolicyDecision {
    let attrs = BTreeMap::from([("repo".to_string(), "x".to_string())]);
    engine.decide(&PolicyRequest {
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
        arguments: r.arguments.as_ref(),
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
        PolicyDecision::Deny {
            policies, errors, ..
        } => (policies.clone(), errors.clone()),
        other => panic!("expected Deny, got {other:?}"),
    }
}

pub(super) fn at(d: &PolicyDiagnostic) -> (&str, usize, usize) {
    (d.file.as_str(), d.line, d.column)
}

pub(super) const READ_ALL: &str = r#"permit (principal in Tessera::Group::"staff", action == Tessera::Action::"read", resource);"#;

#[test]
fn engine_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<PolicyEngine>();
}

#[test]
fn shipped_directory_loads_and_decides() {
    let e = PolicyEngine::load_dir(Path::new(SHIPPED)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(e.policy_count(), 15);
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

    let deploy = |environment: &str| Req {
        arguments: Some(serde_json::json!({
            "service": "web", "commit": "4f2a9c1", "environment": environment
        })),
        ..req("bob", "invoke", "deployer", "prod")
    };
    let (ids, c) = allowed(&eval(&e, &deploy("staging")));
    assert_eq!(ids, ["deploys-need-a-human"]);
    assert_eq!(c.approval.as_deref(), Some("deploys-need-a-human"));
    assert_eq!(c.approvers(), "group:release-managers");
    assert_eq!(c.approval_ttl(), Duration::from_secs(900));
    // Production: both gates, so two release managers.
    let (ids, c) = allowed(&eval(&e, &deploy("production")));
    assert_eq!(ids, ["deploys-need-a-human", "prod-deploys-need-two"]);
    assert_eq!(
        c.approvers(),
        "2 of group:release-managers; group:release-managers"
    );
    // A deploy that does not say what it deploys is not permitted at all.
    denied(&eval(&e, &req("bob", "invoke", "deployer", "prod")));
    // Arguments the schema does not declare are not a request policy can see.
    let odd = Req {
        arguments: Some(serde_json::json!({"service": "web"})),
        ..req("bob", "invoke", "deployer", "prod")
    };
    let odd_req = PolicyRequest {
        user: odd.user,
        action: odd.action,
        backend: odd.backend,
        backend_kind: "token",
        path: odd.path,
        run_id: "run-1",
        run_labels: &[],
        task_id: "task-1",
        task_kind: "deploy",
        task_attributes: &BTreeMap::new(),
        runtime: "rt",
        requested_ttl: None,
        now_unix: 0,
        arguments: odd.arguments.as_ref(),
    };
    assert!(e.check_arguments(&odd_req).is_err());
    let escape = serde_json::json!({"service": {"__entity": {"type": "Tessera::User", "id": "dana"}}, "commit": "x", "environment": "y"});
    let escape_req = PolicyRequest {
        arguments: Some(&escape),
        ..odd_req
    };
    let why = e.check_arguments(&escape_req).unwrap_err();
    assert!(why.contains("reserved"), "{why}");

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

    // databases.cedar: strictest of the two satisfied permits; `*` only when named.
    let (ids, c) = allowed(&eval(
        &e,
        &req("alice", "select", "pg-main", "analytics.public.orders"),
    ));
    assert_eq!(ids, ["analysts-select-analytics", "analysts-select-orders"]);
    assert_eq!(c.uses, Some((3, "analysts-select-orders".into())));
    let all_tables = |path: &'static str| {
        let attrs = BTreeMap::new();
        let r = req("alice", "select", "pg-main", path);
        e.decide(&PolicyRequest {
            user: r.user,
            action: r.action,
            backend: r.backend,
            backend_kind: "postgres",
            path: r.path,
            run_id: "run-1",
            run_labels: &[],
            task_id: "task-1",
            task_kind: r.task_kind,
            task_attributes: &attrs,
            runtime: "rt",
            requested_ttl: None,
            now_unix: 1_767_225_600,
            arguments: None,
        })
    };
    assert!(
        matches!(
            all_tables("analytics.public.*"),
            PolicyDecision::Deny { .. }
        ),
        "like \"analytics.public.*\" does not name the wildcard"
    );
    let (ids, _) = allowed(&all_tables("reporting.public.*"));
    assert_eq!(ids, ["analysts-select-reporting-schema"]);

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

/// Measures evaluation time on the shipped policy set:
/// `cargo test --release -- --ignored --nocapture evaluation_speed`.
#[test]
#[ignore]
fn evaluation_speed() {
    let e = PolicyEngine::load_dir(Path::new(SHIPPED)).unwrap_or_else(|e| panic!("{e}"));
    let allow = req("alice", "read", "svc-reports", "reports/public/a");
    let deny = req("carol", "select", "pg-main", "analytics.public.orders");
    // A set: every policy's path conditions decided against the pattern, then
    // Cedar over the variants for each assignment of the unknown ones.
    let set = req("alice", "read", "svc-reports", "reports/*");
    let n = 20_000u32;
    for (name, r) in [("allow", &allow), ("deny", &deny), ("wildcard allow", &set)] {
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

/// The entity-slice cache changes no decision: a second evaluation of the same
/// request agrees with the first, and requests that differ only in the user, the
/// path, the backend kind or the action never share a slice.
#[test]
fn cached_entity_slices_are_exact() {
    let e = ok(&[(
        "p.cedar",
        r#"permit (principal in Tessera::Group::"analysts", action == Tessera::Action::"read", resource)
           when { resource.kind == "token" && resource.path like "reports/*" };"#,
    )]);
    let alice = req("alice", "read", "svc", "reports/a");
    for _ in 0..2 {
        allowed(&eval(&e, &alice));
        // Same resource, a user in no group.
        denied(&eval(&e, &req("mallory", "read", "svc", "reports/a")));
        // Same user, another path.
        denied(&eval(&e, &req("alice", "read", "svc", "secrets/a")));
        // Same user and path, another action.
        denied(&eval(&e, &req("alice", "write", "svc", "reports/a")));
    }
    // Same user and path, another backend kind: the kind is part of the key.
    let attrs = BTreeMap::new();
    let other_kind = PolicyRequest {
        user: "alice",
        action: "read",
        backend: "svc",
        backend_kind: "postgres",
        path: "reports/a",
        run_id: "run-1",
        run_labels: &[],
        task_id: "task-1",
        task_kind: "summarize",
        task_attributes: &attrs,
        runtime: "rt",
        requested_ttl: None,
        now_unix: 1_767_225_600,
        arguments: None,
    };
    denied(&e.decide(&other_kind));
    // "a" + "b:c" and "a:b" + "c" must not collide (parts are length-prefixed).
    let split = |backend, path| PolicyRequest {
        backend,
        path,
        ..other_kind
    };
    denied(&e.decide(&split("svc:reports", "a")));
    // Past the bound the cache starts over and still answers right.
    for i in 0..context::ENTITIES_CACHE_MAX + 10 {
        let path = format!("reports/{i}");
        let r = PolicyRequest {
            backend_kind: "token",
            path: &path,
            ..other_kind
        };
        allowed(&e.decide(&r));
    }
    allowed(&eval(&e, &alice));
}
