//! The `aws-sts` backend against moto on loopback: its policy, its backend
//! configuration, and an app that has both.

use crate::support::app::{Db, Extra, TestApp};
use crate::support::moto::{moto, ACCOUNT, EXTERNAL_ID, ROLE};
use reqwest::StatusCode;
use serde_json::{json, Value};

pub const POLICY: &str = r#"
@id("aws-read-reports") @ttl("10m") @uses("5")
permit (principal in Tessera::Group::"analysts", action == Tessera::Action::"s3:GetObject", resource)
when { resource.backend like "aws-*" && resource.path like "arn:aws:s3:::tessera-reports/reports/*" };

@id("aws-list-reports") @ttl("10m")
permit (principal in Tessera::Group::"analysts", action == Tessera::Action::"s3:ListBucket", resource)
when { resource.backend like "aws-*" && resource.path == "arn:aws:s3:::tessera-reports" };
"#;

pub fn backend(name: &str, role: &str, extra: &str) -> String {
    let m = moto();
    format!(
        "[backends.{name}]\nkind = \"aws-sts\"\nrole_arn = \"arn:aws:iam::{ACCOUNT}:role/{role}\"\n\
         region = \"us-east-1\"\nendpoint_url = \"{}\"\n{extra}\n",
        m.endpoint
    )
}

pub fn broker_env() -> Vec<(String, String)> {
    let m = moto();
    vec![
        ("AWS_ACCESS_KEY_ID".into(), m.broker.access_key_id.clone()),
        (
            "AWS_SECRET_ACCESS_KEY".into(),
            m.broker.secret_access_key.clone(),
        ),
    ]
}

/// A broker with backend `aws-main` (role tessera-agents, external id) and
/// `aws-nobody` (a role that does not exist).
pub async fn app() -> TestApp {
    let config = backend(
        "aws-main",
        ROLE,
        &format!("external_id = \"{EXTERNAL_ID}\""),
    ) + &backend("aws-nobody", "does-not-exist", "");
    TestApp::builder(Db::Sqlite)
        .extra(Extra {
            config,
            policy: POLICY.to_owned(),
            env: broker_env(),
        })
        .start()
        .await
}

pub async fn capability_with_ttl(
    app: &TestApp,
    run_token: &str,
    action: &str,
    resource: &str,
    ttl: &str,
) -> Value {
    let resp = app
        .post(
            "/v1/capabilities",
            Some(run_token),
            json!({ "action": action, "resource": resource, "ttl": ttl }),
        )
        .await;
    let status = resp.status();
    let v: Value = resp.json().await.expect("json");
    assert_eq!(status, StatusCode::CREATED, "{v}");
    v
}

pub const REPORTS_2026: &str = "aws-main:arn:aws:s3:::tessera-reports/reports/2026/*";
