//! The decision cache never answers what an uncached evaluation would not:
//! random requests, repeated and varied one field at a time, against a set that
//! reads most of the context; a set that reads the time is not cached; the cache
//! stays bounded.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::decision_cache::{DECISIONS_MAX, KEY_BYTES_MAX};
use super::tests::{ok, SHIPPED};
use super::*;

/// Reads run.id, run.labels, task.id, task.kind, task.attributes, runtime and
/// requested_ttl (never now), with permits, forbids, an `@approval` permit and
/// path conditions, so wildcard requests are decided by the set rule. Each
/// field (and the backend) also has a permit of its own, so that a key missing
/// it is caught by the property test below.
const READS_CONTEXT: &str = r#"
@id("untrusted-labels") forbid (principal, action, resource)
  when { context.run.labels.contains("untrusted") };
@id("trusted-data") @ttl("5m") permit (principal, action == Tessera::Action::"read", resource)
  when { context.run.labels.contains("trusted") && resource.path like "data/*" };
@id("summaries") @ttl("10m") @uses("5")
permit (principal in Tessera::Group::"staff", action == Tessera::Action::"read", resource)
  when { context.task.kind == "summarize" && resource.path like "reports/*" };
@id("data-team-writes") @uses("3") permit (principal, action == Tessera::Action::"write", resource)
  when { context.task.attributes.contains("team=data") && resource.path like "out/*" };
@id("ci-deploys") @approval("group:staff") permit (principal, action, resource)
  when { context.runtime == "ci" && resource.path == "deploy" };
@id("run-and-task") @rate("10/min") permit (principal, action == Tessera::Action::"read", resource)
  when { context.run.id == "r1" && context.task.id == "t1" };
@id("path-is-task") permit (principal, action == Tessera::Action::"read", resource)
  when { resource.path == context.task.id };
@id("long-ttl") forbid (principal, action, resource) when { context.requested_ttl > 3600 };
@id("short-for-bob") @ttl("1h") permit (principal == Tessera::User::"bob", action, resource)
  when { context.requested_ttl <= 600 };
@id("secret") forbid (principal, action, resource) when { resource.path == "reports/secret" };
@id("run-r1") permit (principal, action, resource) when { context.run.id == "r1" };
@id("task-t1") @uses("7") permit (principal, action, resource) when { context.task.id == "t1" };
@id("team-data") @ttl("2m") permit (principal, action, resource)
  when { context.task.attributes.contains("team=data") };
@id("runtime-ci") permit (principal, action, resource) when { context.runtime == "ci" };
@id("kind-deploy") @rate("5/min") permit (principal, action, resource)
  when { context.task.kind == "deploy" };
@id("on-db") permit (principal, action, resource) when { resource.backend == "db" };
@id("svc-out") permit (principal, action, resource == Tessera::Resource::"svc:out/x");
"#;

/// One request, owned.
#[derive(Debug, Clone)]
struct Ask {
    user: &'static str,
    action: &'static str,
    backend: &'static str,
    backend_kind: &'static str,
    path: &'static str,
    run_id: &'static str,
    run_labels: Vec<String>,
    task_id: &'static str,
    task_kind: &'static str,
    task_attributes: BTreeMap<String, String>,
    runtime: &'static str,
    requested_ttl: Option<Duration>,
    now_unix: i64,
}

/// Fields of [`Ask`], for varying one at a time.
const FIELDS: usize = 13;

impl Ask {
    fn request(&self) -> PolicyRequest<'_> {
        PolicyRequest {
            user: self.user,
            action: self.action,
            backend: self.backend,
            backend_kind: self.backend_kind,
            path: self.path,
            run_id: self.run_id,
            run_labels: &self.run_labels,
            task_id: self.task_id,
            task_kind: self.task_kind,
            task_attributes: &self.task_attributes,
            runtime: self.runtime,
            requested_ttl: self.requested_ttl,
            now_unix: self.now_unix,
            arguments: None,
        }
    }

    /// This request with field `n` taken from `other`.
    fn with_field_of(&self, n: usize, other: &Ask) -> Ask {
        let mut out = self.clone();
        match n {
            0 => out.user = other.user,
            1 => out.action = other.action,
            2 => out.backend = other.backend,
            3 => out.backend_kind = other.backend_kind,
            4 => out.path = other.path,
            5 => out.run_id = other.run_id,
            6 => out.run_labels = other.run_labels.clone(),
            7 => out.task_id = other.task_id,
            8 => out.task_kind = other.task_kind,
            9 => out.task_attributes = other.task_attributes.clone(),
            10 => out.runtime = other.runtime,
            11 => out.requested_ttl = other.requested_ttl,
            _ => out.now_unix = other.now_unix,
        }
        out
    }
}

fn one_of(values: &[&'static str]) -> impl Strategy<Value = &'static str> {
    prop::sample::select(values.to_vec())
}

fn ask() -> impl Strategy<Value = Ask> {
    let who = (
        one_of(&["alice", "bob", "carol"]),
        one_of(&["read", "read", "write", "invoke", "no-such-action"]),
        one_of(&["svc", "db"]),
        one_of(&["token", "postgres"]),
        one_of(&[
            "reports/a",
            "reports/secret",
            "reports/*",
            "reports/s*",
            "data/1",
            "data/*",
            "out/x",
            "out/*",
            "deploy",
            "t1",
            "*",
        ]),
    );
    let run = (
        one_of(&["r1", "r2"]),
        // Order and repeats included: a set to Cedar, a sequence to the key.
        prop::collection::vec(one_of(&["untrusted", "trusted", "x"]), 0..3)
            .prop_map(|v| v.into_iter().map(String::from).collect::<Vec<_>>()),
        one_of(&["t1", "t2", "data/1"]),
        one_of(&["summarize", "deploy"]),
        prop::collection::btree_map(
            one_of(&["team", "env"]).prop_map(String::from),
            one_of(&["data", "web", "prod"]).prop_map(String::from),
            0..3,
        ),
    );
    let rest = (
        one_of(&["ci", "local"]),
        prop::option::of(prop::sample::select(vec![
            Duration::ZERO,
            Duration::from_millis(600_500),
            Duration::from_secs(600),
            Duration::from_secs(601),
            Duration::from_secs(3600),
            Duration::from_secs(3601),
        ])),
        prop::sample::select(vec![0i64, 1_767_225_600, i64::MAX]),
    );
    (who, run, rest).prop_map(
        |(
            (user, action, backend, backend_kind, path),
            (run_id, run_labels, task_id, task_kind, task_attributes),
            (runtime, requested_ttl, now_unix),
        )| Ask {
            user,
            action,
            backend,
            backend_kind,
            path,
            run_id,
            run_labels,
            task_id,
            task_kind,
            task_attributes,
            runtime,
            requested_ttl,
            now_unix,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A request, then variants of it that differ from it in one field each,
    /// then all of them again: every answer of `decide` (cached after the first
    /// time) is the uncached evaluation's.
    #[test]
    fn cached_decisions_equal_uncached_ones(
        base in ask(),
        changes in prop::collection::vec((0..FIELDS, ask()), 0..12),
    ) {
        let engine = ok(&[("p.cedar", READS_CONTEXT)]);
        prop_assert_eq!(engine.decision_cache_disabled(), None);
        let mut asks = vec![base.clone()];
        asks.extend(changes.iter().map(|(n, other)| base.with_field_of(*n, other)));
        for a in asks.iter().chain(&asks) {
            let req = a.request();
            let cached = engine.decide(&req);
            let fresh = engine.decide_uncached(&req);
            prop_assert_eq!(&cached, &fresh, "{:?}", a);
        }
    }
}

#[test]
fn the_analysed_fields_are_the_ones_read() {
    let engine = ok(&[("p.cedar", READS_CONTEXT)]);
    assert_eq!(
        engine.decision_cache_summary(),
        "on, keyed on context fields: run.id, run.labels, task.id, task.kind, \
         task.attributes, runtime, requested_ttl"
    );
    // `path-is-task` reads task.id in a path condition, which its wildcard
    // variant replaces by an atom: the policy itself still counts.
    let engine = ok(&[(
        "p.cedar",
        r#"permit (principal, action, resource) when { resource.path == context.task.id };"#,
    )]);
    assert_eq!(
        engine.decision_cache_summary(),
        "on, keyed on context fields: task.id"
    );
    let shipped = PolicyEngine::load_dir(Path::new(SHIPPED)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        shipped.decision_cache_summary(),
        "on, keyed on context fields: run.labels, task.kind, requested_ttl"
    );
}

fn at(now_unix: i64, labels: &[String]) -> PolicyRequest<'_> {
    static ATTRS: BTreeMap<String, String> = BTreeMap::new();
    PolicyRequest {
        user: "alice",
        action: "read",
        backend: "svc",
        backend_kind: "token",
        path: "reports/a",
        run_id: "r1",
        run_labels: labels,
        task_id: "t1",
        task_kind: "summarize",
        task_attributes: &ATTRS,
        runtime: "ci",
        requested_ttl: None,
        now_unix,
        arguments: None,
    }
}

#[test]
fn a_set_that_reads_the_time_is_not_cached() {
    let engine = ok(&[(
        "p.cedar",
        r#"@id("office-hours") permit (principal, action, resource) when { context.now < 1000 };
           @id("plain") permit (principal, action, resource) when { context.runtime == "ci" };"#,
    )]);
    assert_eq!(
        engine.decision_cache_disabled(),
        Some(r#"policy "office-hours" reads context.now"#)
    );
    let allowed_by = |now| match engine.decide(&at(now, &[])) {
        PolicyDecision::Allow { policies, .. } => policies,
        other => panic!("{other:?}"),
    };
    for _ in 0..2 {
        assert_eq!(allowed_by(999), ["office-hours", "plain"]);
        assert_eq!(allowed_by(1000), ["plain"]);
    }
    assert_eq!(engine.decisions.len(), 0);

    // `context` read whole reads the time too.
    let engine = ok(&[(
        "p.cedar",
        r#"@id("whole") permit (principal, action, resource) when { context == context };"#,
    )]);
    assert_eq!(
        engine.decision_cache_disabled(),
        Some(r#"policy "whole" can read all of context, context.now with it"#)
    );
}

#[test]
fn runs_that_differ_only_in_labels_get_their_own_decisions() {
    let engine = ok(&[(
        "p.cedar",
        r#"@id("ok") permit (principal, action, resource);
           @id("untrusted") forbid (principal, action, resource)
             when { context.run.labels.contains("untrusted") };"#,
    )]);
    let (clean, tainted) = (vec!["a".to_string()], vec!["untrusted".to_string()]);
    for path in ["reports/a", "reports/*"] {
        let (clean, tainted) = (
            PolicyRequest {
                path,
                ..at(0, &clean)
            },
            PolicyRequest {
                path,
                ..at(0, &tainted)
            },
        );
        for _ in 0..2 {
            assert!(matches!(
                engine.decide(&clean),
                PolicyDecision::Allow { .. }
            ));
            assert!(
                matches!(
                    engine.decide(&tainted),
                    PolicyDecision::Deny { rule: DenyRule::Forbidden, ref policies, .. }
                        if policies == &["untrusted"]
                ),
                "{path}"
            );
        }
    }
    assert_eq!(engine.decisions.len(), 4);
}

#[test]
fn requests_with_arguments_are_not_cached() {
    let engine = PolicyEngine::load_dir(Path::new(SHIPPED)).unwrap_or_else(|e| panic!("{e}"));
    let arguments = serde_json::json!({"service": "web", "commit": "4f2a9c1", "environment": "qa"});
    let req = PolicyRequest {
        user: "bob",
        action: "invoke",
        backend: "deployer",
        path: "prod",
        arguments: Some(&arguments),
        ..at(0, &[])
    };
    for _ in 0..2 {
        assert_eq!(engine.decide(&req), engine.decide_uncached(&req));
    }
    assert_eq!(engine.decisions.len(), 0);
}

#[test]
fn the_cache_is_bounded_and_a_reload_starts_empty() {
    let files = [("p.cedar", READS_CONTEXT)];
    let engine = ok(&files);
    let paths: Vec<String> = (0..DECISIONS_MAX * 3)
        .map(|n| format!("data/{n}"))
        .collect();
    let labels = vec!["trusted".to_string()];
    for (n, path) in paths.iter().enumerate() {
        let req = PolicyRequest {
            path,
            ..at(0, &labels)
        };
        assert!(matches!(engine.decide(&req), PolicyDecision::Allow { .. }));
        let held = engine.decisions.len();
        assert!(held <= DECISIONS_MAX, "{held} decisions held");
        if n < DECISIONS_MAX / 2 {
            assert_eq!(held, n + 1, "one entry per new request");
        }
    }
    // Evicted and cached ones alike still decide as before.
    for path in [&paths[0], &paths[paths.len() - 1]] {
        let req = PolicyRequest {
            path,
            ..at(0, &labels)
        };
        assert_eq!(engine.decide(&req), engine.decide_uncached(&req));
    }
    assert!(engine.decisions.len() >= DECISIONS_MAX / 2);
    // A reload builds a new snapshot, and a new snapshot has its own, empty cache.
    assert_eq!(ok(&files).decisions.len(), 0);

    // Large keys: the most labels the broker admits, each as long as allowed.
    let engine = ok(&files);
    let mut big = 0;
    for n in 0..DECISIONS_MAX {
        let labels: Vec<String> = (0..admit::MAX_LABELS)
            .map(|i| format!("{n:08}-{i:02}-{}", "l".repeat(50)))
            .collect();
        engine.decide(&at(0, &labels));
        let bytes = engine.decisions.key_bytes();
        assert!(bytes <= KEY_BYTES_MAX, "{bytes} bytes of keys held");
        big = big.max(bytes);
    }
    assert!(
        big > KEY_BYTES_MAX / 2,
        "the byte bound was not reached: {big}"
    );
    assert!(engine.decisions.len() < DECISIONS_MAX / 2);
}

/// Not a test: how long `decide` takes, cached and not, for the report
/// (`cargo test -p tessera-broker --release --lib decision_cache_timing -- --ignored --nocapture`).
#[test]
#[ignore]
fn decision_cache_timing() {
    let engine = PolicyEngine::load_dir(Path::new(SHIPPED)).unwrap_or_else(|e| panic!("{e}"));
    let labels = vec!["ci".to_string()];
    let attrs = BTreeMap::from([("repo".to_string(), "x".to_string())]);
    let rounds = 20_000u32;
    for path in ["reports/q1", "reports/*"] {
        let req = PolicyRequest {
            user: "alice",
            action: "read",
            backend: "svc-reports",
            backend_kind: "token",
            path,
            run_id: "run-1",
            run_labels: &labels,
            task_id: "task-1",
            task_kind: "summarize",
            task_attributes: &attrs,
            runtime: "rt",
            requested_ttl: Some(Duration::from_secs(600)),
            now_unix: 1_767_225_600,
            arguments: None,
        };
        assert_eq!(engine.decide(&req), engine.decide_uncached(&req));
        for _ in 0..3 {
            let start = Instant::now();
            for _ in 0..rounds {
                std::hint::black_box(engine.decide_uncached(std::hint::black_box(&req)));
            }
            let uncached = start.elapsed() / rounds;
            let start = Instant::now();
            for _ in 0..rounds {
                std::hint::black_box(engine.decide(std::hint::black_box(&req)));
            }
            let cached = start.elapsed() / rounds;
            println!("{path}: uncached {uncached:?}, cached {cached:?}");
        }
    }
}
