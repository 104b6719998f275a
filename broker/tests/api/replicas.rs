//! Two brokers on one PostgreSQL: the coordination DESIGN §6 relies on — uses,
//! rate limits, run end, key rotation and the audit chain — holds across replicas.

use crate::support::app::{assert_error, Db, TestApp};
use crate::support::audit_chain::verify_audit_chain;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Fires `n` requests alternating between the two replicas; returns the statuses.
async fn alternate(
    a: &TestApp,
    b: &TestApp,
    n: usize,
    path: &str,
    bearer: Option<&str>,
    body: Value,
) -> Vec<StatusCode> {
    let mut tasks = Vec::new();
    for i in 0..n {
        let url = if i % 2 == 0 { a.url(path) } else { b.url(path) };
        let client = a.client.clone();
        let body = body.clone();
        let bearer = bearer.map(str::to_owned);
        tasks.push(tokio::spawn(async move {
            let mut req = client.post(url).json(&body);
            if let Some(t) = bearer {
                req = req.bearer_auth(t);
            }
            req.send().await.unwrap().status()
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

fn count(statuses: &[StatusCode], s: StatusCode) -> usize {
    statuses.iter().filter(|x| **x == s).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_one_postgres() {
    let a = TestApp::spawn(Db::Postgres).await;
    let b = a.replica().await;

    // A run started on A is usable on B at once.
    let (key, run_id, token) = a.run_for("ursula").await;
    let cap = b
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;

    // @uses(50) holds across both replicas under 80 concurrent exchanges.
    let statuses = alternate(
        &a,
        &b,
        80,
        "/v1/exchange",
        None,
        json!({ "capability": cap["token"] }),
    )
    .await;
    assert_eq!(count(&statuses, StatusCode::OK), 50, "{statuses:?}");
    assert_eq!(count(&statuses, StatusCode::FORBIDDEN), 30);

    // @rate(3/min) holds across both replicas.
    let (_k, _r, rita) = a.run_for("rita").await;
    let body = json!({ "action": "read", "resource": "svc-reports:x" });
    let statuses = alternate(&a, &b, 12, "/v1/capabilities", Some(&rita), body).await;
    assert_eq!(count(&statuses, StatusCode::CREATED), 3, "{statuses:?}");
    assert_eq!(count(&statuses, StatusCode::TOO_MANY_REQUESTS), 9);

    // A run ended on B is dead on A, including for tokens A issued.
    let from_a = a
        .capability_ok(&token, "read", "svc-reports:reports/q2")
        .await;
    let end: Value = b.end_run(&key, &run_id).await.json().await.unwrap();
    assert_eq!(end["revoked"]["capabilities"], 2);
    assert_error(
        a.capability(&token, "read", "svc-reports:reports/q3").await,
        StatusCode::FORBIDDEN,
        "run_ended",
    )
    .await;
    assert_error(
        a.exchange(from_a["token"].as_str().unwrap()).await,
        StatusCode::FORBIDDEN,
        "run_ended",
    )
    .await;

    // A key rotated on A is accepted by B without waiting for its refresh.
    let rotated: Value = a
        .post("/v1/admin/keys/rotate", Some(&a.admin_token), Value::Null)
        .await
        .json()
        .await
        .unwrap();
    let (_k2, _r2, alice) = a.run_for("alice").await;
    let fresh = a
        .capability_ok(&alice, "read", "svc-reports:reports/q1")
        .await;
    assert_eq!(
        crate::support::tokens::header_of(fresh["token"].as_str().unwrap())["kid"],
        rotated["kid"]
    );
    assert_eq!(
        b.exchange(fresh["token"].as_str().unwrap()).await.status(),
        StatusCode::OK
    );

    // Both writers appended to one unbroken hash chain.
    let events = verify_audit_chain(&a).await;
    assert!(events.len() > 100, "{} audit rows", events.len());
}
