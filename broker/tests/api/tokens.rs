//! Forged, re-signed and misdirected tokens are rejected everywhere.

use crate::both_stores;
use crate::support::app::{assert_error, TestApp};
use crate::support::tokens::{claims_of, header_of};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tessera_broker::capability::{CapabilityClaims, CAPABILITY_TYP};
use tessera_broker::keys::{jwt, SigningKey};

both_stores!(
    forgeries_are_rejected,
    broker_signed_but_misdirected_tokens_are_rejected,
    one_run_cannot_touch_another,
);

fn b64(v: &Value) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
}

async fn assert_rejected(app: &TestApp, key: &str, token: &str) {
    assert_error(
        app.exchange(token).await,
        StatusCode::UNAUTHORIZED,
        "invalid_token",
    )
    .await;
    assert_eq!(app.introspect(key, token).await, json!({ "active": false }));
}

async fn forgeries_are_rejected(app: TestApp) {
    let (key, _run, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    let real = cap["token"].as_str().unwrap();
    let parts: Vec<&str> = real.split('.').collect();
    let header = header_of(real);
    let mut claims = claims_of(real);

    // Flipped signature.
    let mut sig = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
    sig[0] ^= 1;
    assert_rejected(
        &app,
        &key,
        &format!("{}.{}.{}", parts[0], parts[1], URL_SAFE_NO_PAD.encode(&sig)),
    )
    .await;

    // Claims edited to another resource, original signature kept.
    claims["res"] = json!("svc-reports:reports/q2");
    assert_rejected(
        &app,
        &key,
        &format!("{}.{}.{}", parts[0], b64(&claims), parts[2]),
    )
    .await;

    // alg: none.
    let mut h = header.clone();
    h["alg"] = json!("none");
    assert_rejected(&app, &key, &format!("{}.{}.", b64(&h), parts[1])).await;

    // HS256 keyed with the broker's public key (algorithm confusion).
    let jwks: Value = app
        .get("/.well-known/jwks.json", None)
        .await
        .json()
        .await
        .unwrap();
    let x = jwks["keys"][0]["x"].as_str().unwrap();
    let mut h = header.clone();
    h["alg"] = json!("HS256");
    let signing_input = format!("{}.{}", b64(&h), parts[1]);
    for secret in [x.as_bytes().to_vec(), URL_SAFE_NO_PAD.decode(x).unwrap()] {
        let k = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret);
        let mac = ring::hmac::sign(&k, signing_input.as_bytes());
        assert_rejected(
            &app,
            &key,
            &format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(mac.as_ref())),
        )
        .await;
    }

    // Re-signed with an attacker's Ed25519 key, under its own kid and under the broker's kid.
    let (stranger, _) = SigningKey::generate();
    let claims: CapabilityClaims = serde_json::from_value(claims_of(real)).unwrap();
    let own_kid = jwt::encode(&stranger, CAPABILITY_TYP, &claims);
    assert_rejected(&app, &key, &own_kid).await;
    let p: Vec<&str> = own_kid.split('.').collect();
    let mut h = header_of(&own_kid);
    h["kid"] = header["kid"].clone();
    let input = format!("{}.{}", b64(&h), p[1]);
    let sig = stranger.sign(input.as_bytes());
    assert_rejected(
        &app,
        &key,
        &format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig)),
    )
    .await;

    // Garbage.
    for junk in ["", "a.b.c", "not a token", &"x".repeat(9000)] {
        assert_rejected(&app, &key, junk).await;
    }
    assert_eq!(app.count("leases").await, 0);
}

async fn broker_signed_but_misdirected_tokens_are_rejected(app: TestApp) {
    let (key, _run, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    let good: CapabilityClaims =
        serde_json::from_value(claims_of(cap["token"].as_str().unwrap())).unwrap();
    let keys = app.state.keys.snapshot();
    let sign = |c: &CapabilityClaims, typ: &str| jwt::encode(keys.signer(i64::MAX), typ, c);

    let mut wrong_aud = good.clone();
    wrong_aud.aud = "https://reports.internal".into();
    assert_rejected(&app, &key, &sign(&wrong_aud, CAPABILITY_TYP)).await;
    let mut wrong_iss = good.clone();
    wrong_iss.iss = "someone-else".into();
    assert_rejected(&app, &key, &sign(&wrong_iss, CAPABILITY_TYP)).await;
    assert_rejected(&app, &key, &sign(&good, "JWT")).await;
    // A well-signed token whose jti was never recorded is not a capability.
    let mut unrecorded = good.clone();
    unrecorded.jti = tessera_broker::ids::new_id().into();
    assert_rejected(&app, &key, &sign(&unrecorded, CAPABILITY_TYP)).await;
    // Same jti, but claiming another run.
    let (_r2, _t2) = app.start_run(&key, "alice", "summarize").await;
    let mut other_run = good.clone();
    other_run.run = _r2.into();
    assert_rejected(&app, &key, &sign(&other_run, CAPABILITY_TYP)).await;
    assert_eq!(app.count("leases").await, 0);
}

async fn one_run_cannot_touch_another(app: TestApp) {
    let (key_a, run_a, token_a) = app.run_for("alice").await;
    let (key_b, run_b, token_b) = app.run_for("alice").await;
    let cap_b = app
        .capability_ok(&token_b, "read", "svc-reports:reports/q1")
        .await;
    let id_b = cap_b["capability_id"].as_str().unwrap();
    assert_error(
        app.post(
            &format!("/v1/capabilities/{id_b}/revoke"),
            Some(&token_a),
            Value::Null,
        )
        .await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    // Runtime A cannot introspect run B's capability, nor end run B.
    assert_eq!(
        app.introspect(&key_a, cap_b["token"].as_str().unwrap())
            .await,
        json!({ "active": false })
    );
    assert_eq!(
        app.introspect(&key_b, cap_b["token"].as_str().unwrap())
            .await["active"],
        true
    );
    assert_error(
        app.end_run(&key_a, &run_b).await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    assert_ne!(run_a, run_b);
    assert_eq!(
        app.introspect(&key_b, cap_b["token"].as_str().unwrap())
            .await["active"],
        true
    );
}
