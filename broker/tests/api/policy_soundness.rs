//! Policy soundness end to end (issue 11), on both stores: a wildcard never covers
//! what a forbid or an approval gate stops, dot segments are refused before
//! policy, `policy explain` and the broker agree on one table of requests, and an
//! exchange re-authorizes (claims against the stored row, the request against the
//! policy in force; a tightening reload revokes what it no longer grants).
//!
//! Each "seen" case of the issue is here and failed before the fix: the wildcard
//! requests were issued (201) and exchanged, the dot-segment paths were issued,
//! and the exchange after a tightening policy change succeeded.

use crate::both_stores;
use crate::support::app::{assert_error, Db, DbBackends, Extra, TestApp, TEST_POLICY};
use reqwest::StatusCode;
use serde_json::Value;
use tessera_broker::policy::simulate::RequestSpec;

both_stores!(
    wildcards_never_walk_around_a_forbid_or_an_approval,
    dot_segments_and_other_spellings_are_refused_before_policy,
    explain_and_the_broker_agree,
    a_tightened_policy_refuses_the_exchange_and_revokes,
    a_tightening_reload_revokes_what_it_no_longer_grants,
    a_claim_edited_under_a_valid_signature_is_refused,
);

/// The guards of the issue: an approval on `deployer:prod/*` beside a looser
/// deployer-wide permit, and a forbid on one report.
const GUARDS: &str = r#"
@id("deploys-need-a-human") @approval("required")
permit (principal == Tessera::User::"alice", action == Tessera::Action::"invoke", resource)
when { resource.backend == "deployer" && resource.path like "prod/*" };

@id("deploy-anything")
permit (principal == Tessera::User::"alice", action == Tessera::Action::"invoke", resource)
when { resource.backend == "deployer" };

@id("no-secret-report")
forbid (principal, action, resource)
when { resource.backend == "svc-reports" && resource.path == "reports/secret.csv" };

@id("no-secret-table")
forbid (principal, action == Tessera::Action::"select", resource)
when { resource.kind == "postgres" && resource.path == "postgres.public.secrets" };

@id("tables-of-reporting")
permit (principal == Tessera::User::"alice", action == Tessera::Action::"select", resource)
when { resource.kind == "postgres" && resource.path == "postgres.reporting.*" };
"#;

const DEPLOYER: &str = r#"
[backends.deployer]
kind = "token"
audience = "https://deployer.internal"
actions = ["invoke"]
"#;

async fn spawn(db: Db) -> TestApp {
    TestApp::builder(db)
        .extra(Extra {
            config: DEPLOYER.to_owned(),
            policy: GUARDS.to_owned(),
            env: vec![],
        })
        .db_backends(DbBackends::default())
        .start()
        .await
}

async fn body(resp: reqwest::Response) -> (StatusCode, Value) {
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn wildcards_never_walk_around_a_forbid_or_an_approval(app: TestApp) {
    let app = spawn(store_of(&app)).await;
    let (_, run_id, token) = app.run_for("alice").await;
    let before = app.count("capabilities").await;

    let secret = app
        .capability(&token, "read", "svc-reports:reports/secret.csv")
        .await;
    assert_error(secret, StatusCode::FORBIDDEN, "capability_denied").await;
    for set in [
        "reports/*",
        "reports/secret.*",
        "reports/*.csv",
        "reports/s*",
        "reports/*secret*",
        "reports/secret.cs*",
        "*",
    ] {
        let resp = app
            .capability(&token, "read", &format!("svc-reports:{set}"))
            .await;
        assert_error(resp, StatusCode::FORBIDDEN, "wildcard_overlaps_forbid").await;
    }

    // A concrete resource under the approval opens an approval; nothing is issued.
    let prod = app.capability(&token, "invoke", "deployer:prod/app").await;
    assert_eq!(prod.status(), StatusCode::ACCEPTED);
    for set in ["*", "prod*", "*/app", "pro*/app", "prod/*", "p*d/a*"] {
        let resp = app
            .capability(&token, "invoke", &format!("deployer:{set}"))
            .await;
        assert_error(resp, StatusCode::FORBIDDEN, "wildcard_overlaps_approval").await;
    }

    // Database `*`: a forbid on one table stops every-table requests, and a permit
    // for "any one table" never grants them all.
    for (resource, code) in [
        ("pg-test:postgres.public.*", "wildcard_overlaps_forbid"),
        ("pg-test:postgres.other.*", "wildcard_not_covered"),
    ] {
        let resp = app.capability(&token, "select", resource).await;
        assert_error(resp, StatusCode::FORBIDDEN, code).await;
    }
    assert_eq!(app.count("capabilities").await, before, "nothing issued");

    // Disjoint sets are still granted, and exchange for exactly that set.
    let staging = app
        .capability_ok(&token, "invoke", "deployer:staging/*")
        .await;
    let (status, v) = body(app.exchange(staging["token"].as_str().unwrap()).await).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let claims = decode_payload(v["token"].as_str().unwrap());
    assert_eq!(claims["resource"], "staging/*");
    app.capability_ok(&token, "read", "svc-reports:reports/public/*")
        .await;
    app.capability_ok(&token, "select", "pg-test:postgres.reporting.*")
        .await;

    // Every refusal names its rule and the policy that decided, in the audit log.
    let rows = app
        .audit(&format!("run={run_id}&event=capability.denied&limit=100"))
        .await;
    let reasons = |r: &str| rows.iter().filter(|e| e["reason"] == r).count();
    assert_eq!(reasons("wildcard_overlaps_forbid"), 8);
    assert_eq!(reasons("wildcard_overlaps_approval"), 6);
    assert_eq!(reasons("wildcard_not_covered"), 1);
    assert_eq!(reasons("forbidden"), 1);
    let forbid = rows
        .iter()
        .find(|e| e["resource"] == "svc-reports:reports/*")
        .unwrap();
    assert!(
        forbid["detail"]
            .as_str()
            .unwrap()
            .contains("policies=no-secret-report"),
        "{forbid}"
    );
}

async fn dot_segments_and_other_spellings_are_refused_before_policy(app: TestApp) {
    let app = spawn(store_of(&app)).await;
    let (_, run_id, token) = app.run_for("alice").await;
    for (action, resource) in [
        ("invoke", "deployer:./prod/app"),
        ("invoke", "deployer:prod/./app"),
        ("read", "svc-reports:reports/./secret.csv"),
        ("read", "svc-reports:reports/secret.csv/."),
        ("read", "svc-reports:reports//secret.csv"),
        ("read", "svc-reports:reports/../reports/secret.csv"),
        ("read", "svc-reports:reports/**"),
        ("select", "my-test:test.ORDERS"),
        ("select", "pg-test:postgres.public"),
    ] {
        let resp = app.capability(&token, action, resource).await;
        assert_error(resp, StatusCode::BAD_REQUEST, "invalid_resource").await;
    }
    assert_eq!(app.count("capabilities").await, 0);
    let denied = app
        .audit(&format!("run={run_id}&event=capability.denied"))
        .await;
    assert!(denied.is_empty(), "refused before policy: {denied:?}");
}

fn store_of(app: &TestApp) -> Db {
    if app.state.store.dialect() == tessera_broker::store::Dialect::Sqlite {
        Db::Sqlite
    } else {
        Db::Postgres
    }
}

/// One list, decided twice: over HTTP by the broker and in-process by
/// `policy explain` (through `simulate`, the checks the CLI uses) with the same
/// policy and backends. Status and code must agree for every row.
async fn explain_and_the_broker_agree(app: TestApp) {
    let app = spawn(store_of(&app)).await;
    let (_, _, token) = app.run_for("alice").await;
    let table: [(&str, &str, StatusCode, &str); 22] = [
        (
            "read",
            "svc-reports:reports/q1.csv",
            StatusCode::CREATED,
            "",
        ),
        (
            "read",
            "svc-reports:reports/*",
            StatusCode::FORBIDDEN,
            "wildcard_overlaps_forbid",
        ),
        (
            "read",
            "svc-reports:reports/public/*",
            StatusCode::CREATED,
            "",
        ),
        (
            "read",
            "svc-reports:reports/secret.csv",
            StatusCode::FORBIDDEN,
            "capability_denied",
        ),
        (
            "read",
            "svc-reports:payroll/*",
            StatusCode::FORBIDDEN,
            "capability_denied",
        ),
        (
            "read",
            "svc-reports:*",
            StatusCode::FORBIDDEN,
            "wildcard_overlaps_forbid",
        ),
        (
            "read",
            "svc-reports:reports/./q1.csv",
            StatusCode::BAD_REQUEST,
            "invalid_resource",
        ),
        (
            "read",
            "svc-reports:reports/q1.csv/.",
            StatusCode::BAD_REQUEST,
            "invalid_resource",
        ),
        ("invoke", "deployer:prod/app", StatusCode::ACCEPTED, ""),
        (
            "invoke",
            "deployer:*",
            StatusCode::FORBIDDEN,
            "wildcard_overlaps_approval",
        ),
        ("invoke", "deployer:staging/*", StatusCode::CREATED, ""),
        (
            "invoke",
            "deployer:./prod/app",
            StatusCode::BAD_REQUEST,
            "invalid_resource",
        ),
        (
            "write",
            "deployer:x",
            StatusCode::BAD_REQUEST,
            "invalid_action",
        ),
        (
            "select",
            "pg-test:postgres.public.orders",
            StatusCode::CREATED,
            "",
        ),
        (
            "select",
            "pg-test:postgres.public.secrets",
            StatusCode::FORBIDDEN,
            "capability_denied",
        ),
        (
            "select",
            "pg-test:postgres.public.*",
            StatusCode::FORBIDDEN,
            "wildcard_overlaps_forbid",
        ),
        (
            "select",
            "pg-test:postgres.other.*",
            StatusCode::FORBIDDEN,
            "wildcard_not_covered",
        ),
        (
            "select",
            "pg-test:postgres.reporting.*",
            StatusCode::CREATED,
            "",
        ),
        (
            "select",
            "pg-test:elsewhere.public.orders",
            StatusCode::BAD_REQUEST,
            "invalid_resource",
        ),
        ("select", "my-test:test.orders", StatusCode::CREATED, ""),
        (
            "select",
            "my-test:test.*",
            StatusCode::FORBIDDEN,
            "wildcard_not_covered",
        ),
        (
            "frobnicate",
            "svc-reports:reports/q1.csv",
            StatusCode::BAD_REQUEST,
            "unknown_action",
        ),
    ];
    let policy = app.state.policy();
    for (action, resource, status, code) in table {
        let (got, v) = body(app.capability(&token, action, resource).await).await;
        assert_eq!(got, status, "broker: {action} {resource}: {v}");
        if !code.is_empty() {
            assert_eq!(v["error"]["code"], code, "broker: {action} {resource}");
        }
        let spec = RequestSpec {
            user: "alice".into(),
            action: action.into(),
            resource: resource.into(),
            task_kind: "summarize".into(),
            task_id: "t-1".into(),
            runtime: "rt".into(),
            now_unix: app.state.clock.now(),
            ..RequestSpec::default()
        };
        let explained = match policy.simulate(spec, &app.state.config.backends) {
            Err(message) => {
                assert_eq!(
                    status,
                    StatusCode::BAD_REQUEST,
                    "explain refused {resource}: {message}"
                );
                assert!(
                    message.contains(&format!("({code})")),
                    "{message} (expected {code})"
                );
                continue;
            }
            Ok(sim) => policy.explain(&sim, &app.state.config.limits),
        };
        let j = explained.to_json();
        match (status, code) {
            (StatusCode::CREATED, _) => {
                assert_eq!(j["decision"], "allow", "explain: {resource}: {j}");
                assert_eq!(j["constraints"]["approval"]["required"], false);
            }
            (StatusCode::ACCEPTED, _) => {
                assert_eq!(j["constraints"]["approval"]["required"], true, "{j}")
            }
            (StatusCode::FORBIDDEN, "capability_denied") => {
                assert_eq!(j["decision"], "deny", "explain: {resource}: {j}");
                assert!(
                    matches!(j["reason"].as_str(), Some("forbidden" | "no_permit")),
                    "{j}"
                );
            }
            (StatusCode::FORBIDDEN, rule) => {
                assert_eq!(j["decision"], "deny", "explain: {resource}: {j}");
                assert_eq!(j["reason"], rule, "explain: {resource}: {j}");
            }
            _ => panic!("explain accepted {resource}, the broker refused it with {code}"),
        }
    }
}

/// The policy set of the broker plus `extra`, as an engine (in-process swap:
/// nothing revokes ahead of the exchange).
fn tightened(extra: &str) -> tessera_broker::policy::PolicyEngine {
    crate::support::app::test_policy_with(extra)
}

async fn a_tightened_policy_refuses_the_exchange_and_revokes(app: TestApp) {
    let (key, run_id, token) = app.run_for("alice").await;
    let q1 = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    let q2 = app
        .capability_ok(&token, "read", "svc-reports:reports/q2")
        .await;
    app.state.policy_in_force.replace_engine(tightened(
        r#"@id("no-q1") forbid (principal, action, resource) when { resource.path == "reports/q1" };"#,
    ));
    let leases = app.count("leases").await;
    let resp = app.exchange(q1["token"].as_str().unwrap()).await;
    assert_error(resp, StatusCode::FORBIDDEN, "policy_changed").await;
    assert_eq!(app.count("leases").await, leases, "nothing minted");
    let v = app.introspect(&key, q1["token"].as_str().unwrap()).await;
    assert_eq!(v["active"], false, "revoked: {v}");
    let again = app.exchange(q1["token"].as_str().unwrap()).await;
    assert_error(again, StatusCode::FORBIDDEN, "capability_revoked").await;
    // What the new policy still grants still exchanges.
    let (status, v) = body(app.exchange(q2["token"].as_str().unwrap()).await).await;
    assert_eq!(status, StatusCode::OK, "{v}");

    let revoked = app
        .audit(&format!(
            "capability={}&event=capability.revoked",
            q1["capability_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(revoked.len(), 1);
    assert_eq!(revoked[0]["reason"], "policy_changed");
    assert_eq!(revoked[0]["actor"], "policy");
    let refused = app
        .audit(&format!("run={run_id}&event=exchange.refused"))
        .await;
    assert_eq!(
        refused
            .iter()
            .filter(|e| e["reason"] == "policy_changed")
            .count(),
        1,
        "{refused:?}"
    );

    // A policy that now wants a shorter life or fewer uses than a capability
    // holds no longer issues it either.
    let q3 = app
        .capability_ok(&token, "read", "svc-reports:reports/q3")
        .await;
    let shorter = TEST_POLICY.replace(
        r#"@id("readers") @ttl("10m")"#,
        r#"@id("readers") @ttl("1m")"#,
    );
    let schema = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../policy/schema.cedarschema"
    ))
    .unwrap();
    let engine = tessera_broker::policy::PolicyEngine::from_sources(
        &schema,
        &[("test.cedar".to_owned(), shorter)],
        crate::support::app::TEST_ENTITIES,
    )
    .unwrap();
    app.state.policy_in_force.replace_engine(engine);
    let resp = app.exchange(q3["token"].as_str().unwrap()).await;
    assert_error(resp, StatusCode::FORBIDDEN, "policy_changed").await;

    // A broker that did not issue it (restarted: nothing in memory) re-decides it
    // from the store's row just the same.
    let q4 = app
        .capability_ok(&token, "read", "svc-reports:reports/q4")
        .await;
    let app = app.restart().await;
    app.state.policy_in_force.replace_engine(tightened(
        r#"@id("no-q4") forbid (principal, action, resource) when { resource.path == "reports/q4" };"#,
    ));
    let resp = app.exchange(q4["token"].as_str().unwrap()).await;
    assert_error(resp, StatusCode::FORBIDDEN, "policy_changed").await;
}

async fn a_tightening_reload_revokes_what_it_no_longer_grants(app: TestApp) {
    let (key, _run_id, token) = app.run_for("alice").await;
    let q1 = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    let q2 = app
        .capability_ok(&token, "read", "svc-reports:reports/q2")
        .await;
    // A second capability for the same resource: both go.
    let q1b = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    let bought = app.exchange(q1["token"].as_str().unwrap()).await;
    assert_eq!(bought.status(), StatusCode::OK);
    let lease: Value = bought.json().await.unwrap();
    std::fs::write(
        app.policy_dir().join("test.cedar"),
        format!(
            "{TEST_POLICY}\n@id(\"no-q1\") forbid (principal, action, resource) when {{ resource.path == \"reports/q1\" }};\n"
        ),
    )
    .unwrap();
    let resp = app
        .post(
            "/v1/admin/policy/reload",
            Some(&app.admin_token),
            Value::Null,
        )
        .await;
    let (status, v) = body(resp).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["revoked"], 2, "{v}");
    let rows = app.audit("event=policy.reloaded").await;
    assert!(
        rows[0]["detail"].as_str().unwrap().contains("revoked=2"),
        "{rows:?}"
    );
    assert_eq!(
        app.introspect(&key, q1["token"].as_str().unwrap()).await["active"],
        false
    );
    assert_eq!(
        app.introspect(&key, q1b["token"].as_str().unwrap()).await["active"],
        false
    );
    assert_eq!(
        app.introspect(&key, q2["token"].as_str().unwrap()).await["active"],
        true
    );
    // The downstream token bought before the reload dies with the capability.
    let downstream = app.introspect(&key, lease["token"].as_str().unwrap()).await;
    assert_eq!(downstream["active"], false, "{downstream}");
    let resp = app.exchange(q1["token"].as_str().unwrap()).await;
    assert_error(resp, StatusCode::FORBIDDEN, "capability_revoked").await;
}

async fn a_claim_edited_under_a_valid_signature_is_refused(app: TestApp) {
    use tessera_broker::capability::{self, CAPABILITY_TYP};
    let (_, run_id, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    let keys = app.state.keys.snapshot();
    let claims = capability::verify(
        cap["token"].as_str().unwrap(),
        &keys,
        &app.state.config.issuer,
        &app.state.config.capability_audience(),
        app.state.clock.now(),
    )
    .unwrap();
    let leases = app.count("leases").await;
    type Edit = Box<dyn Fn(&mut capability::CapabilityClaims)>;
    let edits: [(&str, Edit); 5] = [
        ("res", Box::new(|c| c.res = "svc-reports:reports/*".into())),
        ("act", Box::new(|c| c.act = "write".into())),
        ("uses", Box::new(|c| c.uses = 1000)),
        ("exp", Box::new(|c| c.exp += 3600)),
        ("sub", Box::new(|c| c.sub = "mallory".into())),
    ];
    for (name, edit) in edits {
        let mut forged = claims.clone();
        edit(&mut forged);
        let token =
            tessera_broker::keys::jwt::encode(keys.signer(i64::MAX), CAPABILITY_TYP, &forged);
        let resp = app.exchange(&token).await;
        assert_error(resp, StatusCode::UNAUTHORIZED, "invalid_token").await;
        let rows = app
            .audit(&format!("run={run_id}&event=exchange.refused"))
            .await;
        assert!(
            rows.iter().any(|e| e["reason"] == "claims_mismatch"
                && e["detail"].as_str().is_some_and(|d| d.contains(name))),
            "{name}: {rows:?}"
        );
    }
    assert_eq!(app.count("leases").await, leases, "nothing minted");
    // The genuine token still works.
    let (status, v) = body(app.exchange(cap["token"].as_str().unwrap()).await).await;
    assert_eq!(status, StatusCode::OK, "{v}");

    // After a restart the broker holds nothing in memory: the claims are compared
    // with the row read from the store, and the same edits are refused.
    let mut forged = claims.clone();
    forged.res = "svc-reports:reports/*".into();
    let app = app.restart().await;
    let keys = app.state.keys.snapshot();
    let token = tessera_broker::keys::jwt::encode(keys.signer(i64::MAX), CAPABILITY_TYP, &forged);
    assert_error(
        app.exchange(&token).await,
        StatusCode::UNAUTHORIZED,
        "invalid_token",
    )
    .await;
    let (status, v) = body(app.exchange(cap["token"].as_str().unwrap()).await).await;
    assert_eq!(status, StatusCode::OK, "{v}");
}

/// The payload of a JWT, decoded without verification (the test reads what the
/// broker put there).
fn decode_payload(jwt: &str) -> Value {
    use base64::Engine;
    let payload = jwt.split('.').nth(1).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// aws-sts against moto: the issue's first case. A forbid on one object stops
/// every ARN pattern that could name it (`*` and IAM's `?`); a disjoint prefix
/// is still granted and buys credentials for exactly that pattern.
async fn aws_wildcards_never_walk_around_a_forbid(db: Db) {
    let forbid = r#"
@id("no-secret-object")
forbid (principal, action, resource)
when { resource.kind == "aws-sts" && resource.path == "arn:aws:s3:::tessera-reports/reports/secret.csv" };
"#;
    let app = TestApp::builder(db)
        .extra(Extra {
            config: crate::support::aws::backend(
                "aws-main",
                crate::support::moto::ROLE,
                &format!("external_id = \"{}\"", crate::support::moto::EXTERNAL_ID),
            ),
            policy: format!("{}{forbid}", crate::support::aws::POLICY),
            env: crate::support::aws::broker_env(),
        })
        .start()
        .await;
    let (_, _, token) = app.run_for("alice").await;
    let arn = |p: &str| format!("aws-main:arn:aws:s3:::tessera-reports/reports/{p}");
    let secret = app
        .capability(&token, "s3:GetObject", &arn("secret.csv"))
        .await;
    assert_error(secret, StatusCode::FORBIDDEN, "capability_denied").await;
    for set in [
        "*",
        "secret.*",
        "*.csv",
        "s*",
        "*secret*",
        "secret.?sv",
        "??cret.csv",
    ] {
        let resp = app.capability(&token, "s3:GetObject", &arn(set)).await;
        assert_error(resp, StatusCode::FORBIDDEN, "wildcard_overlaps_forbid").await;
    }
    for bad in ["./secret.csv", "2026/./q1.csv", "secret.csv/.", "**"] {
        let resp = app.capability(&token, "s3:GetObject", &arn(bad)).await;
        assert_error(resp, StatusCode::BAD_REQUEST, "invalid_resource").await;
    }
    assert_eq!(app.count("capabilities").await, 0, "nothing issued");
    let cap = app
        .capability_ok(&token, "s3:GetObject", &arn("2026/q?.csv"))
        .await;
    let v = app.exchange_ok(cap["token"].as_str().unwrap()).await;
    assert!(
        v["access_key_id"].as_str().is_some_and(|k| !k.is_empty()),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_wildcards_never_walk_around_a_forbid_sqlite() {
    aws_wildcards_never_walk_around_a_forbid(Db::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_wildcards_never_walk_around_a_forbid_postgres() {
    aws_wildcards_never_walk_around_a_forbid(Db::Postgres).await
}
