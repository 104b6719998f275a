//! Tests of the case-file parser and the runner, against the shipped policy set.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::*;
use crate::config::{BackendConfig, Limits};
use crate::policy::tests::SHIPPED;
use crate::policy::PolicyEngine;

const NOW: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z

fn engine() -> PolicyEngine {
    PolicyEngine::load_dir(Path::new(SHIPPED)).unwrap_or_else(|e| panic!("{e}"))
}

fn parse(text: &str) -> Result<CaseFile, Vec<CaseError>> {
    parse_file("t.toml", text, &engine(), None, NOW)
}

fn errors(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(_) => panic!("should not parse:\n{text}"),
        Err(e) => e.iter().map(ToString::to_string).collect(),
    }
}

fn report(text: &str) -> Report {
    let file = parse(text).unwrap_or_else(|e| panic!("{e:?}"));
    run(&engine(), &[file], &Limits::default())
}

const HEAD: &str = "[backends]\nsvc-reports = \"token\"\ndeployer = \"token\"\n";

fn case(extra: &str) -> String {
    format!(
        "{HEAD}\n[[case]]\nname = \"c\"\nuser = \"alice\"\naction = \"read\"\n\
         resource = \"svc-reports:reports/q1\"\ntask_kind = \"summarize\"\n{extra}\n"
    )
}

#[test]
fn parses_a_full_case() {
    let f = parse(&case(
        "task_id = \"t-9\"\nlabels = [\"a\"]\ntask_attributes = { repo = \"x\" }\n\
         runtime = \"ci\"\nrequested_ttl = \"10m\"\nnow = 2026-02-01T00:00:00Z\n\
         expect = \"allow\"\npolicies = [\"analysts-read-reports\"]\nttl = \"10m\"\n\
         uses = 20\nrate = \"1/s\"\napproval = false",
    ))
    .unwrap_or_else(|e| panic!("{e:?}"));
    let c = f.cases.first().unwrap_or_else(|| panic!("no case"));
    assert_eq!((c.name.as_str(), c.line), ("c", 5));
    let s = &c.request.spec;
    assert_eq!((s.task_id.as_str(), s.runtime.as_str()), ("t-9", "ci"));
    assert_eq!(s.requested_ttl, Some(Duration::from_secs(600)));
    assert_eq!(s.now_unix, NOW + 31 * 86_400);
    assert_eq!(s.task_attributes.get("repo").map(String::as_str), Some("x"));
    assert_eq!(
        (c.request.backend.as_str(), c.request.backend_kind),
        ("svc-reports", "token")
    );
    assert_eq!(c.expect.uses, Some(20));
    assert_eq!(c.expect.approval, Some(false));
}

#[test]
fn unknown_keys_are_errors_with_file_line_and_case() {
    let e = errors(&case("expect = \"allow\"\ntll = \"5m\""));
    assert_eq!(e.len(), 1, "{e:?}");
    let e = e.first().cloned().unwrap_or_default();
    assert!(
        e.starts_with("t.toml:12: error: case \"c\": unknown field `tll`"),
        "{e}"
    );
    let e = errors(&format!("{HEAD}[[cases]]\nname = \"x\"\n"));
    assert!(
        e.iter().any(|e| e.contains("unknown field `cases`")),
        "{e:?}"
    );
}

#[test]
fn malformed_values_and_impossible_requests_are_errors() {
    let bad = [
        ("expect = \"maybe\"", "unknown variant `maybe`"),
        (
            "expect = \"allow\"\nttl = \"forever\"",
            "ttl: invalid duration",
        ),
        ("expect = \"allow\"\nrate = \"fast\"", "rate: invalid rate"),
        (
            "expect = \"allow\"\nuses = -1",
            "t.toml:12: error: case \"c\": invalid value: integer `-1`",
        ),
        (
            "expect = \"allow\"\nnow = \"2026-01-01T00:00:00Z\"",
            "t.toml:12: error: case \"c\": invalid type: string",
        ),
        ("expect = \"deny\"\nttl = \"5m\"", "cannot check them"),
        (
            "expect = \"allow\"\nrequested_ttl = \"1x\"",
            "requested_ttl",
        ),
        ("expect = \"allow\"\nnow = 2026-01-01T00:00:00", "now:"),
        (
            "expect = \"allow\"\nlabels = [\"Bad Label\"]",
            "invalid_labels",
        ),
    ];
    for (extra, want) in bad {
        let e = errors(&case(extra)).join("\n");
        assert!(e.contains(want), "{extra:?}: expected {want:?} in {e}");
    }
    // Missing required field.
    let e = errors(&format!(
        "{HEAD}[[case]]\nname = \"x\"\nexpect = \"deny\"\n"
    ))
    .join("\n");
    assert!(e.contains("case \"x\": missing field"), "{e}");
}

#[test]
fn resources_are_checked_with_the_broker_grammar() {
    let swap = |from: &str, to: &str| case("expect = \"allow\"").replace(from, to);
    let e = errors(&swap("svc-reports:reports/q1", "svc-reports:../etc")).join("\n");
    assert!(e.contains("invalid_resource"), "{e}");
    let e = errors(&swap(
        "svc-reports:reports/q1",
        "pg-main:analytics.public.orders",
    ))
    .join("\n");
    assert!(
        e.contains("backend pg-main is unknown") && e.contains("[backends]"),
        "{e}"
    );
    let e = errors(&swap("svc-reports = \"token\"", "svc-reports = \"ldap\"")).join("\n");
    assert!(e.contains("not available in this build"), "{e}");
    let e = errors(&swap("action = \"read\"", "action = \"frobnicate\"")).join("\n");
    assert!(e.contains("unknown_action"), "{e}");
}

#[test]
fn config_backends_are_authoritative() {
    let config = BTreeMap::from([(
        "svc-reports".to_string(),
        BackendConfig::Token(crate::backends::token::TokenConfig {
            audience: "a".into(),
            actions: Some(vec!["write".into()]),
        }),
    )]);
    let text = case("expect = \"allow\"").replace("deployer = \"token\"\n", "");
    // The configured allow-list does not include "read": the broker would refuse it.
    let e = parse_file("t.toml", &text, &engine(), Some(&config), NOW)
        .err()
        .map(|e| {
            e.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    assert!(e.contains("invalid_action"), "{e}");
    // [backends] in the file must agree with the configuration.
    let e = parse_file(
        "t.toml",
        &case("expect = \"allow\""),
        &engine(),
        Some(&config),
        NOW,
    )
    .err()
    .map(|e| {
        e.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    })
    .unwrap_or_default();
    assert!(
        e.contains("deployer, which the configuration does not have"),
        "{e}"
    );
}

#[test]
fn duplicate_names_and_empty_files_are_errors() {
    let one = case("expect = \"allow\"");
    let two = format!("{one}{}", one.replace(HEAD, ""));
    assert!(errors(&two).join("\n").contains("duplicate case name"));
    assert!(errors(HEAD).join("\n").contains("no [[case]]"));
}

#[test]
fn a_matching_case_passes() {
    let r = report(&case(
        "expect = \"allow\"\npolicies = [\"analysts-read-reports\"]\nttl = \"15m\"\n\
         uses = 20\nrate = \"60/min\"\napproval = false",
    ));
    assert_eq!((r.total(), r.failed()), (1, 0), "{}", r.render());
    assert!(r.render().contains("PASS"));
}

#[test]
fn each_difference_is_reported() {
    let r = report(&case(
        "expect = \"allow\"\npolicies = [\"staff-read-public-reports\"]\nttl = \"1h\"\n\
         uses = 21\nrate = \"61/min\"\napproval = true",
    ));
    assert_eq!(r.failed(), 1);
    let shown = r.render();
    for part in [
        "FAIL: ",
        "policies: expected [staff-read-public-reports], got [analysts-read-reports]",
        "ttl: expected 1h, got 15m (@ttl of analysts-read-reports)",
        "uses: expected 21, got 20",
        "rate: expected 61/min, got 60/min",
        "approval: expected required, got not required",
        "1 case: 0 passed, 1 failed",
    ] {
        assert!(shown.contains(part), "missing {part:?} in\n{shown}");
    }
}

#[test]
fn an_unknown_policy_id_fails_and_says_so() {
    let r = report(&case(
        "expect = \"allow\"\npolicies = [\"analysts-read-report\"]",
    ));
    let shown = r.render();
    assert_eq!(r.failed(), 1, "{shown}");
    assert!(
        shown.contains(
            "policies: expected [analysts-read-report], got [analysts-read-reports] \
             (no policy has the id analysts-read-report)"
        ),
        "{shown}"
    );
}

#[test]
fn a_wrong_decision_names_what_decided() {
    let r = report(&case("labels = [\"untrusted-input\"]\nexpect = \"allow\""));
    let shown = r.render();
    assert!(
        shown.contains("decision: expected allow, got deny (forbidden by guard-untrusted-input)"),
        "{shown}"
    );
    let r = report(&case("expect = \"deny\"").replace("\"alice\"", "\"carol\""));
    assert_eq!(r.failed(), 0, "{}", r.render());
}

#[test]
fn load_dir_needs_case_files() {
    let dir = std::env::temp_dir().join(format!("tessera-cases-{}", crate::ids::new_id()));
    let e = load_dir(&dir, &engine(), None, NOW)
        .err()
        .unwrap_or_default();
    assert!(
        e.first().is_some_and(|e| e.message.contains("cannot list")),
        "{e:?}"
    );
    std::fs::create_dir_all(dir.join("tests")).unwrap_or_else(|e| panic!("{e}"));
    let e = load_dir(&dir, &engine(), None, NOW)
        .err()
        .unwrap_or_default();
    assert!(
        e.first()
            .is_some_and(|e| e.message.contains("no case files")),
        "{e:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_shipped_cases_pass() {
    let files = load_dir(Path::new(SHIPPED), &engine(), None, NOW).unwrap_or_else(|e| {
        panic!(
            "{}",
            e.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        )
    });
    let r = run(&engine(), &files, &Limits::default());
    assert!(r.total() >= 10, "{}", r.render());
    assert_eq!(r.failed(), 0, "{}", r.render());
}
