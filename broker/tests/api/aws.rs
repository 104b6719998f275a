//! The `aws-sts` backend against moto on loopback (see `moto.rs` and
//! `tests/moto/launcher.py`, which make session policies, their conditions,
//! session tags and expiry observable — plain moto ignores them).
//!
//! Every S3 call is signed with the credentials the broker returned, so a 200 or
//! a 403 here is moto's (strict) authorisation of exactly those credentials.

use crate::support::app::assert_error;
use crate::support::aws::{app, capability_with_ttl, REPORTS_2026};
use crate::support::moto::{moto, s3, SessionKeys, ACCOUNT, BUCKET, EXTERNAL_ID, ROLE};
use reqwest::StatusCode;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_can_do_exactly_the_capability_action_on_its_resource() {
    let app = app().await;
    let (_, run_id, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "s3:GetObject", REPORTS_2026)
        .await;
    let v = app.exchange_ok(cap["token"].as_str().unwrap()).await;

    assert_eq!(v["kind"], "aws", "DESIGN §12: the credential kind");
    for f in [
        "access_key_id",
        "secret_access_key",
        "session_token",
        "expiration",
    ] {
        assert!(v[f].as_str().is_some_and(|s| !s.is_empty()), "{f} in {v}");
    }
    assert_eq!(
        v["expiration"], cap["expires_at"],
        "credentials are dead when the capability is"
    );
    assert_eq!(
        v["credential_process"],
        json!({
            "Version": 1,
            "AccessKeyId": v["access_key_id"],
            "SecretAccessKey": v["secret_access_key"],
            "SessionToken": v["session_token"],
            "Expiration": v["expiration"],
        })
    );
    let keys = SessionKeys::from_exchange(&v);

    // The allowed prefix.
    let (status, body) = s3(&keys, "GET", &format!("/{BUCKET}/reports/2026/q1.csv"), b"").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("quarter,revenue"), "{body}");
    // Another prefix, another object, another action, another API.
    let (status, _) = s3(&keys, "GET", &format!("/{BUCKET}/reports/2025/q4.csv"), b"").await;
    assert_eq!(status, 403, "another prefix");
    let (status, _) = s3(
        &keys,
        "GET",
        &format!("/{BUCKET}/private/salaries.csv"),
        b"",
    )
    .await;
    assert_eq!(status, 403, "outside reports/");
    let (status, _) = s3(
        &keys,
        "PUT",
        &format!("/{BUCKET}/reports/2026/new.csv"),
        b"x",
    )
    .await;
    assert_eq!(status, 403, "PutObject");
    let (status, _) = s3(&keys, "GET", "/", b"").await;
    assert_eq!(status, 403, "ListBuckets");
    let (status, _) = s3(&keys, "GET", &format!("/{BUCKET}?list-type=2"), b"").await;
    assert_eq!(status, 403, "ListBucket");
    // The same S3 calls are allowed by the role itself: the session policy denied them.
    let admin = SessionKeys::admin(moto());
    assert_eq!(
        s3(
            &admin,
            "GET",
            &format!("/{BUCKET}/private/salaries.csv"),
            b""
        )
        .await
        .0,
        200
    );

    // What STS was asked for: the session's attribution and the exact policy.
    let sessions = moto().sessions_of(&run_id).await;
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let s = &sessions[0];
    assert_eq!(s["role_arn"], format!("arn:aws:iam::{ACCOUNT}:role/{ROLE}"));
    let name = s["session_name"].as_str().unwrap();
    assert!(
        name.starts_with(&format!("tsr-{run_id}-")) && name.len() <= 64,
        "{name}"
    );
    assert_eq!(
        s["tags"],
        json!({ "tessera:user": "alice", "tessera:run": run_id, "tessera:task": "t-1" })
    );
    assert_eq!(s["source_identity"], "alice");
    assert_eq!(s["external_id"], EXTERNAL_ID);
    assert_eq!(
        s["duration"], 900,
        "STS's minimum: the policy, not the duration, ends them"
    );
    assert_eq!(s["caller"], moto().broker.access_key_id.as_str());
    let policy: Value = serde_json::from_str(s["policy"].as_str().unwrap()).unwrap();
    assert_eq!(
        policy,
        json!({
            "Version": "2012-10-17",
            "Statement": [{
                "Sid": "TesseraCapability",
                "Effect": "Allow",
                "Action": "s3:GetObject",
                "Resource": "arn:aws:s3:::tessera-reports/reports/2026/*",
                "Condition": { "DateLessThan": { "aws:CurrentTime": cap["expires_at"] } }
            }]
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_stop_working_when_the_capability_expires() {
    let app = app().await;
    let (_, run_id, token) = app.run_for("alice").await;
    let cap = capability_with_ttl(&app, &token, "s3:GetObject", REPORTS_2026, "6s").await;
    let v = app.exchange_ok(cap["token"].as_str().unwrap()).await;
    assert_eq!(v["expiration"], cap["expires_at"]);
    let keys = SessionKeys::from_exchange(&v);
    let path = format!("/{BUCKET}/reports/2026/q1.csv");
    assert_eq!(s3(&keys, "GET", &path, b"").await.0, 200);

    // STS itself would keep them alive for 900 s.
    let session = &moto().sessions_of(&run_id).await[0];
    let sts_exp =
        tessera_broker::clock::parse_rfc3339_ms(session["expiration"].as_str().unwrap()).unwrap();
    let cap_exp =
        tessera_broker::clock::parse_rfc3339_ms(cap["expires_at"].as_str().unwrap()).unwrap();
    assert!(sts_exp - cap_exp > 800_000, "{session}");

    let wait = cap_exp - tessera_broker::clock::Clock::new().now_ms() + 1200;
    tokio::time::sleep(std::time::Duration::from_millis(wait.max(0) as u64)).await;
    let (status, _) = s3(&keys, "GET", &path, b"").await;
    assert_eq!(status, 403, "dead at the capability's expiry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capability_for_another_action_buys_nothing_broader() {
    let app = app().await;
    let (_, run_id, token) = app.run_for("alice").await;
    let bucket = "aws-main:arn:aws:s3:::tessera-reports";
    let cap = app.capability_ok(&token, "s3:ListBucket", bucket).await;
    let keys = SessionKeys::from_exchange(&app.exchange_ok(cap["token"].as_str().unwrap()).await);
    let (status, body) = s3(&keys, "GET", &format!("/{BUCKET}?list-type=2"), b"").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("reports/2026/q1.csv"), "{body}");
    for path in [
        "/tessera-reports/reports/2026/q1.csv",
        "/tessera-reports/private/salaries.csv",
    ] {
        assert_eq!(s3(&keys, "GET", path, b"").await.0, 403, "{path}");
    }
    assert_eq!(s3(&keys, "PUT", "/tessera-reports/x", b"x").await.0, 403);

    // The policy sent names the capability's action and resource, nothing else.
    let s = &moto().sessions_of(&run_id).await[0];
    let policy: Value = serde_json::from_str(s["policy"].as_str().unwrap()).unwrap();
    assert_eq!(policy["Statement"].as_array().unwrap().len(), 1);
    assert_eq!(policy["Statement"][0]["Action"], "s3:ListBucket");
    assert_eq!(
        policy["Statement"][0]["Resource"],
        "arn:aws:s3:::tessera-reports"
    );

    // And the policy did not allow a wider request: a PutObject capability is denied.
    let resp = app.capability(&token, "s3:PutObject", REPORTS_2026).await;
    assert_error(resp, StatusCode::FORBIDDEN, "capability_denied").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_actions_and_arns_are_refused_before_any_call() {
    let app = app().await;
    let (_, run_id, token) = app.run_for("alice").await;
    let cases = [
        ("s3:*", REPORTS_2026, "invalid_action"),
        ("s3:Get*", REPORTS_2026, "invalid_action"),
        ("*", REPORTS_2026, "invalid_action"),
        ("s3:getobject", REPORTS_2026, "invalid_action"),
        ("S3:GetObject", REPORTS_2026, "invalid_action"),
        ("read", REPORTS_2026, "invalid_action"),
        (
            "s3:GetObject",
            "aws-main:arn:aws:s3:::tessera-reports/reports/../private/*",
            "invalid_resource",
        ),
        (
            "s3:GetObject",
            "aws-main:arn:aws:s3:::tessera-reports/reports/${aws:username}",
            "invalid_resource",
        ),
        (
            "s3:GetObject",
            "aws-main:arn:aws:s3:::tessera-reports/reports/./q1.csv",
            "invalid_resource",
        ),
        (
            "s3:GetObject",
            "aws-main:arn:aws:s3:::*",
            "invalid_resource",
        ),
        (
            "s3:GetObject",
            "aws-main:arn:aws:iam::123456789012:role/admin",
            "invalid_resource",
        ),
        (
            "s3:GetObject",
            "aws-main:arn:aws:s3:::tessera-reports/a\"},{\"Effect\":\"Allow",
            "invalid_resource",
        ),
        (
            "s3:GetObject",
            "aws-main:arn:aws:s3:::tessera-reports/a b",
            "invalid_resource",
        ),
        (
            "s3:GetObject",
            "aws-main:arn:aws:s3:::tessera-reports/a\nb",
            "invalid_resource",
        ),
        (
            "s3:GetObject",
            "aws-main:s3://tessera-reports/reports/x",
            "invalid_resource",
        ),
        (
            "s3:GetObject",
            "aws-main:arn:evil:s3:::tessera-reports/x",
            "invalid_resource",
        ),
        (
            "dynamodb:Query",
            "aws-main:arn:aws:s3:::tessera-reports/reports/x",
            "invalid_resource",
        ),
    ];
    for (action, resource, code) in cases {
        let resp = app.capability(&token, action, resource).await;
        assert_error(resp, StatusCode::BAD_REQUEST, code).await;
    }
    let long = format!("aws-main:arn:aws:s3:::tessera-reports/{}", "k".repeat(600));
    assert_error(
        app.capability(&token, "s3:GetObject", &long).await,
        StatusCode::BAD_REQUEST,
        "invalid_resource",
    )
    .await;
    assert_eq!(app.count("capabilities").await, 0, "nothing issued");
    assert_eq!(app.count("leases").await, 0);
    assert!(moto().sessions_of(&run_id).await.is_empty(), "no STS call");
}

/// boto3, the AWS SDK for Python, reads `credential_process` exactly as printed by a
/// `credential_process` command, and the credentials then work (and only as scoped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aws_sdk_accepts_the_credential_process_object() {
    let app = app().await;
    let (_, _, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "s3:GetObject", REPORTS_2026)
        .await;
    let v = app.exchange_ok(cap["token"].as_str().unwrap()).await;
    let dir = crate::support::app::TempDir::new();
    let json_file = dir.0.join("credentials.json");
    std::fs::write(&json_file, v["credential_process"].to_string()).unwrap();
    let config = dir.0.join("config");
    std::fs::write(
        &config,
        format!(
            "[profile tool]\ncredential_process = cat {}\nregion = us-east-1\n",
            json_file.display()
        ),
    )
    .unwrap();
    let script = r#"
import sys, boto3, botocore.exceptions
s3 = boto3.Session(profile_name="tool").client("s3", endpoint_url=sys.argv[1])
print(s3.get_object(Bucket="tessera-reports", Key="reports/2026/q1.csv")["Body"].read().decode().splitlines()[0])
try:
    s3.get_object(Bucket="tessera-reports", Key="private/salaries.csv")
    print("private: allowed")
except botocore.exceptions.ClientError as e:
    print("private:", e.response["Error"]["Code"])
"#;
    let m = moto();
    let out = tokio::process::Command::new(&m.python)
        .arg("-c")
        .arg(script)
        .arg(&m.endpoint)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("AWS_CONFIG_FILE", &config)
        .env("AWS_SHARED_CREDENTIALS_FILE", dir.0.join("none"))
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout, "quarter,revenue\nprivate: AccessDenied\n");
}
