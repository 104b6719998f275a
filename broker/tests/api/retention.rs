//! Retention: ended runs and what they held are deleted after the period,
//! never while a removal still needs them; audit rows are deleted only after
//! an export through a signed checkpoint, and `tessera audit verify` with the
//! exported segment still proves the whole history (and fails on an altered
//! segment or on rows deleted beyond what was authorised).

use crate::support::app::{private, Db, DbBackends, Extra, TempDir, TestApp};
use crate::support::postgres::PgFixture;
use crate::support::proxy::Proxy;
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;
use tessera_broker::jobs::retention;

const DAY: Duration = Duration::from_secs(86_400);

async fn count_where(app: &TestApp, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(app.state.store.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_runs_are_pruned_after_the_period_and_never_while_a_removal_is_pending_sqlite() {
    ended_runs_are_pruned(Db::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_runs_are_pruned_after_the_period_and_never_while_a_removal_is_pending_postgres() {
    ended_runs_are_pruned(Db::Postgres).await
}

async fn ended_runs_are_pruned(db: Db) {
    let fx = PgFixture::new().await;
    let mut proxy = Proxy::start("127.0.0.1:5432").await;
    let backends = DbBackends {
        pg: crate::support::app::pg_url()
            .replace("127.0.0.1:5432", &format!("127.0.0.1:{}", proxy.port)),
        ..DbBackends::default()
    };
    let app = TestApp::builder(db)
        .db_backends(backends)
        .extra(Extra {
            config: "\n[retention]\nruns = \"30d\"\n".into(),
            ..Default::default()
        })
        .start()
        .await;
    // Two ended runs with capabilities, one ended run whose database user
    // cannot be removed yet, one open run.
    let mut ended = vec![];
    for i in 0..2 {
        let (key, run_id, token) = app.run_for("alice").await;
        let cap = app
            .capability_ok(&token, "read", &format!("svc-reports:reports/q{i}"))
            .await;
        assert_eq!(app.end_run(&key, &run_id).await.status(), StatusCode::OK);
        ended.push((run_id, token, cap));
    }
    let (pending_key, pending_run, pending_token) = app.run_for("alice").await;
    let db_cap = app
        .capability_ok(&pending_token, "select", &fx.resource("granted"))
        .await;
    let user = app.exchange_ok(&db_cap).await["username"]
        .as_str()
        .unwrap()
        .to_owned();
    proxy.cut().await;
    assert_eq!(
        app.end_run(&pending_key, &pending_run).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        0
    );
    let (_open_key, open_run, open_token) = app.run_for("alice").await;
    app.capability_ok(&open_token, "read", "svc-reports:reports/open")
        .await;
    let runs_before = app.count("runs").await;

    // Not yet: nothing is older than the period.
    let pass = retention::run_once(&app.state).await.unwrap();
    assert_eq!(pass, retention::Pass::default());

    app.state.clock.advance(31 * DAY);
    let pass = retention::run_once(&app.state).await.unwrap();
    assert_eq!(pass.pruned.runs, 2, "{pass:?}");
    assert_eq!(pass.pruned.capabilities, 2, "{pass:?}");
    assert_eq!(app.count("runs").await, runs_before - 2);
    for (run_id, _, _) in &ended {
        let q = format!("SELECT COUNT(*) FROM capabilities WHERE run_id = '{run_id}'");
        assert_eq!(count_where(&app, &q).await, 0);
        let q = format!("SELECT COUNT(*) FROM rate_limits WHERE bucket LIKE 'run:{run_id}%'");
        assert_eq!(count_where(&app, &q).await, 0, "its rate buckets are gone");
    }
    // What a removal still needs is kept: the run, its lease, its outbox row.
    let q = format!("SELECT COUNT(*) FROM runs WHERE id = '{pending_run}'");
    assert_eq!(count_where(&app, &q).await, 1);
    let q = format!("SELECT COUNT(*) FROM revocations WHERE run_id = '{pending_run}'");
    assert_eq!(count_where(&app, &q).await, 1);
    let q = format!("SELECT COUNT(*) FROM runs WHERE id = '{open_run}'");
    assert_eq!(
        count_where(&app, &q).await,
        1,
        "an open run is never pruned"
    );
    assert!(fx.role_exists(&user).await);

    // A pruned run's tokens are refused cleanly, not a 500.
    let (_, token, cap) = &ended[0];
    let resp = app.capability(token, "read", "svc-reports:reports/x").await;
    assert!(resp.status().is_client_error(), "{}", resp.status());
    let resp = app.exchange(cap["token"].as_str().unwrap()).await;
    assert!(resp.status().is_client_error(), "{}", resp.status());

    // The removal completes; the run goes at the next pass.
    proxy.restore().await;
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        1
    );
    assert!(!fx.role_exists(&user).await);
    let pass = retention::run_once(&app.state).await.unwrap();
    assert_eq!(pass.pruned.runs, 1);
    assert_eq!(pass.pruned.leases, 1);
    assert_eq!(pass.pruned.revocations, 1);
    let q = format!("SELECT COUNT(*) FROM leases WHERE run_id = '{pending_run}'");
    assert_eq!(count_where(&app, &q).await, 0);

    // Audited, counted, and the chain still verifies.
    let rows = app.audit("event=store.pruned").await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows[0]["detail"].as_str().unwrap().contains("runs=2"));
    let metrics = app.get("/metrics", None).await.text().await.unwrap();
    assert!(
        metrics.contains("tessera_retention_pruned_total{kind=\"runs\"} 3"),
        "{metrics}"
    );
    crate::support::audit_chain::verify_audit_chain(&app).await;
    fx.cleanup().await;
}

/// `tessera` as an admin CLI against `app`; (exit code, stdout, stderr).
fn cli(app: &TestApp, token_file: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .env("TESSERA_ADDR", format!("http://{}", app.addr))
        .env("TESSERA_ADMIN_TOKEN_FILE", token_file)
        .env_remove("TESSERA_ADMIN_TOKEN")
        .output()
        .expect("run tessera");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_rows_are_pruned_only_after_an_export_and_stay_provable_sqlite() {
    audit_rows_are_pruned(Db::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_rows_are_pruned_only_after_an_export_and_stay_provable_postgres() {
    audit_rows_are_pruned(Db::Postgres).await
}

async fn audit_rows_are_pruned(db: Db) {
    use tessera_broker::jobs::checkpoints;
    let app = TestApp::builder(db)
        .extra(Extra {
            config: "\n[retention]\nruns = \"off\"\naudit = \"1d\"\n".into(),
            ..Default::default()
        })
        .start()
        .await;
    let dir = TempDir::new();
    let token_file = dir.0.join("admin.token");
    std::fs::write(&token_file, &app.admin_token).unwrap();
    private(&token_file);
    let (_key, _run, token) = app.run_for("alice").await;
    for i in 0..5 {
        app.capability_ok(&token, "read", &format!("svc-reports:reports/a{i}"))
            .await;
    }
    let checkpointed = checkpoints::take(&app.state, true).await.unwrap().unwrap();
    for i in 0..3 {
        app.capability_ok(&token, "read", &format!("svc-reports:reports/b{i}"))
            .await;
    }
    app.state.clock.advance(2 * DAY);

    // Nothing is pruned without an export.
    let pass = retention::run_once(&app.state).await.unwrap();
    assert_eq!(pass.audit_rows, 0);
    // Nor with an export row planted in the table by whoever writes the
    // database: only an export recorded in the chain counts.
    let pool = app.state.store.pool();
    let jws: String =
        sqlx::query_scalar("SELECT jws FROM audit_checkpoints ORDER BY seq DESC LIMIT 1")
            .fetch_one(pool)
            .await
            .unwrap();
    let zeros = "0".repeat(64);
    sqlx::query(&format!(
        "INSERT INTO audit_exports (id, first_seq, last_seq, last_hash, checkpoint, sha256, created_at) \
         VALUES ('planted', 1, 1000000, '{zeros}', '{jws}', '{zeros}', 0)"
    ))
    .execute(pool)
    .await
    .unwrap();
    assert_eq!(retention::run_once(&app.state).await.unwrap().audit_rows, 0);
    sqlx::query("DELETE FROM audit_exports WHERE id = 'planted'")
        .execute(pool)
        .await
        .unwrap();
    // A tampered row is never exported (and so never pruned out of sight).
    let decision: String = sqlx::query_scalar("SELECT decision FROM audit WHERE seq = 2")
        .fetch_one(pool)
        .await
        .unwrap();
    sqlx::query("UPDATE audit SET decision = 'tampered' WHERE seq = 2")
        .execute(pool)
        .await
        .unwrap();
    let refused = dir.0.join("refused.jsonl");
    let (code, _, err) = cli(
        &app,
        &token_file,
        &[
            "audit",
            "export",
            "--through-checkpoint",
            "--output",
            refused.to_str().unwrap(),
        ],
    );
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("does not verify"), "{err}");
    sqlx::query(&format!(
        "UPDATE audit SET decision = '{decision}' WHERE seq = 2"
    ))
    .execute(pool)
    .await
    .unwrap();
    assert_eq!(app.audit("event=audit.exported").await.len(), 0);

    let segment = dir.0.join("audit-1.jsonl");
    let seg = segment.to_str().unwrap();
    let (code, _, err) = cli(
        &app,
        &token_file,
        &["audit", "export", "--through-checkpoint", "--output", seg],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&format!("rows 1..{checkpointed}")), "{err}");
    let lines = std::fs::read_to_string(&segment).unwrap();
    assert_eq!(
        lines.lines().count() as i64,
        checkpointed + 1,
        "rows and the checkpoint line"
    );
    // The export itself cannot be written twice over.
    let (code, _, err) = cli(
        &app,
        &token_file,
        &["audit", "export", "--through-checkpoint", "--output", seg],
    );
    assert_ne!(code, 0, "{err}");
    assert_eq!(app.audit("event=audit.exported").await.len(), 1);

    let pass = retention::run_once(&app.state).await.unwrap();
    assert_eq!(pass.audit_rows, checkpointed as u64);
    let first: i64 = count_where(&app, "SELECT MIN(seq) FROM audit").await;
    assert_eq!(first, checkpointed + 1);
    let pruned = app.audit("event=audit.pruned").await;
    assert_eq!(pruned.len(), 1);
    assert!(pruned[0]["detail"]
        .as_str()
        .unwrap()
        .contains(&format!("through={checkpointed}")));
    // A second pass has nothing more to do.
    assert_eq!(retention::run_once(&app.state).await.unwrap().audit_rows, 0);

    // The remaining chain verifies from its first row; the pruned prefix is
    // named as unverified without its export, and proved with it.
    let report: Value = app
        .get("/v1/admin/audit/verify", Some(&app.admin_token))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["pruned_through"]["seq"], checkpointed, "{report}");
    let (code, out, err) = cli(&app, &token_file, &["audit", "verify"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("not verified"), "{out}");
    let (code, out, err) = cli(&app, &token_file, &["audit", "verify", "--segments", seg]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "rows 1..{checkpointed} pruned by retention verified from {checkpointed} exported rows"
        )),
        "{out}"
    );
    // With the witness's checkpoints (here the segment's own line): the
    // pruned checkpoint is checked against the exported row.
    let witness = dir.0.join("witness.jsonl");
    std::fs::write(&witness, lines.lines().last().unwrap()).unwrap();
    let wit = witness.to_str().unwrap();
    let (code, out, err) = cli(
        &app,
        &token_file,
        &["audit", "verify", "--segments", seg, "--checkpoints", wit],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("BROKEN"), "{out}{err}");
    // The same checkpoint against an export whose checkpointed row differs.
    let forged = dir.0.join("forged.jsonl");
    let last_row = lines.lines().nth(checkpointed as usize - 1).unwrap();
    let v: Value = serde_json::from_str(last_row).unwrap();
    let old_hash = v["hash"].as_str().unwrap();
    std::fs::write(&forged, lines.replace(old_hash, &"0".repeat(64))).unwrap();
    let (code, out, _) = cli(
        &app,
        &token_file,
        &[
            "audit",
            "verify",
            "--segments",
            forged.to_str().unwrap(),
            "--checkpoints",
            wit,
        ],
    );
    assert_eq!(code, 1, "{out}");

    // An altered segment fails: one row's decision changed.
    let altered = dir.0.join("altered.jsonl");
    let text = lines.replacen("\"decision\":\"allow\"", "\"decision\":\"deny\"", 1);
    assert_ne!(text, lines);
    std::fs::write(&altered, text).unwrap();
    let (code, out, _) = cli(
        &app,
        &token_file,
        &["audit", "verify", "--segments", altered.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("edited"), "{out}");
    // A segment missing a row fails.
    let short = dir.0.join("short.jsonl");
    let kept: Vec<&str> = lines
        .lines()
        .filter(|l| !l.starts_with("{\"seq\":2,"))
        .collect();
    assert_eq!(kept.len(), lines.lines().count() - 1);
    std::fs::write(&short, kept.join("\n")).unwrap();
    let (code, out, _) = cli(
        &app,
        &token_file,
        &["audit", "verify", "--segments", short.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("lack"), "{out}");

    // Rows deleted beyond what the audit.pruned row authorised are caught,
    // even with the next row's link rewritten to match.
    let beyond = checkpointed + 2;
    let hash: String = sqlx::query_scalar(&format!("SELECT hash FROM audit WHERE seq = {beyond}"))
        .fetch_one(app.state.store.pool())
        .await
        .unwrap();
    sqlx::query(&format!("DELETE FROM audit WHERE seq <= {beyond}"))
        .execute(app.state.store.pool())
        .await
        .unwrap();
    sqlx::query(&format!(
        "UPDATE audit SET prev_hash = '{hash}' WHERE seq = {}",
        beyond + 1
    ))
    .execute(app.state.store.pool())
    .await
    .unwrap();
    let report: Value = app
        .get("/v1/admin/audit/verify", Some(&app.admin_token))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(report["ok"], false, "{report}");
    assert_eq!(report["first_problem"]["kind"], "deleted", "{report}");
}
