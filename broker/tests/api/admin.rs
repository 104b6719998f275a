//! Admin operations: disabling a runtime ends everything it started; listing
//! runs; the expiry sweeper makes an expiry durable, revoking and auditing it.

use crate::both_stores;
use crate::support::app::{assert_error, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::Duration;

both_stores!(
    disabling_a_runtime_ends_its_runs_and_its_key,
    runs_are_listed_by_runtime_user_and_state,
    the_sweeper_ends_expired_runs_once,
    pending_revocations_are_listed_for_the_admin_only,
);

async fn disabling_a_runtime_ends_its_runs_and_its_key(app: TestApp) {
    let bad = app.create_runtime("compromised", "*", "*").await;
    let good = app.create_runtime("fine", "*", "*").await;
    let (bad_run, bad_token) = app.start_run(&bad, "alice", "summarize").await;
    let (_good_run, good_token) = app.start_run(&good, "alice", "summarize").await;
    let bad_cap = app
        .capability_ok(&bad_token, "read", "svc-reports:reports/q1")
        .await;
    let good_cap = app
        .capability_ok(&good_token, "read", "svc-reports:reports/q1")
        .await;

    // Not the runtime itself, not a run: only the admin.
    for bearer in [bad.as_str(), bad_token.as_str()] {
        let resp = app
            .post(
                "/v1/admin/runtimes/compromised/disable",
                Some(bearer),
                Value::Null,
            )
            .await;
        assert_error(resp, StatusCode::UNAUTHORIZED, "unauthenticated").await;
    }
    let resp = app
        .post(
            "/v1/admin/runtimes/compromised/disable",
            Some(&app.admin_token),
            Value::Null,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["disabled"], true);
    assert_eq!(v["runs_ended"], 1);
    assert_eq!(v["revoked"]["capabilities"], 1);

    // The key is dead, the run is ended, its capability is inactive and useless.
    let resp = app.start_run_with(&bad, "alice", "summarize", &[]).await;
    assert_error(resp, StatusCode::UNAUTHORIZED, "unauthenticated").await;
    let resp = app
        .capability(&bad_token, "read", "svc-reports:reports/q2")
        .await;
    assert_error(resp, StatusCode::FORBIDDEN, "run_ended").await;
    let token = bad_cap["token"].as_str().unwrap();
    assert_eq!(
        app.introspect(&app.admin_token, token).await["active"],
        false
    );
    assert_eq!(app.exchange(token).await.status(), StatusCode::FORBIDDEN);
    // The other runtime is untouched.
    let token = good_cap["token"].as_str().unwrap();
    assert_eq!(
        app.introspect(&app.admin_token, token).await["active"],
        true
    );
    assert_eq!(app.exchange(token).await.status(), StatusCode::OK);

    // Audited: the disable, and the run it ended with the reason.
    let rows = app.audit(&format!("run={bad_run}&event=run.ended")).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["reason"], "runtime_disabled");
    assert_eq!(rows[0]["actor"], "admin");
    let rows = app.audit("event=runtime.disabled").await;
    assert_eq!(rows.len(), 1);
    assert!(rows[0]["detail"]
        .as_str()
        .unwrap()
        .contains("runtime=compromised runs_ended=1"));

    // A repeat changes nothing and says so; an unknown runtime is a 404.
    let resp = app
        .post(
            "/v1/admin/runtimes/compromised/disable",
            Some(&app.admin_token),
            Value::Null,
        )
        .await;
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["disabled"], false);
    assert_eq!(v["runs_ended"], 0);
    for name in ["nobody", "Not_A_Name!"] {
        let resp = app
            .post(
                &format!("/v1/admin/runtimes/{name}/disable"),
                Some(&app.admin_token),
                Value::Null,
            )
            .await;
        assert_error(resp, StatusCode::NOT_FOUND, "not_found").await;
    }
    let resp = app.get("/v1/admin/runtimes", Some(&app.admin_token)).await;
    let v: Value = resp.json().await.unwrap();
    let listed = v["runtimes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "compromised")
        .cloned()
        .unwrap();
    assert!(listed["disabled_at"].is_string());
}

async fn runs_are_listed_by_runtime_user_and_state(app: TestApp) {
    let a = app.create_runtime("rt-a", "*", "*").await;
    let b = app.create_runtime("rt-b", "*", "*").await;
    let (a1, _) = app.start_run(&a, "alice", "summarize").await;
    let (a2, _) = app.start_run(&a, "bob", "summarize").await;
    let (b1, _) = app.start_run(&b, "alice", "summarize").await;
    app.end_run(&a, &a2).await;

    let ids = |v: &Value| -> Vec<String> {
        v["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let app_ref = &app;
    let list = |q: &'static str| async move {
        let resp = app_ref
            .get(&format!("/v1/admin/runs?{q}"), Some(&app_ref.admin_token))
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
        resp.json::<Value>().await.unwrap()
    };
    // Listed in id order; ids are time-ordered only to the millisecond, so the
    // expectation is sorted the same way.
    let sorted = |mut v: Vec<&String>| {
        v.sort();
        v.into_iter().cloned().collect::<Vec<String>>()
    };
    assert_eq!(ids(&list("").await), sorted(vec![&a1, &b1]));
    let all = sorted(vec![&a1, &a2, &b1]);
    assert_eq!(ids(&list("state=all").await), all);
    assert_eq!(ids(&list("state=ended").await), [a2.as_str()]);
    assert_eq!(
        ids(&list("runtime=rt-a&state=all").await),
        sorted(vec![&a1, &a2])
    );
    assert_eq!(ids(&list("user=alice").await), sorted(vec![&a1, &b1]));
    let page = list("state=all&limit=2").await;
    assert_eq!(ids(&page), all[..2]);
    assert_eq!(page["next_cursor"], all[1].as_str());
    let resp = app
        .get(
            &format!("/v1/admin/runs?state=all&after={}", all[1]),
            Some(&app.admin_token),
        )
        .await;
    assert_eq!(ids(&resp.json::<Value>().await.unwrap()), all[2..]);
    let ended = &list("state=ended").await["runs"][0];
    assert_eq!(ended["state"], "ended");
    assert_eq!(ended["runtime"], "rt-a");
    assert!(ended["ended_at"].is_string());

    for q in [
        "state=gone",
        "user=a%20b",
        "runtime=RT!",
        "after=x",
        "limit=0",
        "extra=1",
    ] {
        let resp = app
            .get(&format!("/v1/admin/runs?{q}"), Some(&app.admin_token))
            .await;
        assert_error(resp, StatusCode::BAD_REQUEST, "invalid_query").await;
    }
    let resp = app.get("/v1/admin/runs", Some(&a)).await;
    assert_error(resp, StatusCode::UNAUTHORIZED, "unauthenticated").await;
}

async fn the_sweeper_ends_expired_runs_once(app: TestApp) {
    let key = app.create_runtime("short", "*", "*").await;
    let start = |ttl: &'static str| {
        let key = key.clone();
        let app = &app;
        async move {
            let resp = app
                .post(
                    "/v1/runs",
                    Some(&key),
                    json!({ "user": "alice", "task": { "id": "t-9", "kind": "summarize" }, "ttl": ttl }),
                )
                .await;
            let v: Value = resp.json().await.unwrap();
            (
                v["run_id"].as_str().unwrap().to_owned(),
                v["run_token"].as_str().unwrap().to_owned(),
            )
        }
    };
    let (short_run, short_token) = start("5m").await;
    let (long_run, _) = start("1h").await;
    app.capability_ok(&short_token, "read", "svc-reports:reports/q1")
        .await;
    app.capability_ok(&short_token, "read", "svc-reports:reports/q2")
        .await;

    // Nothing is due yet.
    assert_eq!(
        tessera_broker::jobs::expiry::sweep(&app.state)
            .await
            .unwrap(),
        0
    );
    app.state.clock.advance(Duration::from_secs(5 * 60 + 1));
    assert_eq!(
        tessera_broker::jobs::expiry::sweep(&app.state)
            .await
            .unwrap(),
        1
    );
    // A second sweep finds nothing more: one expiry, one audit row.
    assert_eq!(
        tessera_broker::jobs::expiry::sweep(&app.state)
            .await
            .unwrap(),
        0
    );

    let rows = app
        .audit(&format!("run={short_run}&event=run.expired"))
        .await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["actor"], "broker");
    assert_eq!(rows[0]["user"], "alice");
    assert_eq!(rows[0]["task_id"], "t-9");
    assert!(rows[0]["detail"]
        .as_str()
        .unwrap()
        .contains("capabilities=2"));
    assert!(app
        .audit(&format!("run={long_run}&event=run.expired"))
        .await
        .is_empty());

    // Still reported as expired (not merely ended), with every capability revoked.
    let resp = app
        .get(&format!("/v1/runs/{short_run}"), Some(&app.admin_token))
        .await;
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["state"], "expired");
    assert!(v["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["state"] == "revoked"));
    // Ending it afterwards revokes nothing more.
    let resp = app.end_run(&key, &short_run).await;
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["revoked"]["capabilities"], 0);
    let resp = app
        .get(&format!("/v1/runs/{long_run}"), Some(&app.admin_token))
        .await;
    assert_eq!(resp.json::<Value>().await.unwrap()["state"], "active");
}

async fn pending_revocations_are_listed_for_the_admin_only(app: TestApp) {
    // The token backend leaves nothing downstream: its leases never queue a removal.
    let (key, run_id, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    assert_eq!(
        app.exchange(cap["token"].as_str().unwrap()).await.status(),
        StatusCode::OK
    );
    let resp = app.end_run(&key, &run_id).await;
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["revoked"]["leases"], 1);
    assert_eq!(v["revoked"]["pending"], 0);
    assert_eq!(app.count("revocations").await, 0);
    for q in ["", "?stuck=true", "?limit=5"] {
        let resp = app
            .get(&format!("/v1/admin/leases{q}"), Some(&app.admin_token))
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(
            resp.json::<Value>().await.unwrap(),
            json!({ "revocations": [] })
        );
    }
    for q in ["?limit=0", "?stuck=maybe", "?run=x"] {
        let resp = app
            .get(&format!("/v1/admin/leases{q}"), Some(&app.admin_token))
            .await;
        assert_error(resp, StatusCode::BAD_REQUEST, "invalid_query").await;
    }
    let resp = app.get("/v1/admin/leases", Some(&key)).await;
    assert_error(resp, StatusCode::UNAUTHORIZED, "unauthenticated").await;
}
