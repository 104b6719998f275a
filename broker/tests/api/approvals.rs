//! Human approval bound to the exact arguments: a permit with `@approval`
//! answers 202 with an approval; approvers (their own keys, never the run's
//! user, never a runtime key, run token or the admin token) decide; the run
//! redeems an approved approval once, for one single-use capability that
//! carries the arguments' hash (`args`) through the exchange and the
//! downstream token. Every denied path, on both stores.

use crate::support::app::{assert_error, Db, Extra, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::Duration;
use tessera_client::arguments;

const DEPLOYS: &str = r#"
@id("deploys") @approval("group:release") @approval_ttl("15m") @ttl("5m")
permit (principal, action == Tessera::Action::"invoke", resource)
when { resource.backend == "deployer" && context has arguments };

// A looser permit beside the gated ones: it must not turn one approval into many uses.
@id("gina-may-invoke-often") @uses("50") @ttl("5m")
permit (principal == Tessera::User::"gina", action == Tessera::Action::"invoke", resource)
when { resource.backend == "deployer" };

@id("prod-needs-finance-twice") @approval("2 of group:finance") @ttl("5m")
permit (principal, action == Tessera::Action::"invoke", resource)
when { resource.backend == "deployer" && context has arguments
       && context.arguments.environment == "production" };
"#;

const DEPLOYER: &str = r#"
[backends.deployer]
kind = "token"
audience = "https://deployer.internal"
actions = ["invoke"]
"#;

fn store_of(app: &TestApp) -> Db {
    if app.state.store.dialect() == tessera_broker::store::Dialect::Sqlite {
        Db::Sqlite
    } else {
        Db::Postgres
    }
}

fn spawn_with(db: Db, config: &str) -> crate::support::app::TestAppBuilder {
    TestApp::builder(db).extra(Extra {
        config: format!("{DEPLOYER}{config}"),
        policy: DEPLOYS.to_owned(),
        env: vec![],
    })
}

async fn spawn(db: Db) -> TestApp {
    spawn_with(db, "").start().await
}

fn deploy(env: &str) -> Value {
    json!({"service": "web", "commit": "4f2a9c1", "environment": env})
}

async fn json_of(resp: reqwest::Response) -> (StatusCode, Value) {
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn ask(
    app: &TestApp,
    token: &str,
    args: &Value,
    approval: Option<&str>,
) -> reqwest::Response {
    let mut body = json!({"action": "invoke", "resource": "deployer:prod/web", "arguments": args});
    if let Some(id) = approval {
        body["approval_id"] = json!(id);
    }
    app.post("/v1/capabilities", Some(token), body).await
}

/// Asks and expects a 202; returns the approval id.
async fn pending(app: &TestApp, token: &str, args: &Value) -> String {
    let (status, v) = json_of(ask(app, token, args, None).await).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{v}");
    assert_eq!(v["status"], "pending", "{v}");
    assert_eq!(v["args"], arguments::hash(args).unwrap(), "{v}");
    v["approval_id"].as_str().unwrap().to_owned()
}

async fn approver(app: &TestApp, name: &str, user: &str) -> String {
    let (status, v) = json_of(
        app.post(
            "/v1/admin/approvers",
            Some(&app.admin_token),
            json!({"name": name, "user": user}),
        )
        .await,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    let key = v["key"].as_str().unwrap().to_owned();
    assert!(key.starts_with("tsr_apr_"));
    key
}

async fn decide(
    app: &TestApp,
    key: &str,
    id: &str,
    verb: &str,
    comment: &str,
) -> reqwest::Response {
    app.post(
        &format!("/v1/approvals/{id}/{verb}"),
        Some(key),
        json!({"comment": comment}),
    )
    .await
}

async fn status_of(app: &TestApp, token: &str, id: &str) -> Value {
    let (status, v) = json_of(app.get(&format!("/v1/approvals/{id}"), Some(token)).await).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    v
}

fn claims(token: &str) -> Value {
    use base64::Engine;
    let payload = token.split('.').nth(1).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

async fn approved_is_issued_once_bound_to_its_arguments(app: TestApp) {
    let app = spawn(store_of(&app)).await;
    let dana = approver(&app, "dana-laptop", "dana").await;
    let erin = approver(&app, "erin-phone", "erin").await;
    let (_k, run_id, bob) = app.run_for("gina").await;
    let args = deploy("staging");
    let id = pending(&app, &bob, &args).await;
    // The same request while it is open is the same approval: approvers are not spammed.
    assert_eq!(pending(&app, &bob, &args).await, id);
    // Reordered members are the same canonical arguments.
    let reordered: Value =
        serde_json::from_str(r#"{"environment":"staging","commit":"4f2a9c1","service":"web"}"#)
            .unwrap();
    assert_eq!(pending(&app, &bob, &reordered).await, id);
    assert_eq!(app.count("capabilities").await, 0, "nothing issued yet");

    // Redeeming before a decision is refused and issues nothing.
    assert_error(
        ask(&app, &bob, &args, Some(&id)).await,
        StatusCode::CONFLICT,
        "approval_pending",
    )
    .await;

    // The approver sees who asks for what, in full.
    let seen = status_of(&app, &dana, &id).await;
    assert_eq!(seen["user"], "gina");
    assert_eq!(seen["run_id"], run_id.as_str());
    assert_eq!(seen["arguments"], args);
    assert_eq!(
        seen["approvers"],
        json!([{"rule": "group:release", "required": 1}])
    );
    // Erin is not in group:release: she can neither decide nor see it.
    assert_error(
        decide(&app, &erin, &id, "approve", "").await,
        StatusCode::FORBIDDEN,
        "not_an_approver",
    )
    .await;
    assert_error(
        app.get(&format!("/v1/approvals/{id}"), Some(&erin)).await,
        StatusCode::NOT_FOUND,
        "unknown_approval",
    )
    .await;
    let mine: Value = app
        .get("/v1/approvals", Some(&erin))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(mine["approvals"], json!([]));
    let mine: Value = app
        .get("/v1/approvals", Some(&dana))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(mine["approvals"][0]["approval_id"], id.as_str());

    let (status, v) = json_of(decide(&app, &dana, &id, "approve", "matches CHG-42").await).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "approved");
    assert_eq!(v["decisions"][0]["user"], "dana");
    assert_eq!(v["decisions"][0]["comment"], "matches CHG-42");
    // The run sees where it stands, not which policy held it nor who decided.
    let own = status_of(&app, &bob, &id).await;
    assert_eq!(own["status"], "approved");
    assert_eq!(own["policy"], "");
    assert_eq!(own["decisions"][0]["approver"], "approver");
    assert!(own["decisions"][0]["user"].is_null() && own["decisions"][0]["comment"].is_null());

    // Redeemed: one capability, single-use, carrying the hash of the canonical arguments.
    let (status, cap) = json_of(ask(&app, &bob, &args, Some(&id)).await).await;
    assert_eq!(status, StatusCode::CREATED, "{cap}");
    let hash = arguments::hash(&args).unwrap();
    assert_eq!(cap["args"], hash.as_str());
    assert_eq!(cap["uses"], 1);
    let token = cap["token"].as_str().unwrap();
    assert_eq!(claims(token)["args"], hash.as_str());
    assert!(arguments::verify_arguments(claims(token)["args"].as_str(), &args).is_ok());
    assert!(
        arguments::verify_arguments(claims(token)["args"].as_str(), &deploy("production")).is_err()
    );
    // Introspection says it too, so the service can check what it performs.
    let seen = app.introspect(&app.admin_token, token).await;
    assert_eq!(seen["args"], hash.as_str());
    // Once.
    assert_error(
        ask(&app, &bob, &args, Some(&id)).await,
        StatusCode::CONFLICT,
        "approval_redeemed",
    )
    .await;
    assert_eq!(app.count("capabilities").await, 1);

    // The exchange and the downstream token carry it; then the use is spent.
    let ex = app.exchange_ok(token).await;
    assert_eq!(ex["args"], hash.as_str());
    assert_eq!(claims(ex["token"].as_str().unwrap())["args"], hash.as_str());
    let downstream = app
        .introspect(&app.admin_token, ex["token"].as_str().unwrap())
        .await;
    assert_eq!(downstream["args"], hash.as_str());
    assert_error(
        app.exchange(token).await,
        StatusCode::FORBIDDEN,
        "uses_exhausted",
    )
    .await;

    // Every step is an audit row naming who did it.
    let rows = app.audit(&format!("run={run_id}")).await;
    let events: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["event"].as_str().unwrap(), r["actor"].as_str().unwrap()))
        .collect();
    assert!(
        events.contains(&("approval.requested", &format!("run:{run_id}"))),
        "{events:?}"
    );
    assert!(
        events.contains(&("approval.approved", "approver:dana-laptop")),
        "{events:?}"
    );
    let issued = rows
        .iter()
        .find(|r| r["event"] == "capability.issued")
        .unwrap();
    assert!(issued["detail"]
        .as_str()
        .unwrap()
        .contains(&format!("approval={id}")));
}

async fn denied_changed_and_foreign_approvals_issue_nothing(app: TestApp) {
    let app = spawn(store_of(&app)).await;
    let dana = approver(&app, "dana", "dana").await;
    let fred = approver(&app, "fred", "fred").await;
    let (_k, _r, bob) = app.run_for("gina").await;
    let (_k2, _r2, carol) = app.run_for("carol").await;

    // Different arguments are a new approval, and an approval never redeems other arguments.
    let a = pending(&app, &bob, &deploy("staging")).await;
    let b = pending(
        &app,
        &bob,
        &json!({"service": "web", "commit": "0000000", "environment": "staging"}),
    )
    .await;
    assert_ne!(a, b);
    assert_eq!(
        decide(&app, &dana, &a, "approve", "").await.status(),
        StatusCode::OK
    );
    let other = json!({"service": "web", "commit": "0000000", "environment": "staging"});
    assert_error(
        ask(&app, &bob, &other, Some(&a)).await,
        StatusCode::FORBIDDEN,
        "approval_mismatch",
    )
    .await;
    // Another run cannot redeem (or see) bob's approval.
    assert_error(
        ask(&app, &carol, &deploy("staging"), Some(&a)).await,
        StatusCode::NOT_FOUND,
        "unknown_approval",
    )
    .await;
    assert_error(
        app.get(&format!("/v1/approvals/{a}"), Some(&carol)).await,
        StatusCode::NOT_FOUND,
        "unknown_approval",
    )
    .await;

    // Denied: one denial is final; a later approval is refused; redemption is refused.
    let (status, v) = json_of(decide(&app, &fred, &b, "deny", "not during the freeze").await).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "denied");
    assert_error(
        decide(&app, &dana, &b, "approve", "").await,
        StatusCode::CONFLICT,
        "approval_decided",
    )
    .await;
    assert_error(
        ask(&app, &bob, &other, Some(&b)).await,
        StatusCode::FORBIDDEN,
        "approval_denied",
    )
    .await;
    // …and asking again does not reopen it: approvers are not worn down.
    let before_reask = app.count("approvals").await;
    assert_error(
        ask(&app, &bob, &other, None).await,
        StatusCode::FORBIDDEN,
        "approval_denied",
    )
    .await;
    assert_eq!(app.count("approvals").await, before_reask);
    // A comment an approver cannot read as written is refused.
    assert_error(
        decide(&app, &dana, &a, "deny", "ok\u{202e}").await,
        StatusCode::BAD_REQUEST,
        "invalid_request",
    )
    .await;
    assert_eq!(app.count("capabilities").await, 0);

    // Bad arguments are a 400 before anything is opened.
    let before = app.count("approvals").await;
    for bad in [
        json!({"service": "web"}),
        json!({"service": "web", "commit": "c", "environment": "staging", "extra": "x"}),
        json!({"service": 1, "commit": "c", "environment": "staging"}),
        json!({"service": "web", "commit": 1.5, "environment": "staging"}),
        json!(["not", "an", "object"]),
        json!({"service": {"__entity": {"type": "Tessera::User", "id": "dana"}}, "commit": "c", "environment": "e"}),
        // What an approver reads must be what is there.
        json!({"service": "web", "commit": "c", "environment": "staging\u{202E}noitcudorp"}),
        json!({"service": "web\u{200B}", "commit": "c", "environment": "staging"}),
        json!({"service": "web", "commit": "c\u{1b}[2J", "environment": "staging"}),
    ] {
        assert_error(
            ask(&app, &bob, &bad, None).await,
            StatusCode::BAD_REQUEST,
            "invalid_arguments",
        )
        .await;
    }
    // A member twice in one object: the approver would see one value and a
    // service whose parser keeps the first would act on the other.
    let twice = r#"{"action":"invoke","resource":"deployer:prod/web","arguments":{"service":"web","commit":"c","environment":"staging","environment":"production"}}"#;
    let resp = reqwest::Client::new()
        .post(app.url("/v1/capabilities"))
        .bearer_auth(&bob)
        .header("content-type", "application/json")
        .body(twice)
        .send()
        .await
        .unwrap();
    let v = assert_error(resp, StatusCode::BAD_REQUEST, "invalid_request").await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("appears twice"),
        "{v}"
    );
    // Without arguments the permit does not hold at all.
    assert_error(
        app.capability(&carol, "invoke", "deployer:prod/web").await,
        StatusCode::FORBIDDEN,
        "capability_denied",
    )
    .await;
    assert_eq!(app.count("approvals").await, before);
}

async fn nobody_approves_their_own_request_and_only_approver_keys_decide(app: TestApp) {
    let app = spawn(store_of(&app)).await;
    let dana = approver(&app, "dana", "dana").await;
    let (runtime_key, _r, dana_run) = app.run_for("dana").await;
    let id = pending(&app, &dana_run, &deploy("staging")).await;
    // Four-eyes: dana's key on dana's own request.
    assert_error(
        decide(&app, &dana, &id, "approve", "").await,
        StatusCode::FORBIDDEN,
        "self_approval",
    )
    .await;
    // A run token, a runtime key, the admin token, garbage: not approver credentials.
    for key in [
        dana_run.as_str(),
        runtime_key.as_str(),
        app.admin_token.as_str(),
        "tsr_apr_nope",
    ] {
        assert_error(
            decide(&app, key, &id, "approve", "").await,
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
        )
        .await;
    }
    // A key only for a user of entities.json.
    assert_error(
        app.post(
            "/v1/admin/approvers",
            Some(&app.admin_token),
            json!({"name": "ghost", "user": "nobody-here"}),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "invalid_user",
    )
    .await;
    // A revoked key stops at once.
    let list: Value = app
        .get("/v1/admin/approvers", Some(&app.admin_token))
        .await
        .json()
        .await
        .unwrap();
    let dana_id = list["approvers"][0]["id"].as_str().unwrap().to_owned();
    let (status, v) = json_of(
        app.post(
            &format!("/v1/admin/approvers/{dana_id}/revoke"),
            Some(&app.admin_token),
            Value::Null,
        )
        .await,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert!(v["revoked_at"].is_string());
    assert_error(
        app.get("/v1/approvals", Some(&dana)).await,
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
    )
    .await;
    // The admin cannot approve, but can deny (cancel).
    let (status, v) = json_of(
        app.post(
            &format!("/v1/admin/approvals/{id}/deny"),
            Some(&app.admin_token),
            json!({"comment": "cancelled"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "denied");
    assert_eq!(v["decisions"][0]["approver"], "admin");
    assert_eq!(app.count("capabilities").await, 0);
}

async fn two_of_needs_two_distinct_people(app: TestApp) {
    let app = spawn(store_of(&app)).await;
    let dana = approver(&app, "dana", "dana").await;
    let dana_again = approver(&app, "dana-2", "dana").await;
    let erin = approver(&app, "erin", "erin").await;
    let (_k, _r, bob) = app.run_for("gina").await;
    let args = deploy("production");
    let (status, v) = json_of(ask(&app, &bob, &args, None).await).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{v}");
    assert_eq!(
        v["approvers"],
        json!([{"rule": "group:finance", "required": 2}, {"rule": "group:release", "required": 1}])
    );
    let id = v["approval_id"].as_str().unwrap().to_owned();
    // dana (finance and release) counts once for each rule: finance needs another person.
    let (_, v) = json_of(decide(&app, &dana, &id, "approve", "").await).await;
    assert_eq!(v["status"], "pending", "{v}");
    // dana's second key is still dana.
    assert_error(
        decide(&app, &dana_again, &id, "approve", "").await,
        StatusCode::CONFLICT,
        "already_voted",
    )
    .await;
    assert_error(
        ask(&app, &bob, &args, Some(&id)).await,
        StatusCode::CONFLICT,
        "approval_pending",
    )
    .await;
    let (_, v) = json_of(decide(&app, &erin, &id, "approve", "").await).await;
    assert_eq!(v["status"], "approved", "{v}");
    let (status, cap) = json_of(ask(&app, &bob, &args, Some(&id)).await).await;
    assert_eq!(status, StatusCode::CREATED, "{cap}");
    let rows = app.audit("event=approval.voted").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
}

async fn a_concurrent_approve_and_deny_decide_once(app: TestApp) {
    let app = spawn(store_of(&app)).await;
    let dana = approver(&app, "dana", "dana").await;
    let fred = approver(&app, "fred", "fred").await;
    let (_k, _r, bob) = app.run_for("gina").await;
    for round in 0..6 {
        let args =
            json!({"service": "web", "commit": format!("c{round}"), "environment": "staging"});
        let id = pending(&app, &bob, &args).await;
        let (a, d) = tokio::join!(
            decide(&app, &dana, &id, "approve", ""),
            decide(&app, &fred, &id, "deny", "")
        );
        let (sa, sd) = (a.status(), d.status());
        assert!(
            (sa == StatusCode::OK) ^ (sd == StatusCode::OK),
            "exactly one decides: approve {sa}, deny {sd}"
        );
        let loser = if sa == StatusCode::OK { d } else { a };
        assert_error(loser, StatusCode::CONFLICT, "approval_decided").await;
        let status = status_of(&app, &bob, &id).await["status"].clone();
        assert_eq!(
            status,
            if sa == StatusCode::OK {
                "approved"
            } else {
                "denied"
            }
        );
        // Redeemed only if approved; concurrent redemptions yield one capability.
        if sa == StatusCode::OK {
            let (x, y) = tokio::join!(
                ask(&app, &bob, &args, Some(&id)),
                ask(&app, &bob, &args, Some(&id))
            );
            let created = [x.status(), y.status()]
                .iter()
                .filter(|s| **s == StatusCode::CREATED)
                .count();
            assert_eq!(created, 1, "{} {}", x.status(), y.status());
        }
    }
    let issued = app.count("capabilities").await;
    let approved = app.audit("event=approval.approved").await.len() as i64;
    assert_eq!(issued, approved);
}

async fn expired_and_cancelled_approvals_redeem_nothing(app: TestApp) {
    let app = spawn(store_of(&app)).await;
    let dana = approver(&app, "dana", "dana").await;
    let (key, run_id, bob) = app.run_for("gina").await;
    let waiting = pending(&app, &bob, &deploy("staging")).await;
    let approved = pending(&app, &bob, &deploy("qa")).await;
    assert_eq!(
        decide(&app, &dana, &approved, "approve", "").await.status(),
        StatusCode::OK
    );
    app.state.clock.advance(Duration::from_secs(16 * 60));
    // Past @approval_ttl: expired before the sweeper says so…
    assert_eq!(status_of(&app, &bob, &waiting).await["status"], "expired");
    assert_error(
        decide(&app, &dana, &waiting, "approve", "").await,
        StatusCode::CONFLICT,
        "approval_decided",
    )
    .await;
    assert_error(
        ask(&app, &bob, &deploy("qa"), Some(&approved)).await,
        StatusCode::FORBIDDEN,
        "approval_expired",
    )
    .await;
    // …and audited when it does.
    tessera_broker::jobs::expiry::sweep(&app.state)
        .await
        .unwrap();
    let rows = app.audit("event=approval.expired").await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0]["actor"], "broker");

    // A run that ends cancels what it still has open.
    let open = pending(&app, &bob, &deploy("staging")).await;
    let (status, ended) = json_of(app.end_run(&key, &run_id).await).await;
    assert_eq!(status, StatusCode::OK, "{ended}");
    assert_eq!(ended["revoked"]["approvals"], 1, "{ended}");
    assert_eq!(status_of(&app, &dana, &open).await["status"], "cancelled");
    assert_eq!(app.count("capabilities").await, 0);
}

async fn a_restart_between_request_and_approval_loses_nothing(app: TestApp) {
    let app = spawn(store_of(&app)).await;
    let dana = approver(&app, "dana", "dana").await;
    let (_k, _r, bob) = app.run_for("gina").await;
    let args = deploy("staging");
    let id = pending(&app, &bob, &args).await;
    let app = app.restart().await;
    assert_eq!(status_of(&app, &bob, &id).await["status"], "pending");
    assert_eq!(pending(&app, &bob, &args).await, id, "still the open one");
    assert_eq!(
        decide(&app, &dana, &id, "approve", "").await.status(),
        StatusCode::OK
    );
    let app = app.restart().await;
    let (status, cap) = json_of(ask(&app, &bob, &args, Some(&id)).await).await;
    assert_eq!(status, StatusCode::CREATED, "{cap}");
    app.exchange_ok(cap["token"].as_str().unwrap()).await;
}

async fn a_waiting_run_hears_the_decision_at_once(app: TestApp) {
    let app = spawn(store_of(&app)).await;
    let dana = approver(&app, "dana", "dana").await;
    let (_k, _r, bob) = app.run_for("gina").await;
    let args = deploy("staging");
    let id = pending(&app, &bob, &args).await;
    // A short wait on a pending one answers pending when it runs out.
    let v: Value = app
        .get(&format!("/v1/approvals/{id}?wait=1s"), Some(&bob))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["status"], "pending");
    assert_error(
        app.get(&format!("/v1/approvals/{id}?wait=soon"), Some(&bob))
            .await,
        StatusCode::BAD_REQUEST,
        "invalid_query",
    )
    .await;
    // The Rust client waits, sees the approval and redeems it.
    let client = tessera_client::Client::builder()
        .address(app.url(""))
        .run_token(secrecy::SecretString::from(bob.clone()))
        .build()
        .unwrap();
    let seen = std::sync::Mutex::new(Vec::new());
    let record = |a: &tessera_client::types::Approval| seen.lock().unwrap().push(a.status);
    let ask = tessera_client::Ask {
        arguments: Some(&args),
        wait_for_approval: Some(Duration::from_secs(20)),
        on_approval: Some(&record),
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let (cap, decided) = tokio::join!(
        client.capability_with("invoke", "deployer:prod/web", &ask),
        async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            decide(&app, &dana, &id, "approve", "ok").await.status()
        }
    );
    assert_eq!(decided, StatusCode::OK);
    let cap = cap.unwrap();
    assert_eq!(
        cap.args.as_deref(),
        Some(arguments::hash(&args).unwrap().as_str())
    );
    // Woken by the decision, not by a poll interval (the long-poll would hold 20 s).
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    use tessera_client::types::ApprovalStatus::*;
    assert_eq!(*seen.lock().unwrap(), vec![Pending, Approved]);
    // Not waiting: the client says which approval is pending.
    let no_wait = tessera_client::Ask {
        arguments: Some(&args),
        ..Default::default()
    };
    match client
        .capability_with("invoke", "deployer:prod/web", &no_wait)
        .await
    {
        Err(tessera_client::Error::ApprovalRequired {
            code, approval_id, ..
        }) => {
            assert_eq!(code, "approval_pending");
            assert!(approval_id.is_some());
        }
        other => panic!("{other:?}"),
    }
}

/// A receiver on loopback that records what it is sent, or answers 503 while `down`.
struct Receiver {
    got: std::sync::Arc<std::sync::Mutex<Vec<(axum::http::HeaderMap, String)>>>,
}

async fn receive_on(listener: tokio::net::TcpListener) -> Receiver {
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push((headers, body));
                StatusCode::NO_CONTENT
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Receiver { got }
}

async fn pending_approvals_are_announced_signed_and_retried(app: TestApp) {
    use hmac::{Hmac, Mac};
    let dir = tempfile_dir();
    let secret = "s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t";
    std::fs::write(dir.join("webhook.secret"), secret).unwrap();
    // A port with nobody listening yet: the receiver is down.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = format!(
        "[approvals]\nwebhook_url = \"http://127.0.0.1:{port}/hook\"\nwebhook_secret_file = \"{}\"\nconsole_url = \"http://127.0.0.1:8700/console\"\n",
        dir.join("webhook.secret").display()
    );
    let app = spawn_with(store_of(&app), &config).start().await;
    let webhook = app.state.config.approvals.webhook.clone().unwrap();
    let client = tessera_broker::http_client::no_redirects().unwrap();
    let (_k, run_id, gina) = app.run_for("gina").await;
    let id = pending(&app, &gina, &deploy("staging")).await;

    // Down: nothing delivered, the attempt recorded, the notification kept.
    assert_eq!(
        tessera_broker::jobs::webhooks::run_once(&app.state, &client, &webhook).await,
        0
    );
    assert_eq!(
        tessera_broker::store::webhooks::undelivered(&app.state.store)
            .await
            .unwrap(),
        1
    );
    // Back up; once the backoff passed, it is delivered, once.
    let receiver = receive_on(
        tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        tessera_broker::jobs::webhooks::run_once(&app.state, &client, &webhook).await,
        0,
        "not before the backoff"
    );
    app.state.clock.advance(Duration::from_secs(3));
    assert_eq!(
        tessera_broker::jobs::webhooks::run_once(&app.state, &client, &webhook).await,
        1
    );
    assert_eq!(
        tessera_broker::jobs::webhooks::run_once(&app.state, &client, &webhook).await,
        0
    );
    assert_eq!(
        tessera_broker::store::webhooks::undelivered(&app.state.store)
            .await
            .unwrap(),
        0
    );

    let got = receiver.got.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    let (headers, body) = &got[0];
    // The receiver's check: HMAC-SHA256(secret, "t.body"), compared in constant time.
    let sig = headers["tessera-signature"].to_str().unwrap();
    let (t, v1) = sig.strip_prefix("t=").unwrap().split_once(",v1=").unwrap();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    let delivery = headers["tessera-delivery"].to_str().unwrap();
    mac.update(format!("{t}.{delivery}.{body}").as_bytes());
    let want: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(v1, want);
    let mut forged =
        Hmac::<sha2::Sha256>::new_from_slice(b"another secret of enough length!!").unwrap();
    forged.update(format!("{t}.{delivery}.{body}").as_bytes());
    assert_ne!(
        v1,
        forged
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    assert_eq!(headers["tessera-event"], "approval.requested");
    let v: Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["approval_id"], id.as_str());
    assert_eq!(v["run_id"], run_id.as_str());
    assert_eq!(v["arguments"], deploy("staging"));
    assert_eq!(
        v["console_url"],
        "http://127.0.0.1:8700/console/#/approvals"
    );
    // A replay under another delivery id does not verify.
    let mut replay = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    replay.update(format!("{t}.another-delivery.{body}").as_bytes());
    let replayed: String = replay
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_ne!(v1, replayed);
    // Never a token.
    assert!(!body.contains("tsr_"), "{body}");
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tessera-webhook-{}", tessera_broker::ids::new_id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// An approval of a request without arguments binds `{}`, and its capability
/// exchanges (it is decided again as asked: without arguments).
async fn an_approval_without_arguments_binds_the_empty_object(app: TestApp) {
    let dana = approver(&app, "dana", "dana").await;
    let (_k, _r, bob) = app.run_for("bob").await;
    let body = json!({"action": "invoke", "resource": "svc-reports:deploy/x"});
    let (status, v) = json_of(app.post("/v1/capabilities", Some(&bob), body.clone()).await).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{v}");
    let empty = arguments::hash(&json!({})).unwrap();
    assert_eq!(v["args"], empty.as_str());
    let id = v["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(
        decide(&app, &dana, &id, "approve", "").await.status(),
        StatusCode::OK
    );
    let mut redeem = body;
    redeem["approval_id"] = json!(id);
    let (status, cap) = json_of(app.post("/v1/capabilities", Some(&bob), redeem).await).await;
    assert_eq!(status, StatusCode::CREATED, "{cap}");
    assert_eq!(cap["args"], empty.as_str());
    let ex = app.exchange_ok(cap["token"].as_str().unwrap()).await;
    assert_eq!(ex["args"], empty.as_str());
}

/// Revoking an approver's key takes back what it approved and was not redeemed.
async fn a_revoked_approvers_approval_stops_counting(app: TestApp) {
    let app = spawn(store_of(&app)).await;
    let dana = approver(&app, "dana", "dana").await;
    let fred = approver(&app, "fred", "fred").await;
    let (_k, _r, gina) = app.run_for("gina").await;
    let args = deploy("staging");
    let id = pending(&app, &gina, &args).await;
    assert_eq!(
        decide(&app, &dana, &id, "approve", "").await.status(),
        StatusCode::OK
    );
    let list: Value = app
        .get("/v1/admin/approvers", Some(&app.admin_token))
        .await
        .json()
        .await
        .unwrap();
    let dana_id = list["approvers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "dana")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let resp = app
        .post(
            &format!("/v1/admin/approvers/{dana_id}/revoke"),
            Some(&app.admin_token),
            Value::Null,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(status_of(&app, &gina, &id).await["status"], "pending");
    assert_error(
        ask(&app, &gina, &args, Some(&id)).await,
        StatusCode::CONFLICT,
        "approval_pending",
    )
    .await;
    // Another release manager makes it whole again.
    assert_eq!(
        decide(&app, &fred, &id, "approve", "").await.status(),
        StatusCode::OK
    );
    let (status, cap) = json_of(ask(&app, &gina, &args, Some(&id)).await).await;
    assert_eq!(status, StatusCode::CREATED, "{cap}");
    assert_eq!(
        cap["uses"], 1,
        "the looser @uses(50) permit does not multiply an approval"
    );
}

crate::both_stores!(
    an_approval_without_arguments_binds_the_empty_object,
    a_revoked_approvers_approval_stops_counting,
    pending_approvals_are_announced_signed_and_retried,
    approved_is_issued_once_bound_to_its_arguments,
    denied_changed_and_foreign_approvals_issue_nothing,
    nobody_approves_their_own_request_and_only_approver_keys_decide,
    two_of_needs_two_distinct_people,
    a_concurrent_approve_and_deny_decide_once,
    expired_and_cancelled_approvals_redeem_nothing,
    a_restart_between_request_and_approval_loses_nothing,
    a_waiting_run_hears_the_decision_at_once,
);
