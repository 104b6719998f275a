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

/// An approver key for `user` (a release manager in the test entities), made
/// by the administrator.
pub async fn approver_key(app: &TestApp, user: &str) -> String {
    let resp = app
        .post(
            "/v1/admin/approvers",
            Some(&app.admin_token),
            serde_json::json!({"name": format!("{user}-key"), "user": user}),
        )
        .await;
    assert_eq!(resp.status(), 201);
    let v: Value = resp.json().await.unwrap();
    v["key"].as_str().unwrap().to_owned()
}
