//! Key rotation: new tokens use the new key; old tokens verify until they expire.

use crate::both_stores;
use crate::support::app::TestApp;
use crate::support::tokens::header_of;
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;
use tessera_broker::clock::parse_rfc3339_ms;

both_stores!(
    rotation_keeps_old_tokens_valid_until_they_expire,
    a_key_row_without_the_kek_is_never_published,
    a_junk_live_key_row_does_not_stop_the_first_key,
);

/// A store whose only live key row does not open under the KEK (planted, or
/// from another deployment) still gets a key of its own at start.
async fn a_junk_live_key_row_does_not_stop_the_first_key(app: TestApp) {
    use base64::Engine;
    let (rogue, der) = tessera_broker::keys::SigningKey::generate();
    let other_kek = tessera_broker::keys::Kek::generate().0;
    let store = &app.state.store;
    sqlx::query("DELETE FROM signing_keys")
        .execute(store.pool())
        .await
        .unwrap();
    sqlx::query(&store.sql(
        "INSERT INTO signing_keys (kid, public_key, sealed_private_key, created_at) VALUES ($1, $2, $3, $4)",
    ))
    .bind(rogue.kid())
    .bind(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rogue.public_key()))
    .bind(other_kek.seal(&der, rogue.kid()))
    .bind(app.state.clock.now())
    .execute(store.pool())
    .await
    .unwrap();
    let now = app.state.clock.now();
    let set = tessera_broker::keys::manage::load_or_create(store, &app.state.kek, now)
        .await
        .expect("a key of our own is created");
    assert_ne!(set.signer(now).kid(), rogue.kid());
    assert!(set.verifying_key(rogue.kid(), now).is_none());
}

/// Someone who can write the keys table but lacks the KEK inserts their own key.
async fn a_key_row_without_the_kek_is_never_published(app: TestApp) {
    use base64::Engine;
    let (rogue, der) = tessera_broker::keys::SigningKey::generate();
    let other_kek = tessera_broker::keys::Kek::generate().0;
    let public = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rogue.public_key());
    let now = app.state.clock.now();
    sqlx::query(&app.state.store.sql(
        "INSERT INTO signing_keys (kid, public_key, sealed_private_key, created_at, retired_at, publish_until) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    ))
    .bind(rogue.kid())
    .bind(&public)
    .bind(other_kek.seal(&der, rogue.kid()))
    .bind(now - 10)
    .bind(now - 5)
    .bind(now + 100_000)
    .execute(app.state.store.pool())
    .await
    .unwrap();
    let set = tessera_broker::keys::manage::load(&app.state.store, &app.state.kek, now)
        .await
        .unwrap();
    assert_eq!(set.published.len(), 1, "only the broker's own key");
    assert!(set.published.iter().all(|k| k.kid != rogue.kid()));
    assert!(set.verifying_key(rogue.kid(), now).is_none());
}

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

    // Published at once, signing only after the pre-publication (30 s by
    // default): until then the old key signs.
    let still = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    assert_eq!(header_of(still["token"].as_str().unwrap())["kid"], old_kid);
    let listed: Value = app
        .get("/v1/admin/keys", Some(&app.admin_token))
        .await
        .json()
        .await
        .unwrap();
    let entry = |kid: &Value| {
        listed["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| &k["kid"] == kid)
            .unwrap()
            .clone()
    };
    assert_eq!(entry(&r["kid"])["state"], "scheduled", "{listed}");
    assert_eq!(entry(&r["kid"])["signs_from"], r["signs_from"]);
    assert_eq!(entry(&old_kid)["state"], "active", "{listed}");
    assert_eq!(entry(&old_kid)["retired_at"], r["signs_from"]);
    // The test clock is real time plus an offset, so it is moved to points
    // relative to `signs_from`, not by fixed steps: 29 s after the rotation
    // was past the switch whenever the rotation fell late in its second and
    // the requests between took longer than what was left of it.
    let signs_from_ms = parse_rfc3339_ms(r["signs_from"].as_str().unwrap()).unwrap();
    let to = |target_ms: i64| {
        let by = target_ms - app.state.clock.now_ms();
        app.state
            .clock
            .advance(Duration::from_millis(by.max(0) as u64));
    };
    to(signs_from_ms - 2_000);
    let still = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    assert_eq!(header_of(still["token"].as_str().unwrap())["kid"], old_kid);
    to(signs_from_ms);
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

    assert_eq!(
        app.exchange(still["token"].as_str().unwrap())
            .await
            .status(),
        StatusCode::OK,
        "a token the old key signed in its last seconds verifies"
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
