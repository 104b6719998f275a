//! The `aws-sts` backend's operations against moto: STS errors and throttling,
//! secrets kept out of audit and Debug, `deny_revoked_runs`, and where the
//! broker's own credentials come from (or why it refuses to start).

use crate::support::app::{assert_error, Db, Extra, TestApp};
use crate::support::aws::{app, backend, broker_env, POLICY, REPORTS_2026};
use crate::support::moto::{moto, s3, SessionKeys, BUCKET, EXTERNAL_ID, REVOKE_ROLE, ROLE};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sts_refusals_and_throttling_are_clear_errors() {
    let app = app().await;
    let (_, run_id, token) = app.run_for("alice").await;

    // A role the broker may not assume: 502 backend_refused, lease failed, audited.
    let cap = app
        .capability_ok(
            &token,
            "s3:GetObject",
            "aws-nobody:arn:aws:s3:::tessera-reports/reports/2026/*",
        )
        .await;
    let resp = app.exchange(cap["token"].as_str().unwrap()).await;
    let body = assert_error(resp, StatusCode::BAD_GATEWAY, "backend_refused").await;
    assert!(
        !body.to_string().contains("AccessDenied"),
        "no downstream detail for the caller: {body}"
    );
    let failed = app.audit("event=lease.failed").await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["reason"], "backend_refused");
    assert!(
        failed[0]["detail"]
            .as_str()
            .unwrap()
            .contains("AccessDenied"),
        "{failed:?}"
    );

    // Throttling: retried with backoff until it passes…
    moto().throttle(&format!("tsr-{run_id}"), 2).await;
    let cap = app
        .capability_ok(&token, "s3:GetObject", REPORTS_2026)
        .await;
    app.exchange_ok(cap["token"].as_str().unwrap()).await;
    // …or reported as throttling, with Retry-After, when it does not.
    moto().throttle(&format!("tsr-{run_id}"), 50).await;
    let cap = app
        .capability_ok(&token, "s3:GetObject", REPORTS_2026)
        .await;
    let resp = app.exchange(cap["token"].as_str().unwrap()).await;
    assert!(resp.headers().get("retry-after").is_some());
    assert_error(resp, StatusCode::SERVICE_UNAVAILABLE, "backend_throttled").await;
    moto().throttle(&format!("tsr-{run_id}"), 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_audit_rows_or_debug_output() {
    let app = app().await;
    let (_, _, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "s3:GetObject", REPORTS_2026)
        .await;
    let v = app.exchange_ok(cap["token"].as_str().unwrap()).await;
    let audit = serde_json::to_string(&app.audit("").await).unwrap();
    let config = format!("{:?}", app.state.config);
    let broker_secret = &moto().broker.secret_access_key;
    for secret in [
        v["secret_access_key"].as_str().unwrap(),
        v["session_token"].as_str().unwrap(),
        broker_secret.as_str(),
    ] {
        assert!(!audit.contains(secret), "secret in audit rows");
        assert!(!config.contains(secret), "secret in config Debug");
    }
    assert!(
        config.contains(&moto().broker.access_key_id),
        "the key id is not a secret"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_run_denies_its_sessions_on_the_role_with_deny_revoked_runs() {
    let app = TestApp::builder(Db::Sqlite)
        .extra(Extra {
            config: backend("aws-revoke", REVOKE_ROLE, "deny_revoked_runs = true"),
            policy: POLICY.to_owned(),
            env: broker_env(),
        })
        .start()
        .await;
    let resource = "aws-revoke:arn:aws:s3:::tessera-reports/reports/2026/*";
    let path = format!("/{BUCKET}/reports/2026/q1.csv");
    let (key, run_id, token) = app.run_for("alice").await;
    let (_, _, other_token) = app.run_for("alice").await;
    let cap = app.capability_ok(&token, "s3:GetObject", resource).await;
    let doomed = SessionKeys::from_exchange(&app.exchange_ok(cap["token"].as_str().unwrap()).await);
    let cap = app
        .capability_ok(&other_token, "s3:GetObject", resource)
        .await;
    let bystander =
        SessionKeys::from_exchange(&app.exchange_ok(cap["token"].as_str().unwrap()).await);
    assert_eq!(s3(&doomed, "GET", &path, b"").await.0, 200);

    let resp = app.end_run(&key, &run_id).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let settled = tessera_broker::jobs::revocation::run_once(&app.state)
        .await
        .unwrap();
    assert_eq!(settled, 1);

    let policies = moto().role_policies(REVOKE_ROLE).await;
    let deny = &policies["tessera-revoked-runs"];
    assert_eq!(deny["Statement"].as_array().unwrap().len(), 1, "{deny}");
    let st = &deny["Statement"][0];
    assert_eq!(st["Effect"], "Deny");
    assert_eq!(
        st["Condition"]["StringEquals"]["aws:PrincipalTag/tessera:run"],
        json!([run_id])
    );
    assert!(st["Sid"]
        .as_str()
        .unwrap()
        .starts_with("TesseraRevokedRunsUntil"));

    assert_eq!(
        s3(&doomed, "GET", &path, b"").await.0,
        403,
        "the ended run's session is cut now"
    );
    assert_eq!(
        s3(&bystander, "GET", &path, b"").await.0,
        200,
        "other runs keep working"
    );
    let revoked = app.audit("event=lease.revoked").await;
    assert_eq!(revoked.len(), 1, "{revoked:?}");
    assert!(revoked[0]["detail"]
        .as_str()
        .unwrap()
        .contains(&format!("tessera:run={run_id}")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_credential_source_fails_at_start() {
    let config = format!(
        "{}\n{}",
        crate::support::app::TEST_CONFIG,
        backend("aws-main", ROLE, "")
    );
    let e = tessera_broker::config::Config::from_toml(
        &config,
        &tessera_broker::config::Overrides {
            dev: true,
            ..Default::default()
        },
        &|_| None,
    )
    .unwrap_err();
    // Placed at the table's header in the file.
    assert!(e.setting.ends_with(": backends.aws-main"), "{e}");
    assert!(
        e.message.contains("AWS_ACCESS_KEY_ID") && e.message.contains("instance metadata"),
        "{e}"
    );
}

/// The backend `name` parsed from `backend_toml` (with no environment).
fn aws_config(backend_toml: &str) -> tessera_broker::backends::aws::settings::AwsStsConfig {
    let c = tessera_broker::config::Config::from_toml(
        backend_toml,
        &tessera_broker::config::Overrides {
            dev: true,
            ..Default::default()
        },
        &|_| None,
    )
    .unwrap();
    match c.backends.values().next().unwrap() {
        tessera_broker::config::BackendConfig::AwsSts(a) => a.clone(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_credentials_from_a_named_profile() {
    let dir = crate::support::app::TempDir::new();
    let file = dir.0.join("credentials");
    let m = moto();
    std::fs::write(
        &file,
        format!(
            "[tessera]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            m.broker.access_key_id, m.broker.secret_access_key
        ),
    )
    .unwrap();
    let toml = backend(
        "aws-main",
        ROLE,
        &format!(
            "external_id = \"{EXTERNAL_ID}\"\nprofile = \"tessera\"\ncredentials_file = \"{}\"",
            file.display()
        ),
    );
    let app = TestApp::builder(Db::Sqlite)
        .extra(Extra {
            config: toml,
            policy: POLICY.to_owned(),
            env: vec![],
        })
        .start()
        .await;
    let (_, run_id, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "s3:GetObject", REPORTS_2026)
        .await;
    let keys = SessionKeys::from_exchange(&app.exchange_ok(cap["token"].as_str().unwrap()).await);
    assert_eq!(
        s3(&keys, "GET", "/tessera-reports/reports/2026/q1.csv", b"")
            .await
            .0,
        200
    );
    assert_eq!(
        moto().sessions_of(&run_id).await[0]["caller"],
        m.broker.access_key_id.as_str()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_that_would_use_instance_metadata_or_do_not_exist_fail_at_start() {
    use tessera_broker::backends::aws::AwsStsBackend;
    let dir = crate::support::app::TempDir::new();
    let file = dir.0.join("credentials");
    std::fs::write(
        &file,
        "[imds]\nrole_arn = arn:aws:iam::123456789012:role/x\ncredential_source = Ec2InstanceMetadata\n\
         [ecs]\nrole_arn = arn:aws:iam::123456789012:role/x\ncredential_source = EcsContainer\n",
    )
    .unwrap();
    for (profile, expected) in [
        ("imds", "never reads the instance metadata"),
        ("ecs", "never reads the instance metadata"),
        ("missing", "missing"),
    ] {
        let cfg = aws_config(&backend(
            "aws-main",
            ROLE,
            &format!(
                "profile = \"{profile}\"\ncredentials_file = \"{}\"",
                file.display()
            ),
        ));
        let started = std::time::Instant::now();
        let e = match AwsStsBackend::new(cfg, tessera_broker::clock::Clock::new()).await {
            Ok(_) => panic!("profile {profile} must not start"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(expected), "{profile}: {e}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "no network wait"
        );
    }
}
