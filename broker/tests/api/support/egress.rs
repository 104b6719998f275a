//! What the gateway and injection tests read back: a refusal's error code and
//! a run's audit rows of one event, once the background writes settle.

use crate::support::app::TestApp;
use serde_json::Value;

/// The `error.code` of a JSON error body, or why there is none.
pub fn code(body: &str) -> String {
    serde_json::from_str::<Value>(body.trim())
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("(no JSON error in {body:?})"))
}

/// Audit rows of `event` for the run, at least `at_least` of them.
pub async fn audit_rows(app: &TestApp, run_id: &str, event: &str, at_least: usize) -> Vec<Value> {
    for _ in 0..100 {
        let rows: Vec<Value> = app
            .audit(&format!("run={run_id}&event={event}&limit=500"))
            .await
            .into_iter()
            .filter(|r| r["event"] == event)
            .collect();
        if rows.len() >= at_least {
            return rows;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("fewer than {at_least} {event} rows for run {run_id}");
}

/// Approves approval `id` with a new approver key of `user` (a release
/// manager in the test entities), made by the administrator.
pub async fn approve(app: &TestApp, user: &str, id: &str) {
    let resp = app
        .post(
            "/v1/admin/approvers",
            Some(&app.admin_token),
            serde_json::json!({"name": format!("{user}-{id}"), "user": user}),
        )
        .await;
    assert_eq!(resp.status(), 201);
    let v: Value = resp.json().await.unwrap();
    let key = v["key"].as_str().unwrap();
    let resp = app
        .post(
            &format!("/v1/approvals/{id}/approve"),
            Some(key),
            serde_json::json!({"comment": "approved by the test"}),
        )
        .await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
}
