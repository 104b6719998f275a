//! `GET /v1/admin/audit/verify`: tampering with the audit table directly is caught,
//! and the report names the first broken row and how it broke.

use crate::both_stores;
use crate::helpers::TestApp;
use serde_json::Value;

both_stores!(
    an_untouched_chain_verifies,
    an_edited_row_is_caught,
    a_deleted_row_is_caught,
    swapped_rows_are_caught,
    a_cut_off_tail_is_caught,
);

/// A full flow so the log has a few dozen rows; returns the verification report.
async fn busy(app: &TestApp) {
    let (key, run_id, token) = app.run_for("alice").await;
    for i in 0..3 {
        let cap = app
            .capability_ok(&token, "read", &format!("svc-reports:reports/{i}"))
            .await;
        app.exchange(cap["token"].as_str().unwrap()).await;
    }
    let _ = app.capability(&token, "read", "svc-reports:secret").await;
    app.post(&format!("/v1/runs/{run_id}/end"), Some(&key), Value::Null)
        .await;
}

async fn report(app: &TestApp) -> Value {
    let resp = app
        .get("/v1/admin/audit/verify", Some(&app.admin_token))
        .await;
    assert_eq!(resp.status(), reqwest::StatusCode::OK);
    resp.json().await.unwrap()
}

async fn exec(app: &TestApp, sql: &str) {
    sqlx::query(sql)
        .execute(app.state.store.pool())
        .await
        .unwrap();
}

async fn an_untouched_chain_verifies(app: TestApp) {
    busy(&app).await;
    let r = report(&app).await;
    assert_eq!(r["ok"], true, "{r}");
    assert!(r["rows"].as_i64().unwrap() >= 10);
    assert_eq!(r["rows"], r["head_seq"]);
    // Only the admin may ask.
    let (key, _r, _t) = app.run_for("alice").await;
    assert_eq!(
        app.get("/v1/admin/audit/verify", Some(&key)).await.status(),
        401
    );
}

async fn an_edited_row_is_caught(app: TestApp) {
    busy(&app).await;
    exec(
        &app,
        "UPDATE audit SET actor = actor || '-forged' WHERE seq = 6",
    )
    .await;
    let r = report(&app).await;
    assert_eq!(r["ok"], false);
    assert_eq!(r["first_problem"]["seq"], 6);
    assert_eq!(r["first_problem"]["kind"], "edited");
}

async fn a_deleted_row_is_caught(app: TestApp) {
    busy(&app).await;
    exec(&app, "DELETE FROM audit WHERE seq = 5").await;
    let r = report(&app).await;
    assert_eq!(r["first_problem"]["seq"], 5);
    assert_eq!(r["first_problem"]["kind"], "deleted");
}

async fn swapped_rows_are_caught(app: TestApp) {
    busy(&app).await;
    // Move row 7 to position 4 and row 4 to 7, hashes and all.
    exec(&app, "UPDATE audit SET seq = -1 WHERE seq = 4").await;
    exec(&app, "UPDATE audit SET seq = 4 WHERE seq = 7").await;
    exec(&app, "UPDATE audit SET seq = 7 WHERE seq = -1").await;
    let r = report(&app).await;
    assert_eq!(r["ok"], false);
    assert_eq!(r["first_problem"]["seq"], 4);
    assert_eq!(r["first_problem"]["kind"], "edited", "{r}");
}

async fn a_cut_off_tail_is_caught(app: TestApp) {
    busy(&app).await;
    let head = report(&app).await["head_seq"].as_i64().unwrap();
    exec(
        &app,
        &format!("DELETE FROM audit WHERE seq >= {}", head - 1),
    )
    .await;
    let r = report(&app).await;
    assert_eq!(r["first_problem"]["kind"], "truncated", "{r}");
    assert_eq!(r["first_problem"]["seq"], head - 1);
}
