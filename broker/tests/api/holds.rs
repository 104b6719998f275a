//! Holds: a capability asked for with a hold lapses unless renewed, and the
//! broker revokes it — leases and the downstream database user included —
//! with nobody left to ask. What `tessera exec` relies on when it is killed.
//! Slots: a capability issued in a slot supersedes the run's earlier ones in
//! it. What `tessera credential-process` and the AWS provider rely on.

use crate::support::app::{assert_error, Db, DbBackends, TestApp};
use crate::support::postgres::PgFixture;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::Duration;

async fn held(app: &TestApp, token: &str, resource: &str, hold: &str) -> Value {
    let action = if resource.starts_with("svc-") {
        "read"
    } else {
        "select"
    };
    let resp = app
        .post(
            "/v1/capabilities",
            Some(token),
            json!({ "action": action, "resource": resource, "hold": hold }),
        )
        .await;
    let status = resp.status();
    let v: Value = resp.json().await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{v}");
    v
}

async fn renew(app: &TestApp, token: &str, ids: &[&str]) -> Value {
    let resp = app
        .post(
            "/v1/capabilities/renew",
            Some(token),
            json!({ "capability_ids": ids }),
        )
        .await;
    let status = resp.status();
    let v: Value = resp.json().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{v}");
    v
}

fn renewed(v: &Value) -> Vec<&str> {
    v["renewed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["capability_id"].as_str().unwrap())
        .collect()
}

fn lapsed(v: &Value) -> Vec<&str> {
    v["lapsed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect()
}

async fn sweep_and_settle(app: &TestApp) {
    tessera_broker::jobs::expiry::sweep(&app.state)
        .await
        .unwrap();
    tessera_broker::jobs::revocation::run_once(&app.state)
        .await
        .unwrap();
}

async fn a_lapsed_hold_revokes_the_capability_and_removes_its_user(db: Db) {
    let fx = PgFixture::new().await;
    let app = TestApp::builder(db)
        .db_backends(DbBackends::default())
        .start()
        .await;
    let (_key, _run, token) = app.run_for("alice").await;
    let resource = fx.resource("granted");

    let kept = held(&app, &token, &resource, "3s").await;
    let dropped = held(&app, &token, &resource, "3s").await;
    let unexchanged = held(&app, &token, &resource, "3s").await;
    assert!(kept["lapses_at"].is_string(), "{kept}");
    let kept_user = app.exchange_ok(&kept).await["username"]
        .as_str()
        .unwrap()
        .to_owned();
    let dropped_user = app.exchange_ok(&dropped).await["username"]
        .as_str()
        .unwrap()
        .to_owned();
    let (kept_id, dropped_id, unexchanged_id) = (
        kept["capability_id"].as_str().unwrap(),
        dropped["capability_id"].as_str().unwrap(),
        unexchanged["capability_id"].as_str().unwrap(),
    );

    // Renewed every 2 s: the hold never lapses while renewed.
    app.state.clock.advance(Duration::from_secs(2));
    assert_eq!(renewed(&renew(&app, &token, &[kept_id]).await), [kept_id]);
    sweep_and_settle(&app).await;
    assert!(fx.role_exists(&dropped_user).await, "not lapsed yet");
    app.state.clock.advance(Duration::from_secs(2));
    assert_eq!(renewed(&renew(&app, &token, &[kept_id]).await), [kept_id]);
    // The others were not renewed: lapsed, and refused at once, before any sweep.
    let resp = app.exchange(unexchanged["token"].as_str().unwrap()).await;
    assert_error(resp, StatusCode::FORBIDDEN, "capability_lapsed").await;
    let v = renew(&app, &token, &[dropped_id, unexchanged_id]).await;
    assert!(
        renewed(&v).is_empty(),
        "a lapsed hold is never revived: {v}"
    );
    assert_eq!(lapsed(&v), [dropped_id, unexchanged_id]);
    sweep_and_settle(&app).await;
    app.state.clock.advance(Duration::from_secs(2));
    assert_eq!(renewed(&renew(&app, &token, &[kept_id]).await), [kept_id]);
    sweep_and_settle(&app).await;
    assert!(fx.role_exists(&kept_user).await, "renewed: still there");

    // Exactly the lapsed ones were revoked, audited, and their user removed.
    let lapses = app.audit("event=capability.lapsed").await;
    let mut ids: Vec<&str> = lapses
        .iter()
        .map(|e| e["capability_id"].as_str().unwrap())
        .collect();
    ids.sort();
    let mut want = vec![dropped_id, unexchanged_id];
    want.sort();
    assert_eq!(ids, want);
    assert!(!fx.role_exists(&dropped_user).await, "lapsed: user dropped");
    assert!(fx.role_exists(&kept_user).await);
    let intro = app
        .introspect(&app.admin_token, dropped["token"].as_str().unwrap())
        .await;
    assert_eq!(intro["active"], false, "{intro}");

    // The holder stops renewing: the last one lapses too.
    app.state.clock.advance(Duration::from_secs(4));
    sweep_and_settle(&app).await;
    assert!(!fx.role_exists(&kept_user).await, "lapsed: user dropped");
    assert!(lapsed(&renew(&app, &token, &[kept_id]).await).contains(&kept_id));
    fx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_hold_revokes_the_capability_and_removes_its_user_sqlite() {
    a_lapsed_hold_revokes_the_capability_and_removes_its_user(Db::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_hold_revokes_the_capability_and_removes_its_user_postgres() {
    a_lapsed_hold_revokes_the_capability_and_removes_its_user(Db::Postgres).await
}

/// Only the run's own held, live capabilities are renewed; bad holds and
/// bad renewals get a stable code and change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_are_renewed_only_for_their_own_run() {
    let app = TestApp::spawn(Db::Sqlite).await;
    let (_k, _r, alice) = app.run_for("alice").await;
    let (_k, _r, bob) = app.run_for("carol").await;
    let resource = "svc-reports:reports/q1";
    let hers = held(&app, &alice, resource, "10s").await;
    let hers_id = hers["capability_id"].as_str().unwrap();
    let unheld = app.capability_ok(&alice, "read", resource).await;
    let unheld_id = unheld["capability_id"].as_str().unwrap();
    assert!(unheld.get("lapses_at").is_none(), "{unheld}");

    let v = renew(&app, &bob, &[hers_id]).await;
    assert_eq!(lapsed(&v), [hers_id], "another run's: not renewed");
    let v = renew(&app, &alice, &[unheld_id, hers_id, hers_id]).await;
    assert_eq!(renewed(&v), [hers_id]);
    assert_eq!(lapsed(&v), [unheld_id], "no hold: nothing to renew");

    for hold in ["1s", "2h", "soon", "0s", ""] {
        let resp = app
            .post(
                "/v1/capabilities",
                Some(&alice),
                json!({ "action": "read", "resource": resource, "hold": hold }),
            )
            .await;
        assert_error(resp, StatusCode::BAD_REQUEST, "invalid_hold").await;
    }
    let too_many: Vec<String> = (0..101).map(|_| tessera_broker::ids::new_id()).collect();
    for ids in [json!([]), json!(too_many), json!(["not-an-id"])] {
        let resp = app
            .post(
                "/v1/capabilities/renew",
                Some(&alice),
                json!({ "capability_ids": ids }),
            )
            .await;
        assert_error(resp, StatusCode::BAD_REQUEST, "invalid_request").await;
    }
    let resp = app
        .post(
            "/v1/capabilities/renew",
            None,
            json!({ "capability_ids": [hers_id] }),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);

    // A revoked capability's hold is not renewed either.
    let resp = app
        .post(
            &format!("/v1/capabilities/{hers_id}/revoke"),
            Some(&alice),
            Value::Null,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(lapsed(&renew(&app, &alice, &[hers_id]).await), [hers_id]);
    // Lapsed revocations are the sweeper's, nothing else's: nothing was lapsed.
    tessera_broker::jobs::expiry::sweep(&app.state)
        .await
        .unwrap();
    assert!(app.audit("event=capability.lapsed").await.is_empty());
}

async fn in_slot(app: &TestApp, token: &str, slot: &str) -> reqwest::Response {
    app.post(
        "/v1/capabilities",
        Some(token),
        json!({ "action": "read", "resource": "svc-reports:reports/q1", "slot": slot }),
    )
    .await
}

async fn live_ids(app: &TestApp, key: &str, run_id: &str) -> Vec<String> {
    let caps = app.run_capabilities(key, run_id).await;
    caps.iter()
        .filter(|c| c["state"] == "active")
        .map(|c| c["capability_id"].as_str().unwrap().to_owned())
        .collect()
}

/// A slot keeps one live capability per run: the last issued — also when
/// twenty are asked for at once — while other slots, unslotted capabilities
/// and another run's same slot are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_keeps_one_live_capability_per_run() {
    let app = TestApp::spawn(Db::Sqlite).await;
    let (key, run_id, alice) = app.run_for("alice").await;
    let (other_key, other_run, other) = app.run_for("alice").await;
    let unslotted = app
        .capability_ok(&alice, "read", "svc-reports:reports/q1")
        .await;
    let theirs: Value = in_slot(&app, &other, "helper").await.json().await.unwrap();
    let elsewhere: Value = in_slot(&app, &alice, "another").await.json().await.unwrap();

    let asks = (0..20).map(|_| in_slot(&app, &alice, "helper"));
    let answers = futures_util::future::join_all(asks).await;
    assert!(answers.iter().all(|r| r.status() == StatusCode::CREATED));
    let mut live = live_ids(&app, &key, &run_id).await;
    live.sort();
    assert_eq!(live.len(), 3, "one per slot, plus the unslotted: {live:?}");
    for kept in [&unslotted, &elsewhere] {
        assert!(live.contains(&kept["capability_id"].as_str().unwrap().to_owned()));
    }
    assert_eq!(
        live_ids(&app, &other_key, &other_run).await,
        [theirs["capability_id"].as_str().unwrap()]
    );
    let superseded = app.audit("event=capability.revoked").await;
    assert_eq!(superseded.len(), 19, "{superseded:?}");
    assert!(superseded.iter().all(|e| e["reason"] == "superseded"));

    for slot in ["", "has space", &"x".repeat(641), "tab\there"] {
        let resp = in_slot(&app, &alice, slot).await;
        assert_error(resp, StatusCode::BAD_REQUEST, "invalid_slot").await;
    }
}
