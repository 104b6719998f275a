//! Benchmark of the `postgres` backend, end to end, with raw SQL as the ceiling.
//!
//! Starts the real broker in process (router on a loopback port, SQLite store in
//! a temporary directory, one `postgres` backend on the local server), then:
//!
//! 1. `CLIENTS` concurrent HTTP clients exchange one capability `ISSUE` times
//!    (POST /v1/exchange: verify, reserve a use, SCRAM verifier, CREATE ROLE);
//! 2. a run holding 1,000 live users (20 of them with an open session) is
//!    ended, and the time until every user is dropped and every session cut is
//!    measured (POST /v1/runs/{id}/end, then the revocation worker's passes);
//! 3. the same server, raw SQL: `CLIENTS` connections creating roles with a
//!    precomputed verifier and granting them what the broker grants on this
//!    version (`IN ROLE <group>` on 16+, USAGE and SELECT to the role itself
//!    before), then one transaction dropping 1,000 of them.
//!
//! `bench/db.sh` runs it in release mode. Loopback only; cleans up after itself.

use serde_json::{json, Value};
use sqlx::{Connection, Executor, PgConnection};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tessera_broker::app::App;
use tessera_broker::clock::Clock;
use tessera_broker::config::{Config, Overrides};
use tessera_broker::keys::Kek;
use tessera_broker::policy::PolicyEngine;

const POLICY: &str = r#"
@id("bench-db") @ttl("1h") @uses("100000")
permit (principal == Tessera::User::"bench", action == Tessera::Action::"select", resource)
when { resource.backend == "pg-bench" };
"#;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pg = std::env::var("PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let clients = env_or("CLIENTS", 16);
    let issue = env_or("ISSUE", 2000);
    let hold = env_or("HOLD", 1000);
    let iterations = env_or("SCRAM_ITERATIONS", 4096) as u32;
    println!("{clients} clients, {issue} credentials, run end with {hold} users, SCRAM iterations {iterations}");
    tessera_broker::server::install_crypto_provider();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();

    let mut sql = PgConnection::connect(&pg).await?;
    sql.execute(
        "DROP SCHEMA IF EXISTS tsr_bench CASCADE; CREATE SCHEMA tsr_bench; \
             CREATE TABLE tsr_bench.orders (id int); INSERT INTO tsr_bench.orders VALUES (1);",
    )
    .await?;

    let dir = std::env::temp_dir().join(format!("tessera-db-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let admin = tessera_broker::secret::AdminToken::generate();
    let admin_token = admin.expose_secret().to_owned();
    let (app, base) = start_broker(&dir, &pg, &admin_token, iterations).await?;
    let http = reqwest::Client::new();
    let rt = post(
        &http,
        &base,
        "/v1/admin/runtimes",
        Some(&admin_token),
        json!({ "name": "bench", "users": "*", "task_kinds": "*" }),
    )
    .await?;
    let rt_key = rt["key"].as_str().unwrap_or_default().to_owned();

    // 1. Issuance, end to end.
    let (run1, cap1) = run_with_capability(&http, &base, &rt_key).await?;
    let started = Instant::now();
    let users1 = exchange_many(&http, &base, &cap1, issue, clients).await?;
    let issue_secs = started.elapsed().as_secs_f64();
    println!(
        "broker: {issue} credentials with {clients} clients in {issue_secs:.2} s = {:.0}/s",
        issue as f64 / issue_secs
    );
    end_and_settle(&http, &base, &rt_key, &run1, &app).await?;
    drop(users1);

    // 2. Ending a run that holds `hold` live users, some of them connected.
    let (run2, cap2) = run_with_capability(&http, &base, &rt_key).await?;
    let dsns = exchange_many(&http, &base, &cap2, hold, clients).await?;
    let mut sessions = vec![];
    for dsn in dsns.iter().take(20) {
        let mut c = PgConnection::connect(dsn).await?;
        c.execute("SELECT 1").await?;
        sessions.push(c);
    }
    let started = Instant::now();
    end_and_settle(&http, &base, &rt_key, &run2, &app).await?;
    let end_secs = started.elapsed().as_secs_f64();
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_roles WHERE rolname LIKE $1")
        .bind(format!("tsr_{}_%", run2.replace('-', "")))
        .fetch_one(&mut sql)
        .await?;
    let mut cut = 0;
    for mut s in sessions {
        if s.execute("SELECT 1").await.is_err() {
            cut += 1;
        }
    }
    println!(
        "broker: run end with {hold} live users (20 connected): {:.0} ms until all dropped ({left} left, {cut}/20 sessions cut)",
        end_secs * 1000.0
    );

    // 3. Raw SQL on the same server: the ceiling, as the broker grants on this
    // version (backends::postgres::users::Access): on 16+ membership of the
    // broker's group for the table; before 16 the grants held by the user
    // itself (USAGE on the schema, which PUBLIC lacks, and SELECT on the table).
    let version: i32 = sqlx::query_scalar("SELECT current_setting('server_version_num')::int")
        .fetch_one(&mut sql)
        .await?;
    let group: Option<String> = if version >= 160_000 {
        Some(
            sqlx::query_scalar(
                "SELECT rolname::text FROM pg_roles WHERE rolname LIKE 'tsr\\_g\\_%' AND \
                 has_table_privilege(oid, 'tsr_bench.orders', 'SELECT') LIMIT 1",
            )
            .fetch_one(&mut sql)
            .await?,
        )
    } else {
        None
    };
    let grant = |name: &str| match &group {
        Some(g) => format!(" IN ROLE \"{g}\""),
        None => format!(
            "; GRANT USAGE ON SCHEMA tsr_bench TO \"{name}\"; \
             GRANT SELECT ON TABLE tsr_bench.orders TO \"{name}\""
        ),
    };
    let shown = if group.is_some() {
        "CREATE ROLE … IN ROLE <group>"
    } else {
        "CREATE ROLE + GRANT USAGE, SELECT to the role"
    };
    let started = Instant::now();
    for _ in 0..200 {
        std::hint::black_box(tessera_broker::backends::postgres::scram::verifier(
            "bench", iterations,
        ));
    }
    println!(
        "cost: one SCRAM-SHA-256 verifier ({iterations} iterations) = {:.0} µs of CPU",
        started.elapsed().as_secs_f64() * 1e6 / 200.0
    );
    let verifier = tessera_broker::backends::postgres::scram::verifier("bench", iterations);
    let next = AtomicUsize::new(0);
    // Before 16 the GRANTs rewrite one ACL row, which two sessions may not do
    // at once ("tuple concurrently updated"): serialised, as the broker does.
    let acl = tokio::sync::Mutex::new(());
    let started = Instant::now();
    let workers = (0..clients).map(|_| async {
        let mut c = PgConnection::connect(&pg).await?;
        while next.fetch_add(1, Ordering::Relaxed) < issue {
            let _serial = match group {
                Some(_) => None,
                None => Some(acl.lock().await),
            };
            let name = format!("tsr_raw_{}", tessera_broker::ids::hex(&tessera_broker::ids::random_bytes::<8>()));
            sqlx::raw_sql(&format!(
                "BEGIN; CREATE ROLE \"{name}\" LOGIN PASSWORD '{verifier}' VALID UNTIL '2100-01-01T00:00:00Z' \
                 CONNECTION LIMIT 2{}; COMMIT",
                grant(&name)
            ))
            .execute(&mut c)
            .await?;
        }
        anyhow::Ok(())
    });
    for r in futures_util::future::join_all(workers).await {
        r?;
    }
    let raw_secs = started.elapsed().as_secs_f64();
    println!(
        "raw SQL: {issue} {shown} with {clients} connections in {raw_secs:.2} s = {:.0}/s",
        issue as f64 / raw_secs
    );
    let raw: Vec<String> =
        sqlx::query_scalar("SELECT rolname::text FROM pg_roles WHERE rolname LIKE 'tsr\\_raw\\_%'")
            .fetch_all(&mut sql)
            .await?;
    let mut dropped_first = None;
    for chunk in raw.chunks(hold) {
        let list: Vec<String> = chunk.iter().map(|r| format!("\"{r}\"")).collect();
        let started = Instant::now();
        // What the roles were granted goes with them (DROP OWNED BY revokes it).
        let list = list.join(", ");
        sqlx::raw_sql(&format!(
            "BEGIN; DROP OWNED BY {list}; DROP ROLE {list}; COMMIT"
        ))
        .execute(&mut sql)
        .await?;
        dropped_first.get_or_insert((chunk.len(), started.elapsed()));
    }
    if let Some((n, took)) = dropped_first {
        println!(
            "raw SQL: DROP OWNED BY and DROP ROLE of {n} roles in one transaction: {:.0} ms",
            took.as_secs_f64() * 1000.0
        );
    }

    sql.execute("DROP SCHEMA tsr_bench CASCADE").await?;
    if let Some(group) = &group {
        sql.execute(format!("DROP OWNED BY \"{group}\"; DROP ROLE \"{group}\"").as_str())
            .await?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

async fn start_broker(
    dir: &std::path::Path,
    pg: &str,
    admin_token: &str,
    iterations: u32,
) -> anyhow::Result<(std::sync::Arc<App>, String)> {
    let schema = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../policy/schema.cedarschema"
    ))?;
    // The broker publishes its policy directory's files at start (the version
    // every replica enforces), so the set is written there as well as compiled.
    let policy_dir = dir.join("policy");
    std::fs::create_dir_all(&policy_dir)?;
    std::fs::write(policy_dir.join("schema.cedarschema"), &schema)?;
    std::fs::write(policy_dir.join("bench.cedar"), POLICY)?;
    std::fs::write(policy_dir.join("entities.json"), "[]")?;
    let policy =
        PolicyEngine::from_sources(&schema, &[("bench.cedar".into(), POLICY.into())], "[]")
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    // Bound first: the broker answers only the `Host` of the address it listens on.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let store = format!("sqlite://{}", dir.join("tessera.db").display());
    let pg = pg.to_owned();
    let env = move |k: &str| match k {
        "TESSERA_STORE_URL" => Some(store.clone()),
        "BENCH_PG_URL" => Some(pg.clone()),
        _ => None,
    };
    // `strict = false`: the machine's shared server keeps PostgreSQL's defaults
    // (every database open to PUBLIC), which strict mode refuses to issue over;
    // this measures issuance, and the check it skips runs once a minute, not
    // per exchange (backends::strict).
    let config = Config::from_toml(
        &format!(
            "[limits]\nmax_uses = 100000\nmax_rate = \"1000000/s\"\n\n\
             [backends.pg-bench]\nkind = \"postgres\"\nurl_env = \"BENCH_PG_URL\"\n\
             max_connections = 16\nscram_iterations = {iterations}\nstrict = false\n"
        ),
        &Overrides {
            dev: true,
            listen: Some(addr.to_string()),
            data_dir: Some(dir.to_path_buf()),
            policy_dir: Some(policy_dir),
        },
        &env,
    )?;
    let (kek, _) = Kek::generate();
    let app = App::build(
        config,
        kek,
        policy,
        Some(tessera_broker::ids::sha256_hex(admin_token.as_bytes())),
        Clock::new(),
    )
    .await?;
    let base = format!("http://{addr}");
    let router = tessera_broker::api::router(app.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok((app, base))
}

async fn post(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    bearer: Option<&str>,
    body: Value,
) -> anyhow::Result<Value> {
    let mut req = http.post(format!("{base}{path}")).json(&body);
    if let Some(b) = bearer {
        req = req.bearer_auth(b);
    }
    let resp = req.send().await?;
    let status = resp.status();
    let v: Value = resp.json().await.unwrap_or(Value::Null);
    anyhow::ensure!(status.is_success(), "{path}: {status} {v}");
    Ok(v)
}

/// Starts a run for "bench" and gets one capability; returns (run id, capability).
async fn run_with_capability(
    http: &reqwest::Client,
    base: &str,
    rt_key: &str,
) -> anyhow::Result<(String, String)> {
    let run = post(
        http,
        base,
        "/v1/runs",
        Some(rt_key),
        json!({ "user": "bench", "task": { "id": "t", "kind": "bench" }, "ttl": "1h" }),
    )
    .await?;
    let token = run["run_token"].as_str().unwrap_or_default();
    let cap = post(
        http,
        base,
        "/v1/capabilities",
        Some(token),
        json!({ "action": "select", "resource": "pg-bench:postgres.tsr_bench.orders" }),
    )
    .await?;
    Ok((
        run["run_id"].as_str().unwrap_or_default().to_owned(),
        cap["token"].as_str().unwrap_or_default().to_owned(),
    ))
}

/// `count` exchanges over `clients` concurrent clients; returns the DSNs.
async fn exchange_many(
    http: &reqwest::Client,
    base: &str,
    capability: &str,
    count: usize,
    clients: usize,
) -> anyhow::Result<Vec<String>> {
    let next = AtomicUsize::new(0);
    let workers = (0..clients).map(|_| async {
        let mut dsns = vec![];
        while next.fetch_add(1, Ordering::Relaxed) < count {
            let v = post(
                http,
                base,
                "/v1/exchange",
                None,
                json!({ "capability": capability }),
            )
            .await?;
            dsns.push(v["dsn"].as_str().unwrap_or_default().to_owned());
        }
        anyhow::Ok(dsns)
    });
    let mut all = vec![];
    for r in futures_util::future::join_all(workers).await {
        all.extend(r?);
    }
    Ok(all)
}

/// Ends a run and drives the revocation worker until its outbox is empty.
async fn end_and_settle(
    http: &reqwest::Client,
    base: &str,
    rt_key: &str,
    run_id: &str,
    app: &App,
) -> anyhow::Result<()> {
    let started = Instant::now();
    post(
        http,
        base,
        &format!("/v1/runs/{run_id}/end"),
        Some(rt_key),
        Value::Null,
    )
    .await?;
    let ended = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let pass = Instant::now();
        let n = tessera_broker::jobs::revocation::run_once(app).await?;
        if std::env::var_os("VERBOSE").is_some() {
            eprintln!(
                "  run end request {ended:?}; worker pass: {n} users in {:?}",
                pass.elapsed()
            );
        }
        let pending = tessera_broker::store::revocations::pending(&app.store, false, 1).await?;
        if pending.is_empty() {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "revocations did not settle");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
