//! Runs: start, scope, ownership, end, expiry.

use crate::both_stores;
use crate::support::app::{assert_error, TestApp};
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;

both_stores!(
    run_lifecycle_and_idempotent_end,
    runtime_scope_limits_users_and_kinds,
    runtimes_cannot_see_or_end_each_others_runs,
    expired_run_is_treated_as_ended,
    bad_credentials_are_401,
    no_capability_outlives_a_concurrent_run_end,
);

async fn run_lifecycle_and_idempotent_end(app: TestApp) {
    let (key, run_id, token) = app.run_for("alice").await;
    assert!(token.starts_with("tsr_run_") && token.len() == 8 + 43);
    let cap = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;

    let view: Value = app
        .get(&format!("/v1/runs/{run_id}"), Some(&key))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(view["state"], "active");
    assert_eq!(view["user"], "alice");
    assert_eq!(
        view["capabilities"][0]["capability_id"],
        cap["capability_id"]
    );
    assert_eq!(view["capabilities"][0]["state"], "active");

    let end: Value = app.end_run(&key, &run_id).await.json().await.unwrap();
    assert_eq!(end["run_id"], run_id.as_str());
    assert_eq!(end["revoked"]["capabilities"], 1);
    let again: Value = app.end_run(&key, &run_id).await.json().await.unwrap();
    assert_eq!(
        again["revoked"]["capabilities"], 0,
        "nothing is revoked twice"
    );

    let view: Value = app
        .get(&format!("/v1/runs/{run_id}"), Some(&key))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(view["state"], "ended");
    assert_eq!(view["capabilities"][0]["state"], "revoked");
    assert_error(
        app.capability(&token, "read", "svc-reports:reports/q1")
            .await,
        StatusCode::FORBIDDEN,
        "run_ended",
    )
    .await;
    assert_eq!(
        app.count("capabilities").await,
        1,
        "nothing issued after the end"
    );
    // The admin may end and read any run too.
    let resp = app
        .get(&format!("/v1/runs/{run_id}"), Some(&app.admin_token))
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
}

async fn runtime_scope_limits_users_and_kinds(app: TestApp) {
    let key = app
        .create_runtime("scoped", "alice,team-*", "summarize")
        .await;
    assert_eq!(
        app.start_run_with(&key, "alice", "summarize", &[])
            .await
            .status(),
        StatusCode::CREATED
    );
    assert_eq!(
        app.start_run_with(&key, "team-x", "summarize", &[])
            .await
            .status(),
        StatusCode::CREATED
    );
    let runs_before = app.count("runs").await;
    assert_error(
        app.start_run_with(&key, "mallory", "summarize", &[]).await,
        StatusCode::FORBIDDEN,
        "runtime_scope",
    )
    .await;
    assert_error(
        app.start_run_with(&key, "alice", "deploy", &[]).await,
        StatusCode::FORBIDDEN,
        "runtime_scope",
    )
    .await;
    assert_eq!(
        app.count("runs").await,
        runs_before,
        "no run stored for an out-of-scope request"
    );
    let denials = sqlx::query("SELECT COUNT(*) AS n FROM audit WHERE event = 'run.denied'")
        .fetch_one(app.state.store.pool())
        .await
        .unwrap();
    assert_eq!(sqlx::Row::try_get::<i64, _>(&denials, "n").unwrap(), 2);
}

async fn runtimes_cannot_see_or_end_each_others_runs(app: TestApp) {
    let (_key_a, run_a, token_a) = app.run_for("alice").await;
    let key_b = app.create_runtime("other", "*", "*").await;
    assert_error(
        app.get(&format!("/v1/runs/{run_a}"), Some(&key_b)).await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    assert_error(
        app.end_run(&key_b, &run_a).await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    // Run A is untouched.
    app.capability_ok(&token_a, "read", "svc-reports:reports/q1")
        .await;
    // The end attempt is audited.
    let probes = sqlx::query("SELECT COUNT(*) AS n FROM audit WHERE reason = 'not_found'")
        .fetch_one(app.state.store.pool())
        .await
        .unwrap();
    assert_eq!(sqlx::Row::try_get::<i64, _>(&probes, "n").unwrap(), 1);
    // A run token is not a runtime credential, even for its own run.
    assert_error(
        app.get(&format!("/v1/runs/{run_a}"), Some(&token_a)).await,
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
    )
    .await;
}

async fn expired_run_is_treated_as_ended(app: TestApp) {
    let key = app.create_runtime("short", "*", "*").await;
    let resp = app
        .post(
            "/v1/runs",
            Some(&key),
            serde_json::json!({ "user": "alice", "task": { "id": "t", "kind": "summarize" }, "ttl": "5m" }),
        )
        .await;
    let run = resp.json::<Value>().await.unwrap();
    let token = run["run_token"].as_str().unwrap().to_owned();
    let run_expires = tessera_broker::clock::parse_rfc3339_ms(run["expires_at"].as_str().unwrap())
        .unwrap()
        / 1000;
    let cap = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    // The policy allows 10m, but no capability outlives its run (5m): it expires
    // exactly with the run (a second may have passed since the run started).
    let c = crate::support::tokens::claims_of(cap["token"].as_str().unwrap());
    assert_eq!(c["exp"].as_i64().unwrap(), run_expires);
    assert!((299..=300).contains(&(c["exp"].as_i64().unwrap() - c["iat"].as_i64().unwrap())));
    app.state.clock.advance(Duration::from_secs(5 * 60 + 1));
    assert_error(
        app.capability(&token, "read", "svc-reports:reports/q1")
            .await,
        StatusCode::FORBIDDEN,
        "run_expired",
    )
    .await;
    let resp = app.exchange(cap["token"].as_str().unwrap()).await;
    assert_eq!(
        resp.status(),
        StatusCode::UNAUTHORIZED,
        "capability expired with or before its run"
    );
    assert_eq!(app.count("leases").await, 0);
}

async fn bad_credentials_are_401(app: TestApp) {
    let (key, _run, token) = app.run_for("alice").await;
    let bogus_rt = format!("tsr_rt_{}", "A".repeat(43));
    let body = serde_json::json!({ "user": "alice", "task": { "id": "t", "kind": "k" } });
    assert_error(
        app.post("/v1/runs", Some(&bogus_rt), body.clone()).await,
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
    )
    .await;
    assert_error(
        app.post("/v1/runs", Some(&token), body.clone()).await,
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
    )
    .await;
    assert_error(
        app.post("/v1/runs", None, body.clone()).await,
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
    )
    .await;
    assert_error(
        app.post(
            "/v1/admin/runtimes",
            Some(&key),
            serde_json::json!({ "name": "x" }),
        )
        .await,
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
    )
    .await;
    let bogus_run = format!("tsr_run_{}", "A".repeat(43));
    assert_error(
        app.capability(&bogus_run, "read", "svc-reports:reports/q1")
            .await,
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
    )
    .await;
    assert_eq!(app.count("capabilities").await, 0);
}

async fn no_capability_outlives_a_concurrent_run_end(app: TestApp) {
    let (key, run_id, token) = app.run_for("ursula").await;
    let mut tasks = Vec::new();
    for i in 0..40 {
        let client = app.client.clone();
        let url = app.url("/v1/capabilities");
        let token = token.clone();
        tasks.push(tokio::spawn(async move {
            let body =
                serde_json::json!({ "action": "read", "resource": format!("svc-reports:r/{i}") });
            let resp = client
                .post(url)
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap();
            (resp.status(), resp.json::<Value>().await.unwrap())
        }));
    }
    // Let some requests get in flight before the end.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let end: Value = app.end_run(&key, &run_id).await.json().await.unwrap();
    let mut issued = Vec::new();
    for t in tasks {
        let (status, body) = t.await.unwrap();
        match status {
            StatusCode::CREATED => issued.push(body),
            StatusCode::FORBIDDEN => assert_eq!(body["error"]["code"], "run_ended"),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    // Whatever was issued before the end was revoked by it; nothing was issued after.
    assert_eq!(
        end["revoked"]["capabilities"].as_u64().unwrap(),
        issued.len() as u64
    );
    let live =
        sqlx::query(&app.state.store.sql(
            "SELECT COUNT(*) AS n FROM capabilities WHERE run_id = $1 AND revoked_at IS NULL",
        ))
        .bind(&run_id)
        .fetch_one(app.state.store.pool())
        .await
        .unwrap();
    assert_eq!(sqlx::Row::try_get::<i64, _>(&live, "n").unwrap(), 0);
    for cap in issued {
        assert_eq!(
            app.introspect(&key, cap["token"].as_str().unwrap()).await["active"],
            false
        );
    }
}
