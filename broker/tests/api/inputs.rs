//! Bad input gets a clear 4xx with a stable code and leaves nothing behind.

use crate::both_stores;
use crate::support::app::{assert_error, TestApp};
use reqwest::StatusCode;
use serde_json::json;

both_stores!(
    hostile_bodies_are_refused_and_nothing_is_stored,
    routes_and_methods_answer_in_json,
);

async fn counts(app: &TestApp) -> (i64, i64, i64, i64) {
    (
        app.count("runtimes").await,
        app.count("runs").await,
        app.count("capabilities").await,
        app.count("leases").await,
    )
}

async fn hostile_bodies_are_refused_and_nothing_is_stored(app: TestApp) {
    let (key, _run, token) = app.run_for("alice").await;
    let before = counts(&app).await;
    let raw = |path: &str, bearer: &str, body: String, ctype: &str| {
        app.client
            .post(app.url(path))
            .bearer_auth(bearer)
            .header("content-type", ctype)
            .body(body)
            .send()
    };

    let huge = format!(
        r#"{{"action":"read","resource":"svc-reports:{}"}}"#,
        "a".repeat(70 * 1024)
    );
    assert_error(
        raw("/v1/capabilities", &token, huge, "application/json")
            .await
            .unwrap(),
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
    )
    .await;
    assert_error(
        raw(
            "/v1/capabilities",
            &token,
            "{\"action\": ".into(),
            "application/json",
        )
        .await
        .unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_json",
    )
    .await;
    assert_error(
        raw(
            "/v1/capabilities",
            &token,
            r#"{"action":"read","resource":"svc-reports:reports/q"}"#.into(),
            "text/plain",
        )
        .await
        .unwrap(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    )
    .await;
    assert_error(
        app.post(
            "/v1/capabilities",
            Some(&token),
            json!({ "action": "read", "resource": "svc-reports:reports/q", "uses": 99 }),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "invalid_request",
    )
    .await;
    assert_error(
        app.post(
            "/v1/capabilities",
            Some(&token),
            json!({ "action": "read" }),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "invalid_request",
    )
    .await;
    // serde quotes unknown field names; multi-byte ones must not break the cut.
    for n in [66, 67, 99, 100, 101] {
        let body = format!(r#"{{"{}x":1}}"#, "é".repeat(n));
        assert_error(
            raw("/v1/exchange", &token, body, "application/json")
                .await
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        )
        .await;
    }
    let ten_kb = format!("svc-reports:reports/{}", "a".repeat(10 * 1024));
    assert_error(
        app.capability(&token, "read", &ten_kb).await,
        StatusCode::BAD_REQUEST,
        "invalid_resource",
    )
    .await;
    for bad in [
        "svc-reports:reports/\u{0}x",
        "svc-reports:reports/\nx",
        "svc-reports:reports/x'; DROP TABLE capabilities; --",
        "svc-reports:reports/\"x\"",
        "svc-reports:reports/../../etc/passwd",
        "svc-reports:reports/ünï",
    ] {
        assert_error(
            app.capability(&token, "read", bad).await,
            StatusCode::BAD_REQUEST,
            "invalid_resource",
        )
        .await;
    }
    assert_error(
        app.capability(&token, "re\u{7}ad", "svc-reports:reports/q")
            .await,
        StatusCode::BAD_REQUEST,
        "invalid_action",
    )
    .await;
    assert_error(
        app.capability(&token, &"r".repeat(300), "svc-reports:reports/q")
            .await,
        StatusCode::BAD_REQUEST,
        "invalid_action",
    )
    .await;

    // Runs: hostile users, task fields and labels.
    for (user, kind, code) in [
        ("alice'; DROP TABLE runs; --", "summarize", "invalid_user"),
        ("al\u{0}ice", "summarize", "invalid_user"),
        ("alice", "sum marize", "invalid_task"),
        ("alice", "Robert'); DROP TABLE runs;--", "invalid_task"),
    ] {
        assert_error(
            app.start_run_with(&key, user, kind, &[]).await,
            StatusCode::BAD_REQUEST,
            code,
        )
        .await;
    }
    // Attribute values that would reorder or split what a reader sees in
    // policy context, audit rows and logs: bidi controls, line separators.
    for value in [
        "invoice-\u{202E}fdp.exe",
        "a\u{2028}b",
        "a\u{2029}b",
        "\u{2066}x\u{2069}",
        "a\u{200F}",
        "a\u{061C}",
        "zero\u{200B}width",
        "bom\u{FEFF}",
    ] {
        assert_error(
            app.post(
                "/v1/runs",
                Some(&key),
                json!({ "user": "alice", "task": { "id": "t", "kind": "k", "attributes": { "file": value } } }),
            )
            .await,
            StatusCode::BAD_REQUEST,
            "invalid_task",
        )
        .await;
    }
    assert_error(
        app.start_run_with(&key, "alice", "summarize", &["Bad Label"])
            .await,
        StatusCode::BAD_REQUEST,
        "invalid_labels",
    )
    .await;
    assert_error(
        app.post(
            "/v1/runs",
            Some(&key),
            json!({ "user": "alice", "task": { "id": "t", "kind": "k" }, "ttl": "100h" }),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "invalid_ttl",
    )
    .await;
    // Admin: runtime names and scopes.
    assert_error(
        app.post(
            "/v1/admin/runtimes",
            Some(&app.admin_token),
            json!({ "name": "x'; DROP TABLE runtimes; --" }),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "invalid_name",
    )
    .await;
    assert_error(
        app.post(
            "/v1/admin/runtimes",
            Some(&app.admin_token),
            json!({ "name": "ok", "users": "a;b" }),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "invalid_scope",
    )
    .await;
    assert_error(
        app.post(
            "/v1/admin/runtimes",
            Some(&app.admin_token),
            json!({ "name": "pinned", "client_cert_sha256": "ab".repeat(32) }),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "invalid_certificate_pin",
    )
    .await;
    let dup = app.create_runtime("dup", "*", "*").await;
    assert!(dup.starts_with("tsr_rt_"));
    assert_error(
        app.post(
            "/v1/admin/runtimes",
            Some(&app.admin_token),
            json!({ "name": "dup" }),
        )
        .await,
        StatusCode::CONFLICT,
        "conflict",
    )
    .await;

    let after = counts(&app).await;
    assert_eq!(
        (after.0 - 1, after.1, after.2, after.3),
        before,
        "only the one valid runtime was stored"
    );
}

async fn routes_and_methods_answer_in_json(app: TestApp) {
    assert_error(
        app.get("/v1/nope", None).await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    assert_error(
        app.get("/v1/capabilities", None).await,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    )
    .await;
    let (key, _r, _t) = app.run_for("alice").await;
    assert_error(
        app.get("/v1/runs/not-a-uuid", Some(&key)).await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
}

/// An optional field sent as `null` is accepted as if left out, and the
/// OpenAPI document says so (schemathesis found the document saying "string"
/// for a field the broker accepts as null).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_optional_field_is_left_out_and_documented_so() {
    let app = TestApp::spawn(crate::support::app::Db::Sqlite).await;
    let (_k, _r, token) = app.run_for("alice").await;
    let resp = app
        .post(
            "/v1/capabilities",
            Some(&token),
            json!({ "action": "read", "resource": "svc-reports:reports/q1",
                    "ttl": null, "hold": null, "slot": null }),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    let doc: serde_json::Value = app
        .get("/v1/openapi.json", None)
        .await
        .json()
        .await
        .unwrap();
    let nullable = |schema: &str, field: &str| {
        let f = &doc["components"]["schemas"][schema]["properties"][field];
        f["type"]
            .as_array()
            .is_some_and(|t| t.contains(&json!("null")))
            || ["anyOf", "oneOf"].iter().any(|k| {
                f[*k]
                    .as_array()
                    .is_some_and(|a| a.contains(&json!({ "type": "null" })))
            })
    };
    for (schema, field) in [
        ("CapabilityRequest", "ttl"),
        ("CapabilityRequest", "hold"),
        ("CapabilityRequest", "slot"),
        ("CreateRunRequest", "ttl"),
        ("CreateRuntimeRequest", "users"),
        ("CreateRuntimeRequest", "task_kinds"),
        ("CreateRuntimeRequest", "client_cert_sha256"),
    ] {
        assert!(
            nullable(schema, field),
            "{schema}.{field} is not documented as nullable"
        );
    }
}
