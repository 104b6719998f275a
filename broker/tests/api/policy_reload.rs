//! Live policy reload: a valid set is swapped in whole, an invalid one is rejected
//! with its errors and changes nothing, both are audited, the file watch picks
//! up edits, and requests racing a reload see one set or the other, never a mix.

use crate::both_stores;
use crate::support::app::{assert_error, TestApp, TEST_POLICY};
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;

both_stores!(
    a_valid_set_is_swapped_in_and_audited,
    an_invalid_set_is_rejected_and_the_old_one_stays,
    the_file_watch_reloads_on_change,
    requests_racing_reloads_see_one_whole_set,
);

/// The test policy plus one permit that lets alice read `svc-reports:extra/*`.
fn with_extra_permit(uses: u32) -> String {
    format!(
        "{TEST_POLICY}\n@id(\"extra\") @uses(\"{uses}\")\npermit (principal == Tessera::User::\"alice\", action == Tessera::Action::\"read\", resource)\nwhen {{ resource.backend == \"svc-reports\" && resource.path like \"extra/*\" }};\n"
    )
}

async fn reload(app: &TestApp) -> reqwest::Response {
    app.post(
        "/v1/admin/policy/reload",
        Some(&app.admin_token),
        Value::Null,
    )
    .await
}

async fn a_valid_set_is_swapped_in_and_audited(app: TestApp) {
    let (key, _r, token) = app.run_for("alice").await;
    let before = app.capability(&token, "read", "svc-reports:extra/1").await;
    assert_error(before, StatusCode::FORBIDDEN, "capability_denied").await;

    std::fs::write(app.policy_dir().join("test.cedar"), with_extra_permit(7)).unwrap();
    // Only the admin may reload.
    assert_error(
        app.post("/v1/admin/policy/reload", Some(&key), Value::Null)
            .await,
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
    )
    .await;
    let resp = reload(&app).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["policies"], 7);
    assert_eq!(v["sha256"].as_str().unwrap().len(), 64);

    let cap = app
        .capability_ok(&token, "read", "svc-reports:extra/1")
        .await;
    assert_eq!(cap["uses"], 7);
    let rows = app.audit("event=policy.reloaded").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["actor"], "admin");
    assert!(rows[0]["detail"].as_str().unwrap().contains(&format!(
        "policies=7 sha256={}",
        v["sha256"].as_str().unwrap()
    )));
}

async fn an_invalid_set_is_rejected_and_the_old_one_stays(app: TestApp) {
    let (_k, _r, token) = app.run_for("alice").await;
    let dir = app.policy_dir();
    // A syntax error, an unknown action, and a bad annotation: each is refused.
    for (file, text, expect) in [
        (
            "test.cedar",
            format!("{TEST_POLICY}\npermit (principal, action, resource"),
            "test.cedar:",
        ),
        (
            "more.cedar",
            "permit (principal, action == Tessera::Action::\"launch-missiles\", resource);"
                .to_owned(),
            "more.cedar:1:",
        ),
        (
            "more.cedar",
            "@ttl(\"forever\") permit (principal, action == Tessera::Action::\"read\", resource);"
                .to_owned(),
            "more.cedar:1:",
        ),
    ] {
        std::fs::write(dir.join("test.cedar"), TEST_POLICY).unwrap();
        let _ = std::fs::remove_file(dir.join("more.cedar"));
        std::fs::write(dir.join(file), &text).unwrap();
        let resp = reload(&app).await;
        let v = assert_error(resp, StatusCode::UNPROCESSABLE_ENTITY, "invalid_policy").await;
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(expect), "{msg}");
        assert!(msg.contains("previous one stays in force"), "{msg}");
        // The old set still decides: allowed stays allowed, denied stays denied.
        app.capability_ok(&token, "read", "svc-reports:reports/q1")
            .await;
        let resp = app.capability(&token, "read", "svc-reports:secret").await;
        assert_error(resp, StatusCode::FORBIDDEN, "capability_denied").await;
    }
    let rows = app.audit("event=policy.reload_rejected").await;
    assert_eq!(rows.len(), 3);
    for r in &rows {
        assert_eq!(r["decision"], "deny");
        assert_eq!(r["reason"], "invalid_policy");
        assert!(r["detail"].as_str().unwrap().starts_with("errors="));
    }
    assert!(app.audit("event=policy.reloaded").await.is_empty());
}

async fn the_file_watch_reloads_on_change(app: TestApp) {
    let (_k, _r, token) = app.run_for("alice").await;
    let watcher = tokio::spawn(tessera_broker::policy_reload::watch(
        app.state.clone(),
        Duration::from_millis(100),
    ));
    // Let the watcher take its first fingerprint, then edit.
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::write(app.policy_dir().join("test.cedar"), with_extra_permit(3)).unwrap();
    let mut reloaded = Vec::new();
    for _ in 0..100 {
        reloaded = app.audit("event=policy.reloaded").await;
        if !reloaded.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(reloaded.len(), 1, "the watcher did not reload within 10s");
    assert_eq!(reloaded[0]["actor"], "watch");
    app.capability_ok(&token, "read", "svc-reports:extra/1")
        .await;
    // An unchanged directory is not reloaded again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.audit("event=policy.reloaded").await.len(), 1);
    watcher.abort();
}

async fn requests_racing_reloads_see_one_whole_set(app: TestApp) {
    // Two valid sets that differ only in the uses they grant on extra/*; every
    // issued capability must carry one of the two values.
    let (_k, _r, token) = app.run_for("alice").await;
    let file = app.policy_dir().join("test.cedar");
    std::fs::write(&file, with_extra_permit(11)).unwrap();
    assert_eq!(reload(&app).await.status(), StatusCode::OK);
    let flipper = {
        let app_state = app.state.clone();
        let file = file.clone();
        tokio::spawn(async move {
            for i in 0..20 {
                std::fs::write(&file, with_extra_permit(if i % 2 == 0 { 22 } else { 11 })).unwrap();
                tessera_broker::policy_reload::reload(&app_state, "admin", None)
                    .await
                    .unwrap();
            }
        })
    };
    let mut seen = std::collections::BTreeSet::new();
    let requests: Vec<_> = (0..60)
        .map(|i| {
            let client = app.client.clone();
            let url = app.url("/v1/capabilities");
            let token = token.clone();
            tokio::spawn(async move {
                client
                    .post(url)
                    .bearer_auth(token)
                    .json(&serde_json::json!({ "action": "read", "resource": format!("svc-reports:extra/{i}") }))
                    .send()
                    .await
                    .unwrap()
                    .json::<Value>()
                    .await
                    .unwrap()
            })
        })
        .collect();
    for r in requests {
        let v = r.await.unwrap();
        seen.insert(v["uses"].as_u64().expect("issued"));
    }
    flipper.await.unwrap();
    assert!(seen.iter().all(|u| *u == 11 || *u == 22), "{seen:?}");
}
