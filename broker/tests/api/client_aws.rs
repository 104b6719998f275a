//! The client side against moto on loopback: boto3 configured with
//! `credential_process = tessera credential-process …` (the real binary), `tessera
//! exec --aws` handing scoped credentials to a Python tool, and the Rust
//! `TesseraCredentials` provider refreshing through the broker.

use crate::support::aws::{app, REPORTS_2026};
use crate::support::moto::{moto, s3, SessionKeys};
use aws_credential_types::provider::ProvideCredentials;
use std::path::Path;

const BIN: &str = env!("CARGO_BIN_EXE_tessera");

/// A client of `app` holding the run token `token`.
fn client_for(app: &crate::support::app::TestApp, token: String) -> tessera_client::Client {
    tessera_client::Client::builder()
        .address(app.url(""))
        .run_token(secrecy::SecretString::from(token))
        .build()
        .unwrap()
}

/// The states of a run's capabilities, as its runtime reads them.
async fn capability_states(
    app: &crate::support::app::TestApp,
    key: &str,
    run_id: &str,
) -> Vec<String> {
    let caps = app.run_capabilities(key, run_id).await;
    caps.iter()
        .map(|c| c["state"].as_str().unwrap().to_owned())
        .collect()
}

/// A file holding `token`, as a runtime mounts it into a sandbox.
fn token_file(dir: &Path, token: &str) -> std::path::PathBuf {
    let f = dir.join("run.token");
    std::fs::write(&f, token).unwrap();
    crate::support::app::private(&f);
    f
}

const READ_BOTH: &str = r#"
import sys, boto3, botocore.exceptions
s3 = boto3.Session(profile_name=sys.argv[2] if len(sys.argv) > 2 else None).client("s3", endpoint_url=sys.argv[1], region_name="us-east-1")
print(s3.get_object(Bucket="tessera-reports", Key="reports/2026/q1.csv")["Body"].read().decode().splitlines()[0])
for what, call in [
    ("private", lambda: s3.get_object(Bucket="tessera-reports", Key="private/salaries.csv")),
    ("put", lambda: s3.put_object(Bucket="tessera-reports", Key="reports/2026/x.csv", Body=b"x")),
]:
    try:
        call()
        print(what + ": allowed")
    except botocore.exceptions.ClientError as e:
        print(what + ":", e.response["Error"]["Code"])
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boto3_gets_scoped_credentials_through_tessera_credential_process() {
    let app = app().await;
    let (key, run_id, token) = app.run_for("alice").await;
    let dir = crate::support::app::TempDir::new();
    let tokens = token_file(&dir.0, &token);
    let config = dir.0.join("config");
    std::fs::write(
        &config,
        format!(
            "[profile reports]\ncredential_process = {BIN} credential-process --action s3:GetObject --resource {REPORTS_2026}\nregion = us-east-1\n"
        ),
    )
    .unwrap();
    let m = moto();
    let out = tokio::process::Command::new(&m.python)
        .arg("-c")
        .arg(READ_BOTH)
        .arg(&m.endpoint)
        .arg("reports")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("AWS_CONFIG_FILE", &config)
        .env("AWS_SHARED_CREDENTIALS_FILE", dir.0.join("none"))
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("TESSERA_ADDR", app.url(""))
        .env("TESSERA_RUN_TOKEN_FILE", &tokens)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout,
        "quarter,revenue\nprivate: AccessDenied\nput: AccessDenied\n"
    );
    // Every STS session boto3 obtained is this run's, scoped to the one action.
    // (botocore refreshes credentials that expire within 15 minutes before each
    // call, so a 10-minute capability means one credential_process call per
    // request: see docs/clients.md.)
    let sessions = m.sessions_of(&run_id).await;
    assert!(!sessions.is_empty());
    for s in &sessions {
        let policy: serde_json::Value =
            serde_json::from_str(s["policy"].as_str().unwrap()).unwrap();
        assert_eq!(policy["Statement"][0]["Action"], "s3:GetObject", "{s}");
        assert_eq!(s["tags"]["tessera:run"], run_id.as_str());
    }
    // Each credential_process call superseded the one before: only the last
    // capability is live, the others were revoked when it was issued.
    let states = capability_states(&app, &key, &run_id).await;
    assert!(
        states.len() > 1,
        "boto3 called credential_process more than once: {states:?}"
    );
    let live = states.iter().filter(|s| *s == "active").count();
    assert_eq!(live, 1, "superseded capabilities left live: {states:?}");

    // Without a run token the command fails, and boto3 gets no credentials.
    let out = tokio::process::Command::new(BIN)
        .args([
            "credential-process",
            "--action",
            "s3:GetObject",
            "--resource",
            REPORTS_2026,
        ])
        .env_clear()
        .env("TESSERA_ADDR", app.url(""))
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_hands_a_python_tool_scoped_aws_credentials_and_nothing_else() {
    let app = app().await;
    let (_, run_id, token) = app.run_for("alice").await;
    let dir = crate::support::app::TempDir::new();
    let tokens = token_file(&dir.0, &token);
    let m = moto();
    let out = tokio::process::Command::new(BIN)
        .args(["exec", "--aws", &format!("s3:GetObject={REPORTS_2026}"), "--"])
        .arg(&m.python)
        .arg("-c")
        .arg(format!(
            "import os\nassert 'BROKER_SECRET' not in os.environ and 'TESSERA_RUN_TOKEN_FILE' not in os.environ\n{READ_BOTH}"
        ))
        .arg(&m.endpoint)
        .env("TESSERA_ADDR", app.url(""))
        .env("TESSERA_RUN_TOKEN_FILE", &tokens)
        .env("BROKER_SECRET", "must-not-pass")
        .env("AWS_ACCESS_KEY_ID", "AKIAPARENTKEY")
        .env("AWS_SECRET_ACCESS_KEY", "parent-secret")
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
    assert_eq!(
        stdout,
        "quarter,revenue\nprivate: AccessDenied\nput: AccessDenied\n"
    );
    // Revoked when the tool exited.
    let resp = app
        .get(&format!("/v1/runs/{run_id}"), Some(&app.admin_token))
        .await;
    let v: serde_json::Value = resp.json().await.unwrap();
    let caps = v["capabilities"].as_array().unwrap();
    assert_eq!(caps.len(), 1);
    assert_eq!(caps[0]["state"], "revoked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_provider_fetches_scoped_credentials_and_caches_them() {
    let app = app().await;
    let (_, run_id, token) = app.run_for("alice").await;
    let client = client_for(&app, token);
    let provider =
        tessera_client::aws::TesseraCredentials::new(client, "s3:GetObject", REPORTS_2026);
    let creds = provider.provide_credentials().await.unwrap();
    assert!(!format!("{provider:?}").contains(creds.secret_access_key()));
    let keys = SessionKeys {
        access_key_id: creds.access_key_id().to_owned(),
        secret_access_key: creds.secret_access_key().to_owned(),
        session_token: creds.session_token().map(str::to_owned),
    };
    let (status, body) = s3(&keys, "GET", "/tessera-reports/reports/2026/q1.csv", b"").await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = s3(&keys, "GET", "/tessera-reports/private/salaries.csv", b"").await;
    assert_eq!(status, 403);
    // Fresh credentials are reused: one STS session for several calls.
    let again = provider.provide_credentials().await.unwrap();
    assert_eq!(again.access_key_id(), creds.access_key_id());
    assert_eq!(moto().sessions_of(&run_id).await.len(), 1);
    assert!(creds.expiry().is_some());
}

/// A refresh supersedes: the capability behind the credentials it replaces is
/// revoked when the new one is issued, so a long-lived provider holds one live
/// capability, not one per refresh (issue 22, item 8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_provider_revokes_what_a_refresh_replaces() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let app = app().await;
    let (key, run_id, token) = app.run_for("alice").await;
    let client = client_for(&app, token);
    let skew = std::sync::Arc::new(AtomicU64::new(0));
    let s = skew.clone();
    let provider = tessera_client::aws::TesseraCredentials::with_clock(
        client,
        "s3:GetObject",
        REPORTS_2026,
        std::sync::Arc::new(move || {
            std::time::SystemTime::now() + std::time::Duration::from_secs(s.load(Ordering::SeqCst))
        }),
    );
    let first = provider.provide_credentials().await.unwrap();
    // Past the first credentials' refresh window: the next call refreshes.
    skew.store(24 * 3600, Ordering::SeqCst);
    let second = provider.provide_credentials().await.unwrap();
    assert_ne!(first.access_key_id(), second.access_key_id());
    let states = capability_states(&app, &key, &run_id).await;
    assert_eq!(states, ["revoked", "active"]);
    let audit = app.audit("event=capability.revoked").await;
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0]["reason"], "superseded", "{audit:?}");
}

/// `exec --aws` exports the backend's region, so an SDK client needs no
/// region of its own (issue 15: `boto3.client('dynamodb')` failed with
/// `NoRegionError`), and `--aws` repeats, a named one under its own prefix,
/// each credential scoped to its own action.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_exports_the_region_and_repeats_aws_under_names() {
    let app = app().await;
    let (_, run_id, token) = app.run_for("alice").await;
    let dir = crate::support::app::TempDir::new();
    let tokens = token_file(&dir.0, &token);
    let m = moto();
    let tool = r#"
import os, sys, boto3, botocore.exceptions
assert os.environ["AWS_REGION"] == "us-east-1" and os.environ["AWS_DEFAULT_REGION"] == "us-east-1", os.environ
boto3.client("dynamodb", endpoint_url=sys.argv[1])  # no region_name: NoRegionError without AWS_REGION
s3 = boto3.client("s3", endpoint_url=sys.argv[1])
print(s3.get_object(Bucket="tessera-reports", Key="reports/2026/q1.csv")["Body"].read().decode().splitlines()[0])
named = boto3.Session(
    aws_access_key_id=os.environ["SECOND_AWS_ACCESS_KEY_ID"],
    aws_secret_access_key=os.environ["SECOND_AWS_SECRET_ACCESS_KEY"],
    aws_session_token=os.environ["SECOND_AWS_SESSION_TOKEN"],
    region_name=os.environ["SECOND_AWS_REGION"],
).client("s3", endpoint_url=sys.argv[1])
assert named._request_signer._credentials.access_key != s3._request_signer._credentials.access_key
try:
    named.get_object(Bucket="tessera-reports", Key="private/salaries.csv")
    print("named private: allowed")
except botocore.exceptions.ClientError as e:
    print("named private:", e.response["Error"]["Code"])
"#;
    let out = tokio::process::Command::new(BIN)
        .args(["exec", "--aws", &format!("s3:GetObject={REPORTS_2026}")])
        .args([
            "--aws",
            &format!("second@s3:GetObject={REPORTS_2026}"),
            "--",
        ])
        .arg(&m.python)
        .arg("-c")
        .arg(tool)
        .arg(&m.endpoint)
        .env("TESSERA_ADDR", app.url(""))
        .env("TESSERA_RUN_TOKEN_FILE", &tokens)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The named credential is scoped to its own grant: q1.csv only.
    assert_eq!(stdout, "quarter,revenue\nnamed private: AccessDenied\n");
    let resp = app
        .get(&format!("/v1/runs/{run_id}"), Some(&app.admin_token))
        .await;
    let v: serde_json::Value = resp.json().await.unwrap();
    let caps = v["capabilities"].as_array().unwrap();
    assert_eq!(caps.len(), 2, "one capability per --aws");
    assert!(caps.iter().all(|c| c["state"] == "revoked"), "{caps:?}");
    // Two unnamed --aws would set the same variables: refused before anything
    // is asked for.
    let out = tokio::process::Command::new(BIN)
        .args(["exec", "--aws", &format!("s3:GetObject={REPORTS_2026}")])
        .args([
            "--aws",
            &format!("s3:GetObject={REPORTS_2026}"),
            "--",
            "true",
        ])
        .env("TESSERA_ADDR", app.url(""))
        .env("TESSERA_RUN_TOKEN_FILE", &tokens)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("without a NAME@"));
}
