//! `GET /v1/admin/audit/verify`: tampering with the audit table directly is caught,
//! and the report names the first broken row and how it broke.

use crate::both_stores;
use crate::support::app::TestApp;
use serde_json::Value;

both_stores!(
    an_untouched_chain_verifies,
    an_edited_row_is_caught,
    a_deleted_row_is_caught,
    swapped_rows_are_caught,
    a_cut_off_tail_is_caught,
    a_rewritten_chain_is_caught_without_the_kek,
    a_chain_downgraded_to_unkeyed_links_is_caught,
    a_row_linked_with_a_foreign_key_is_caught,
    a_chain_from_before_keying_stays_verifiable_as_unkeyed,
    removing_the_audit_key_does_not_make_an_unkeyed_log,
    planted_checkpoint_rows_do_not_stop_checkpoints,
    a_head_moved_back_stops_writes_and_checkpoints,
    truncation_is_named_by_checkpoints,
    the_latest_checkpoint_is_the_newest_signed,
);

/// `GET /v1/admin/audit/checkpoints/latest`: null before the first, then the
/// newest one signed (what the console's audit page shows); admin only.
async fn the_latest_checkpoint_is_the_newest_signed(app: TestApp) {
    use tessera_broker::jobs::checkpoints;
    let get = |token: String| {
        let url = app.url("/v1/admin/audit/checkpoints/latest");
        async move {
            reqwest::Client::new()
                .get(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
        }
    };
    let none: Value = get(app.admin_token.clone()).await.json().await.unwrap();
    assert!(none["latest"].is_null(), "{none}");
    busy(&app).await;
    let seq = checkpoints::take(&app.state, true).await.unwrap().unwrap();
    let v: Value = get(app.admin_token.clone()).await.json().await.unwrap();
    assert_eq!(v["latest"]["seq"], seq, "{v}");
    let jws = v["latest"]["checkpoint"].as_str().unwrap().to_owned();
    assert_eq!(check(&app, &[jws]).await, ["matches"]);
    assert!(v["latest"]["witnessed_at"].is_null());
    let (_k, _r, run_token) = app.run_for("alice").await;
    assert_eq!(
        get(run_token).await.status(),
        reqwest::StatusCode::UNAUTHORIZED
    );
}

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
    app.end_run(&key, &run_id).await;
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
        "UPDATE audit SET actor = COALESCE(actor, 'run:' || run_id) || '-forged' WHERE seq = 6",
    )
    .await;
    let r = report(&app).await;
    assert_eq!(r["ok"], false);
    assert_eq!(r["first_problem"]["seq"], 6);
    assert_eq!(r["first_problem"]["kind"], "edited");
}

/// A row that no longer reads as an audit row (SQLite keeps any value in any
/// column; a PostgreSQL owner can drop a NOT NULL) is reported where it is, and
/// one such row after an edited row does not hide the edit behind a 500: the
/// verification names the first broken row either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_row_is_reported_not_an_outage() {
    let app = TestApp::spawn(crate::support::app::Db::Sqlite).await;
    busy(&app).await;
    exec(&app, "UPDATE audit SET actor = X'00ff' WHERE seq = 9").await;
    let r = report(&app).await;
    assert_eq!(r["ok"], false, "{r}");
    assert_eq!(r["first_problem"]["seq"], 9, "{r}");
    assert_eq!(r["first_problem"]["kind"], "edited", "{r}");
    assert!(
        r["first_problem"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("cannot be read")),
        "{r}"
    );
    exec(
        &app,
        "UPDATE audit SET actor = COALESCE(actor, 'run:' || run_id) || '-forged' WHERE seq = 6",
    )
    .await;
    let r = report(&app).await;
    assert_eq!(r["first_problem"]["seq"], 6, "{r}");
    assert_eq!(r["first_problem"]["kind"], "edited", "{r}");
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

/// What a database owner without the KEK can do: edit a row and recompute
/// every later link with the unkeyed SHA-256 (the original chain function),
/// then move the head. Returns the new head hash.
async fn rewrite_from(app: &TestApp, from_seq: i64, keep_key_id: bool) {
    exec(
        app,
        &format!("UPDATE audit SET actor = 'someone-else' WHERE seq = {from_seq}"),
    )
    .await;
    relink_unkeyed(app, from_seq, keep_key_id).await;
}

/// Recomputes the links from `from_seq` on with the unkeyed SHA-256.
async fn relink_unkeyed(app: &TestApp, from_seq: i64, keep_key_id: bool) {
    use sqlx::Row;
    use tessera_broker::audit::chain_hash;
    let q = format!(
        "SELECT {} FROM audit a ORDER BY a.seq",
        tessera_broker::store::audit::SELECT
    );
    let rows = sqlx::query(&q)
        .fetch_all(app.state.store.pool())
        .await
        .unwrap();
    let mut prev = tessera_broker::audit::GENESIS_HASH.to_owned();
    let mut head = 0;
    for r in &rows {
        let seq: i64 = r.try_get("seq").unwrap();
        if seq >= from_seq {
            let ev = crate::support::audit_chain::audit_event_of(r);
            let h = chain_hash(&prev, seq, r.try_get("at_ms").unwrap(), &ev);
            let key = if keep_key_id { "key_id" } else { "NULL" };
            let q = app
                .state
                .store
                .sql("UPDATE audit SET prev_hash = $1, hash = $2 WHERE seq = $3");
            sqlx::query(&q)
                .bind(&prev)
                .bind(&h)
                .bind(seq)
                .execute(app.state.store.pool())
                .await
                .unwrap();
            exec(
                app,
                &format!("UPDATE audit SET key_id = {key} WHERE seq = {seq}"),
            )
            .await;
            prev = h;
        } else {
            prev = r.try_get("hash").unwrap();
        }
        head = seq;
    }
    let q = app
        .state
        .store
        .sql("UPDATE audit_head SET seq = $1, hash = $2 WHERE id = 1");
    sqlx::query(&q)
        .bind(head)
        .bind(&prev)
        .execute(app.state.store.pool())
        .await
        .unwrap();
}

async fn a_rewritten_chain_is_caught_without_the_kek(app: TestApp) {
    busy(&app).await;
    let before = report(&app).await;
    assert_eq!(before["ok"], true, "{before}");
    assert_eq!(before["unkeyed_rows"], 0, "{before}");
    // Recomputed links under the row's own key id: they are not its MACs.
    rewrite_from(&app, 6, true).await;
    let r = report(&app).await;
    assert_eq!(r["ok"], false, "{r}");
    assert_eq!(r["first_problem"]["kind"], "edited", "{r}");
    assert_eq!(r["first_problem"]["seq"], 6);
}

async fn a_chain_downgraded_to_unkeyed_links_is_caught(app: TestApp) {
    busy(&app).await;
    // The same rewrite, marking the rows as if written before the chain was keyed.
    rewrite_from(&app, 6, false).await;
    let r = report(&app).await;
    assert_eq!(r["ok"], false, "{r}");
    assert_eq!(r["first_problem"]["kind"], "downgraded", "{r}");
    assert_eq!(r["first_problem"]["seq"], 6);
    // Even from the first row: every row is newer than the audit key.
    rewrite_from(&app, 1, false).await;
    let r = report(&app).await;
    assert_eq!(r["first_problem"]["kind"], "downgraded", "{r}");
    assert_eq!(r["first_problem"]["seq"], 1);
}

async fn a_row_linked_with_a_foreign_key_is_caught(app: TestApp) {
    busy(&app).await;
    exec(
        &app,
        "UPDATE audit SET key_id = 'ak_attacker' WHERE seq = 3",
    )
    .await;
    let r = report(&app).await;
    assert_eq!(r["first_problem"]["kind"], "unknown_key", "{r}");
    assert_eq!(r["first_problem"]["seq"], 3);
}

async fn checkpoint_jws(app: &TestApp, seq: i64) -> String {
    let q = app
        .state
        .store
        .sql("SELECT jws FROM audit_checkpoints WHERE seq = $1");
    sqlx::query_scalar::<_, String>(&q)
        .bind(seq)
        .fetch_one(app.state.store.pool())
        .await
        .unwrap()
}

/// Each checkpoint's status as the broker checks it.
async fn check(app: &TestApp, tokens: &[String]) -> Vec<String> {
    let resp = app
        .post(
            "/v1/admin/audit/checkpoints/check",
            Some(&app.admin_token),
            serde_json::json!({ "checkpoints": tokens }),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["status"].as_str().unwrap().to_owned())
        .collect()
}

/// Truncation and moving the head back verifies as a shorter chain from the
/// database alone; the checkpoints a witness holds name it.
async fn truncation_is_named_by_checkpoints(app: TestApp) {
    use tessera_broker::audit::checkpoint;
    use tessera_broker::jobs::checkpoints;
    busy(&app).await;
    let first = checkpoints::take(&app.state, true).await.unwrap().unwrap();
    busy(&app).await;
    let second = checkpoints::take(&app.state, true).await.unwrap().unwrap();
    busy(&app).await;
    let tokens = vec![
        checkpoint_jws(&app, first).await,
        checkpoint_jws(&app, second).await,
    ];
    assert_eq!(check(&app, &tokens).await, ["matches", "matches"]);
    let head = report(&app).await["head_seq"].as_i64().unwrap();
    assert!(head > second);

    // Cut everything after the first checkpoint and move the head back: the
    // chain alone verifies (a shorter log), the second checkpoint is missing.
    exec(&app, &format!("DELETE FROM audit WHERE seq > {first}")).await;
    let q = app.state.store.sql(
        "UPDATE audit_head SET seq = $1, hash = (SELECT hash FROM audit WHERE seq = $1) WHERE id = 1",
    );
    sqlx::query(&q)
        .bind(first)
        .execute(app.state.store.pool())
        .await
        .unwrap();
    let r = report(&app).await;
    assert_eq!(r["ok"], true, "the database alone cannot see it: {r}");
    assert_eq!(check(&app, &tokens).await, ["matches", "missing"]);

    // A checkpoint signed by anyone else, or edited, is not evidence.
    // The genuine signature over claims that now name another link.
    let forged = {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        use base64::Engine;
        let parts: Vec<&str> = tokens[0].split('.').collect();
        let mut claims: Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
        claims["hash"] = Value::String("0".repeat(64));
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap());
        format!("{}.{body}.{}", parts[0], parts[2])
    };
    let other = tessera_broker::keys::SigningKey::generate().0;
    let foreign = tessera_broker::keys::jwt::encode(
        &other,
        checkpoint::CHECKPOINT_TYP,
        &checkpoint::CheckpointClaims {
            iss: app.state.config.issuer.clone(),
            seq: first,
            hash: "0".repeat(64),
            at_ms: 0,
            iat: 0,
            audit_key: "ak_x".into(),
            unkeyed_until_seq: 0,
        },
    );
    assert_eq!(
        check(&app, &[forged, foreign, "x.y.z".into()]).await,
        ["bad_signature", "bad_signature", "malformed"]
    );
    // At most 100 per request.
    let resp = app
        .post(
            "/v1/admin/audit/checkpoints/check",
            Some(&app.admin_token),
            serde_json::json!({ "checkpoints": vec!["x"; 101] }),
        )
        .await;
    crate::support::app::assert_error(resp, reqwest::StatusCode::BAD_REQUEST, "invalid_request")
        .await;
}

/// A database written by a broker from before the keyed chain (every link an
/// unkeyed SHA-256, no audit key): after the upgrade its rows verify as the
/// unkeyed prefix, new rows are keyed, and nothing can be appended unkeyed.
async fn a_chain_from_before_keying_stays_verifiable_as_unkeyed(app: TestApp) {
    busy(&app).await;
    relink_unkeyed(&app, 1, false).await;
    exec(&app, "DELETE FROM audit_keys").await;
    let old_rows = report(&app).await["head_seq"].as_i64().unwrap();
    // What migration 0005 records on an upgraded store: the head it found.
    exec(
        &app,
        &format!("UPDATE audit_unkeyed_prefix SET until_seq = {old_rows}"),
    )
    .await;
    let app = app.restart().await;
    busy(&app).await;
    let r = report(&app).await;
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["unkeyed_rows"], old_rows, "{r}");
    assert!(r["rows"].as_i64().unwrap() > old_rows);
    // The first keyed row follows the last unkeyed one.
    let q = app
        .state
        .store
        .sql("SELECT key_id FROM audit WHERE seq = $1");
    let key: Option<String> = sqlx::query_scalar(&q)
        .bind(old_rows + 1)
        .fetch_one(app.state.store.pool())
        .await
        .unwrap();
    assert!(key.is_some());
    // Rewriting a new row as if it were old is a downgrade.
    relink_unkeyed(&app, old_rows + 2, false).await;
    let r = report(&app).await;
    assert_eq!(r["first_problem"]["kind"], "downgraded", "{r}");
    assert_eq!(r["first_problem"]["seq"], old_rows + 2);
}

/// The database owner deletes the key row (to have a new key accept a log
/// rewritten as unkeyed): with keyed rows present no key is made; with the
/// rows rewritten too, the new key accepts no unkeyed row after the prefix
/// the migration recorded.
async fn removing_the_audit_key_does_not_make_an_unkeyed_log(app: TestApp) {
    use tessera_broker::audit::key_store::{load_or_create, AuditKeyError};
    busy(&app).await;
    exec(&app, "DELETE FROM audit_keys").await;
    let now = app.state.clock.now();
    let refused = load_or_create(&app.state.store, &app.state.kek, now).await;
    assert!(
        matches!(refused, Err(AuditKeyError::Missing)),
        "{refused:?}"
    );
    // Rewrite every row as unkeyed, then let a new key be made.
    relink_unkeyed(&app, 1, false).await;
    let key = load_or_create(&app.state.store, &app.state.kek, now)
        .await
        .unwrap();
    assert_eq!(key.unkeyed_until_seq, 0);
    let app = app.restart().await;
    let r = report(&app).await;
    assert_eq!(r["first_problem"]["kind"], "downgraded", "{r}");
    assert_eq!(r["first_problem"]["seq"], 1);
}

/// A checkpoint row planted far ahead of the head (or one that is not signed)
/// would make "the last checkpoint" a lie and stop every later one.
async fn planted_checkpoint_rows_do_not_stop_checkpoints(app: TestApp) {
    use tessera_broker::jobs::checkpoints;
    busy(&app).await;
    exec(
        &app,
        "INSERT INTO audit_checkpoints (seq, hash, at_ms, jws, created_at) \
         VALUES (9000000000000000000, 'x', 0, 'forged', 0)",
    )
    .await;
    let head = report(&app).await["head_seq"].as_i64().unwrap();
    exec(
        &app,
        &format!(
            "INSERT INTO audit_checkpoints (seq, hash, at_ms, jws, created_at) \
             VALUES ({}, 'x', 0, 'forged', 0)",
            head - 1
        ),
    )
    .await;
    // Forced (independent of the thresholds): a planted row at or above the
    // head would otherwise make it "already checkpointed".
    let taken = checkpoints::take(&app.state, true).await.unwrap().unwrap();
    assert_eq!(taken, head);
    let jws = checkpoint_jws(&app, head).await;
    assert_eq!(check(&app, &[jws]).await, ["matches"]);
}

/// Rows cut off the end with the head moved back underneath a running broker:
/// it neither chains new rows onto the shortened log nor signs it.
async fn a_head_moved_back_stops_writes_and_checkpoints(app: TestApp) {
    use tessera_broker::jobs::checkpoints;
    busy(&app).await;
    let head = report(&app).await["head_seq"].as_i64().unwrap();
    exec(&app, &format!("DELETE FROM audit WHERE seq > {}", head - 2)).await;
    let q = app.state.store.sql(
        "UPDATE audit_head SET seq = $1, hash = (SELECT hash FROM audit WHERE seq = $1) WHERE id = 1",
    );
    sqlx::query(&q)
        .bind(head - 2)
        .execute(app.state.store.pool())
        .await
        .unwrap();
    let resp = app
        .post(
            "/v1/admin/runtimes",
            Some(&app.admin_token),
            serde_json::json!({ "name": "after-cut", "users": "*", "task_kinds": "*" }),
        )
        .await;
    crate::support::app::assert_error(
        resp,
        reqwest::StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
    )
    .await;
    assert_eq!(checkpoints::take(&app.state, true).await.unwrap(), None);
    assert_eq!(report(&app).await["head_seq"], head - 2);
}
