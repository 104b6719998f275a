//! Exchange: token backend, uses under concurrency, expiry, run end.

use crate::both_stores;
use crate::support::app::{assert_error, TestApp};
use crate::support::tokens::{claims_of, header_of};
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;

both_stores!(
    exchange_mints_an_audience_restricted_token_that_dies_with_the_run,
    uses_are_exhausted_exactly,
    uses_hold_under_50_concurrent_exchanges,
    expired_capability_cannot_be_exchanged,
    ended_run_capability_cannot_be_exchanged,
);

async fn exchange_mints_an_audience_restricted_token_that_dies_with_the_run(app: TestApp) {
    let (key, run_id, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    let cap_token = cap["token"].as_str().unwrap();
    let resp = app.exchange(cap_token).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["kind"], "token");
    assert_eq!(v["uses_left"], 2);
    assert_eq!(v["audience"], "https://reports.internal");
    let at = v["token"].as_str().unwrap();
    assert_eq!(header_of(at)["typ"], "at+jwt");
    let c = claims_of(at);
    assert_eq!(c["aud"], "https://reports.internal");
    assert_eq!(c["sub"], "alice");
    assert_eq!(c["scope"], "read");
    assert_eq!(c["resource"], "reports/q1");
    assert_eq!(c["act"]["sub"], format!("run:{run_id}"));
    assert_eq!(
        c["exp"],
        claims_of(cap_token)["exp"],
        "dies with the capability"
    );
    assert_eq!(c["jti"], v["lease_id"]);

    // The access token is not a capability.
    assert_error(
        app.exchange(at).await,
        StatusCode::UNAUTHORIZED,
        "invalid_token",
    )
    .await;
    let live = app.introspect(&key, at).await;
    assert_eq!(live["active"], true);
    assert_eq!(live["token_type"], "access_token");
    let cap_live = app.introspect(&key, cap_token).await;
    assert_eq!(cap_live["active"], true);
    assert_eq!(cap_live["uses_left"], 2);
    assert_eq!(app.count("leases").await, 1);

    let end: Value = app.end_run(&key, &run_id).await.json().await.unwrap();
    assert_eq!(end["revoked"]["leases"], 1);
    assert_eq!(
        app.introspect(&key, at).await,
        serde_json::json!({ "active": false })
    );
    assert_eq!(
        app.introspect(&key, cap_token).await,
        serde_json::json!({ "active": false })
    );
}

async fn uses_are_exhausted_exactly(app: TestApp) {
    let (_key, _run, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    let t = cap["token"].as_str().unwrap();
    let mut last = Value::Null;
    for left in [2, 1, 0] {
        last = app.exchange(t).await.json().await.unwrap();
        assert_eq!(last["uses_left"], left);
    }
    assert_error(
        app.exchange(t).await,
        StatusCode::FORBIDDEN,
        "uses_exhausted",
    )
    .await;
    // An exhausted capability is no longer active; what it bought still is.
    assert_eq!(
        app.introspect(&_key, t).await,
        serde_json::json!({ "active": false })
    );
    assert_eq!(
        app.introspect(&_key, last["token"].as_str().unwrap()).await["active"],
        true
    );
    assert_eq!(app.count("leases").await, 3);
}

async fn uses_hold_under_50_concurrent_exchanges(app: TestApp) {
    for (user, uses) in [("alice", 3usize), ("ursula", 50)] {
        let (_key, _run, token) = app.run_for(user).await;
        let cap = app
            .capability_ok(&token, "read", "svc-reports:reports/q1")
            .await;
        let cap_token = cap["token"].as_str().unwrap().to_owned();
        let attempts = uses + 50;
        let mut tasks = Vec::new();
        for _ in 0..attempts {
            let client = app.client.clone();
            let url = app.url("/v1/exchange");
            let body = serde_json::json!({ "capability": cap_token });
            tasks.push(tokio::spawn(async move {
                client.post(url).json(&body).send().await.unwrap().status()
            }));
        }
        let mut ok = 0;
        let mut exhausted = 0;
        for t in tasks {
            match t.await.unwrap() {
                StatusCode::OK => ok += 1,
                StatusCode::FORBIDDEN => exhausted += 1,
                other => panic!("unexpected {other}"),
            }
        }
        assert_eq!(ok, uses, "{user}: exactly @uses exchanges succeed");
        assert_eq!(exhausted, 50);
        let row = sqlx::query(
            &app.state
                .store
                .sql("SELECT uses_left FROM capabilities WHERE id = $1"),
        )
        .bind(cap["capability_id"].as_str().unwrap())
        .fetch_one(app.state.store.pool())
        .await
        .unwrap();
        assert_eq!(sqlx::Row::try_get::<i64, _>(&row, "uses_left").unwrap(), 0);
    }
    assert_eq!(app.count("leases").await, 53);
}

async fn expired_capability_cannot_be_exchanged(app: TestApp) {
    let (key, _run, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    app.state.clock.advance(Duration::from_secs(601));
    let t = cap["token"].as_str().unwrap();
    assert_error(
        app.exchange(t).await,
        StatusCode::UNAUTHORIZED,
        "token_expired",
    )
    .await;
    assert_eq!(
        app.introspect(&key, t).await,
        serde_json::json!({ "active": false })
    );
    assert_eq!(app.count("leases").await, 0);
}

async fn ended_run_capability_cannot_be_exchanged(app: TestApp) {
    let (key, run_id, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    app.end_run(&key, &run_id).await;
    assert_error(
        app.exchange(cap["token"].as_str().unwrap()).await,
        StatusCode::FORBIDDEN,
        "run_ended",
    )
    .await;
    assert_eq!(app.count("leases").await, 0);
}
