//! Key rotation: new tokens use the new key; old tokens verify until they expire.

use crate::both_stores;
use crate::capabilities::header_of;
use crate::helpers::TestApp;
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;

both_stores!(rotation_keeps_old_tokens_valid_until_they_expire,);

async fn rotation_keeps_old_tokens_valid_until_they_expire(app: TestApp) {
    let (key, _run, token) = app.run_for("ursula").await;
    let old = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    let old_kid = header_of(old["token"].as_str().unwrap())["kid"].clone();

    let r: Value = app
        .post("/v1/admin/keys/rotate", Some(&app.admin_token), Value::Null)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["previous_kid"], old_kid);
    assert_ne!(r["kid"], old_kid);

    let new = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    assert_eq!(header_of(new["token"].as_str().unwrap())["kid"], r["kid"]);
    let jwks: Value = app
        .get("/.well-known/jwks.json", None)
        .await
        .json()
        .await
        .unwrap();
    let kids: Vec<&Value> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| &k["kid"])
        .collect();
    assert!(
        kids.contains(&&old_kid) && kids.contains(&&r["kid"]),
        "{jwks}"
    );
    assert_eq!(
        app.exchange(old["token"].as_str().unwrap()).await.status(),
        StatusCode::OK,
        "old token still verifies"
    );

    // Once every token the old key could have signed has expired, it is unpublished.
    app.state.clock.advance(Duration::from_secs(3600 + 61));
    let jwks: Value = app
        .get("/.well-known/jwks.json", None)
        .await
        .json()
        .await
        .unwrap();
    let kids: Vec<&Value> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| &k["kid"])
        .collect();
    assert_eq!(kids, vec![&r["kid"]]);
    let listed: Value = app
        .get("/v1/admin/keys", Some(&app.admin_token))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["keys"].as_array().unwrap().len(), 2);
    let _ = key;
}
