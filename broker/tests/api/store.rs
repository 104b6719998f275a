//! The store: fail closed, readiness, audit chain, no secret at rest, metrics, OpenAPI.

use crate::both_stores;
use crate::support::app::{assert_error, Db, TestApp};
use crate::support::audit_chain::verify_audit_chain;
use reqwest::StatusCode;
use serde_json::Value;
use sqlx::Row;
use std::sync::Arc;
use tessera_broker::store::query::stmt;
use tessera_broker::store::sql::{placeholder, ROWS_PER_INSERT};
use tessera_broker::store::writer::{BoxFuture, WriteCtx, WriteOp};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

both_stores!(
    audit_chain_links_every_decision,
    no_secret_is_stored_or_audited,
    health_metrics_and_openapi,
    batches_run_on_the_writers_own_thread,
);

/// Answers the name of the thread its batch runs on.
struct WhereAmI;

impl WriteOp for WhereAmI {
    type Output = Option<String>;
    fn apply<'a>(
        &'a self,
        _ctx: &'a mut WriteCtx<'_>,
    ) -> BoxFuture<'a, Result<Option<String>, sqlx::Error>> {
        Box::pin(async { Ok(std::thread::current().name().map(str::to_owned)) })
    }
}

/// A batch runs on the writer's own thread on both stores, never on a
/// request worker. On PostgreSQL the writer was a task on the request
/// runtime, where each round trip's reply waited behind the request tasks
/// while the batch held the audit head (issue 20, docs/architecture.md).
async fn batches_run_on_the_writers_own_thread(app: TestApp) {
    for _ in 0..3 {
        let thread = app
            .state
            .store
            .writer()
            .submit(WhereAmI)
            .await
            .expect("committed");
        assert_eq!(thread.as_deref(), Some("tessera-writer"));
    }
}

/// Runs this many distinct statements (each prepared, by sqlx or the native
/// connection) on the writer's connection.
struct RunDistinct(usize);

impl WriteOp for RunDistinct {
    type Output = ();
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            for k in 0..self.0 {
                let q = format!("SELECT {} + {k} AS v", placeholder(ctx.dialect, 1));
                let row = stmt(&q).bind(1_i64).fetch_one(&mut ctx.conn).await?;
                // An error, not a panic: this runs on the writer's thread.
                let v = row.try_get::<i64>("v")?;
                if v != 1 + k as i64 {
                    return Err(sqlx::Error::Protocol(format!("{q} gave {v}")));
                }
            }
            Ok(())
        })
    }
}

/// The statements the writer's PostgreSQL session holds prepared: how many,
/// and the lowest and highest of sqlx's numbered names (`sqlx_s_N`, numbered
/// in the order they were prepared).
struct PreparedOnPostgres;

impl WriteOp for PreparedOnPostgres {
    type Output = (i64, i64, i64);
    fn apply<'a>(
        &'a self,
        ctx: &'a mut WriteCtx<'_>,
    ) -> BoxFuture<'a, Result<(i64, i64, i64), sqlx::Error>> {
        Box::pin(async move {
            let row = stmt(
                "SELECT COUNT(*) AS n, MIN(substr(name, 8)::bigint) AS lowest, \
                 MAX(substr(name, 8)::bigint) AS highest \
                 FROM pg_prepared_statements WHERE name LIKE 'sqlx\\_s\\_%'",
            )
            .fetch_one(&mut ctx.conn)
            .await?;
            Ok((
                row.try_get::<i64>("n")?,
                row.try_get::<i64>("lowest")?,
                row.try_get::<i64>("highest")?,
            ))
        })
    }
}

/// The writer on PostgreSQL keeps every statement it ever prepared: five
/// families of multi-row statements, one text per row count, are 250 texts,
/// beside the fixed ones. With sqlx's default cache of 100 they evicted each
/// other, and the server parsed and planned them again batch after batch
/// (issue 20). Real issuances first, in batches of several sizes, then the
/// working set's size in distinct statements: none of them was ever evicted
/// (every number from the first prepared to the last is still held).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_writer_keeps_its_statements_prepared() {
    let app = TestApp::spawn(Db::Postgres).await;
    let (_key, _run, token) = app.run_for("alice").await;
    for at_once in [1, 3, 7, 12] {
        let asks =
            (0..at_once).map(|_| app.capability_ok(&token, "read", "svc-reports:reports/q1"));
        futures_util::future::join_all(asks).await;
    }
    let writer = app.state.store.writer();
    let working_set = 5 * ROWS_PER_INSERT;
    for _ in 0..2 {
        writer
            .submit(RunDistinct(working_set))
            .await
            .expect("committed");
    }
    let (held, lowest, highest) = writer.submit(PreparedOnPostgres).await.expect("committed");
    assert!(held > working_set as i64, "{held} statements held");
    assert_eq!(
        held,
        highest - lowest + 1,
        "a statement was evicted: {held} held of {lowest}..={highest}"
    );
}

async fn audit_chain_links_every_decision(app: TestApp) {
    let (key, run_id, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    let _ = app.capability(&token, "read", "svc-reports:secret").await;
    app.exchange(cap["token"].as_str().unwrap()).await;
    app.end_run(&key, &run_id).await;
    let events = verify_audit_chain(&app).await;
    for e in [
        "key.created",
        "runtime.created",
        "run.started",
        "capability.issued",
        "capability.denied",
        "exchange.succeeded",
        "run.ended",
    ] {
        assert!(events.iter().any(|x| x == e), "{e} missing from {events:?}");
    }
}

async fn no_secret_is_stored_or_audited(app: TestApp) {
    let (key, run_id, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    let ex: Value = app
        .exchange(cap["token"].as_str().unwrap())
        .await
        .json()
        .await
        .unwrap();
    app.end_run(&key, &run_id).await;
    let secrets = [
        key.clone(),
        token.clone(),
        app.admin_token.clone(),
        cap["token"].as_str().unwrap().to_owned(),
        ex["token"].as_str().unwrap().to_owned(),
    ];
    // Every table there is, so a table added later is searched too.
    let list = match app.state.store.dialect() {
        tessera_broker::store::Dialect::Sqlite => {
            "SELECT name AS t FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        }
        tessera_broker::store::Dialect::Postgres => {
            "SELECT tablename::text AS t FROM pg_tables WHERE schemaname = current_schema()"
        }
    };
    let tables: Vec<String> = sqlx::query(list)
        .fetch_all(app.state.store.pool())
        .await
        .unwrap()
        .iter()
        .map(|r| r.try_get::<String, _>("t").unwrap())
        // sqlx's own bookkeeping holds the migration scripts only.
        .filter(|t| t != "_sqlx_migrations")
        .collect();
    for expected in [
        "runtimes",
        "runs",
        "capabilities",
        "leases",
        "audit",
        "signing_keys",
    ] {
        assert!(tables.iter().any(|t| t == expected), "{tables:?}");
    }
    for table in &tables {
        let rows = sqlx::query(&format!("SELECT * FROM {table}"))
            .fetch_all(app.state.store.pool())
            .await
            .unwrap();
        for row in rows {
            for i in 0..row.len() {
                let text: String = match row.try_get::<String, _>(i) {
                    Ok(s) => s,
                    Err(_) => continue,
                };
                for s in &secrets {
                    // Check the secret and its distinctive random half.
                    assert!(!text.contains(s.as_str()), "secret in {table}");
                    let tail = &s[s.len() - 20..];
                    assert!(!text.contains(tail), "secret fragment in {table}");
                }
            }
        }
    }
}

async fn health_metrics_and_openapi(app: TestApp) {
    assert_eq!(app.get("/healthz", None).await.status(), StatusCode::OK);
    assert_eq!(app.get("/readyz", None).await.status(), StatusCode::OK);
    let (_k, _r, token) = app.run_for("alice").await;
    app.capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    let _ = app.capability(&token, "read", "svc-reports:nope").await;
    let m = app.get("/metrics", None).await.text().await.unwrap();
    assert!(
        m.contains("tessera_capabilities_total{outcome=\"issued\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("tessera_capabilities_total{outcome=\"denied\"} 1"),
        "{m}"
    );
    assert!(m.contains("tessera_store_commits_total"), "{m}");
    let doc: Value = app
        .get("/v1/openapi.json", None)
        .await
        .json()
        .await
        .unwrap();
    // Every documented operation is served: none answers as the fallback does
    // for a route that does not exist (404 `not_found` "route"), nor 405.
    let fallback: Value = app
        .get("/v1/no-such-route", None)
        .await
        .json()
        .await
        .unwrap();
    let paths = doc["paths"].as_object().expect("paths");
    assert!(paths.len() >= 23, "{} documented paths", paths.len());
    for (path, item) in paths {
        let concrete = path
            .replace("{id}", "00000000-0000-4000-8000-000000000000")
            .replace("{name}", "nobody");
        for method in item.as_object().expect("path item").keys() {
            let req = match method.as_str() {
                "get" => app.client.get(app.url(&concrete)),
                "post" => app
                    .client
                    .post(app.url(&concrete))
                    .json(&serde_json::json!({})),
                other => panic!("{other} {path}: a method the test does not know"),
            };
            let resp = req.bearer_auth(&app.admin_token).send().await.unwrap();
            let status = resp.status();
            let body: Value = resp.json().await.unwrap_or(Value::Null);
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            assert!(
                !(status == StatusCode::NOT_FOUND
                    && body["error"]["message"] == fallback["error"]["message"]),
                "{method} {path} is documented but not served: {body}"
            );
        }
    }
}

/// A 503 from `/readyz` whose one reason is `code`; returns the body.
async fn assert_not_ready(resp: reqwest::Response, code: &str) -> Value {
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["status"], "not_ready", "{body}");
    let codes: Vec<&str> = body["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, vec![code], "{body}");
    body
}

/// A TCP proxy to PostgreSQL that the test can cut, to make the store unreachable.
struct Proxy {
    port: u16,
    cut: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start() -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(Notify::new());
        let cut2 = cut.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    _ = cut2.notified() => { conns.abort_all(); return; }
                    Ok((mut inbound, _)) = listener.accept() => {
                        conns.spawn(async move {
                            if let Ok(mut outbound) = TcpStream::connect("127.0.0.1:5432").await {
                                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            }
                        });
                    }
                }
            }
        });
        Proxy { port, cut, task }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_unreachable_fails_closed() {
    let proxy = Proxy::start().await;
    let server = crate::support::app::pg_url()
        .replace("127.0.0.1:5432", &format!("127.0.0.1:{}", proxy.port));
    let app = TestApp::builder(Db::Postgres)
        .pg_server(server)
        .start()
        .await;
    let (key, _run, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    let issued_before = cap["capability_id"].as_str().unwrap().to_owned();

    proxy.cut.notify_one();
    let _ = proxy.task.await;
    assert_not_ready(app.get("/readyz", None).await, "store_cannot_commit").await;
    let resp = app
        .capability(&token, "read", "svc-reports:reports/q2")
        .await;
    assert_error(resp, StatusCode::SERVICE_UNAVAILABLE, "store_unavailable").await;
    assert_error(
        app.exchange(cap["token"].as_str().unwrap()).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
    )
    .await;
    let body = serde_json::json!({ "user": "alice", "task": { "id": "t", "kind": "k" } });
    assert_error(
        app.post("/v1/runs", Some(&key), body).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
    )
    .await;

    // Nothing was issued while the store was away: read it directly.
    let direct = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&crate::support::app::pg_url())
        .await
        .unwrap();
    let url_schema = app.state.config.store.clone();
    let schema = match url_schema {
        tessera_broker::config::StoreUrl::Postgres(u) => {
            let u = secrecy::ExposeSecret::expose_secret(&u).to_owned();
            u.rsplit("search_path%3D").next().unwrap().to_owned()
        }
        _ => unreachable!(),
    };
    let caps: Vec<String> = sqlx::query_scalar(&format!("SELECT id FROM {schema}.capabilities"))
        .fetch_all(&direct)
        .await
        .unwrap();
    assert_eq!(caps, vec![issued_before]);
    let leases: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {schema}.leases"))
        .fetch_one(&direct)
        .await
        .unwrap();
    assert_eq!(leases, 0);
}

/// SQLite that can no longer be written (the files made immutable underneath the
/// broker, as a full or read-only disk would): issuance and exchange answer 503,
/// nothing is recorded, and service resumes when the disk does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_unwritable_fails_closed() {
    let app = TestApp::spawn(Db::Sqlite).await;
    let (_key, _run, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    let db = match &app.state.config.store {
        tessera_broker::config::StoreUrl::Sqlite(p) => p.clone(),
        _ => unreachable!(),
    };
    // The database and its WAL, not the -shm: SQLite keeps the -shm mapped
    // (MAP_SHARED), and the kernel answers a write to a mapped page of an
    // immutable file with SIGBUS, which no process can fail closed from. The
    // WAL is written on every commit, so an immutable WAL is what refuses it.
    let files: Vec<std::path::PathBuf> = ["", "-wal"]
        .iter()
        .map(|s| std::path::PathBuf::from(format!("{}{s}", db.display())))
        .filter(|p| p.exists())
        .collect();
    let chattr = |flag: &str| {
        for f in &files {
            let out = std::process::Command::new("chattr")
                .arg(flag)
                .arg(f)
                .output()
                .expect("chattr (e2fsprogs) is installed");
            assert!(
                out.status.success(),
                "chattr {flag} {}: {}",
                f.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    };
    let caps_before = app.count("capabilities").await;
    chattr("+i");
    // Readiness follows the writer's last outcome: the refused write is
    // what tells it (and, with no write for 2 s, its own probe would).
    let refused = app
        .capability(&token, "read", "svc-reports:reports/q2")
        .await;
    let ready = app.get("/readyz", None).await;
    let exchanged = app.exchange(cap["token"].as_str().unwrap()).await;
    chattr("-i");
    let body = assert_not_ready(ready, "store_cannot_commit").await;
    // An immutable file refuses writes with EPERM, which SQLite reports as
    // read-only or as an I/O error depending on the call that meets it.
    let message = body["reasons"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("(read_only)") || message.contains("(io_error)"),
        "the cause is named: {body}"
    );
    assert_error(
        refused,
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
    )
    .await;
    assert_error(
        exchanged,
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
    )
    .await;
    assert_eq!(
        app.count("capabilities").await,
        caps_before,
        "nothing issued"
    );
    assert_eq!(app.count("leases").await, 0, "nothing exchanged");
    // The disk is back: so is the broker, once its writer has retried (under a
    // loaded CI machine that can take more than one readiness probe).
    let mut status = StatusCode::SERVICE_UNAVAILABLE;
    for _ in 0..100 {
        status = app.get("/readyz", None).await.status();
        if status == StatusCode::OK {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        status,
        StatusCode::OK,
        "the broker did not recover within 10 s"
    );
    app.capability_ok(&token, "read", "svc-reports:reports/q3")
        .await;
    verify_audit_chain(&app).await;
}
