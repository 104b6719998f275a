//! The client side against the real PostgreSQL: `Client::database` and `tessera
//! exec --db` running `psql` as a throw-away user that can read one table, whose
//! user is gone once the command exited and the outbox ran.

use crate::support::app::{Db, DbBackends, TestApp};
use crate::support::postgres::PgFixture;

const BIN: &str = env!("CARGO_BIN_EXE_tessera");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_runs_psql_as_a_user_that_reads_one_table_and_is_then_gone() {
    let fx = PgFixture::new().await;
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(DbBackends::default())
        .start()
        .await;
    let (_k, run_id, token) = app.run_for("alice").await;
    let dir = crate::support::app::TempDir::new();
    let token_file = dir.0.join("run.token");
    std::fs::write(&token_file, &token).unwrap();
    crate::support::app::private(&token_file);
    let s = &fx.schema;
    let script = format!(
        "psql -XtAc 'select v from {s}.granted' && \
         (psql -XtAc 'select * from {s}.other' 2>&1 || true) && \
         echo \"user=$PGUSER\" && env | cut -d= -f1 | sort | tr '\\n' ' '"
    );
    let out = tokio::process::Command::new(BIN)
        .args([
            "exec",
            "--db",
            &format!("select={}", fx.resource("granted")),
            "--",
            "sh",
            "-c",
            &script,
        ])
        .env("TESSERA_ADDR", app.url(""))
        .env("TESSERA_RUN_TOKEN_FILE", &token_file)
        .env("DATABASE_URL", "postgres://postgres@127.0.0.1/postgres")
        .env("PGUSER", "postgres")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("a"), "{stdout}");
    assert!(
        lines.next().unwrap().contains("permission denied"),
        "{stdout}"
    );
    let user = lines
        .next()
        .unwrap()
        .strip_prefix("user=")
        .unwrap()
        .to_owned();
    assert!(
        user.starts_with("tsr_"),
        "the parent's PGUSER did not pass: {stdout}"
    );
    let names = lines.next().unwrap();
    for expected in [
        "DATABASE_URL",
        "PGDATABASE",
        "PGHOST",
        "PGPASSWORD",
        "PGPORT",
        "PGUSER",
        "PATH",
    ] {
        assert!(names.split(' ').any(|n| n == expected), "{names}");
    }
    assert!(!names.contains("TESSERA_RUN_TOKEN"), "{names}");

    // exec revoked the capability when psql exited; the outbox removes the user.
    assert!(fx.role_exists(&user).await, "removal is the worker's job");
    tessera_broker::jobs::revocation::run_once(&app.state)
        .await
        .unwrap();
    assert!(!fx.role_exists(&user).await, "{user} still exists");
    let rows = app
        .audit(&format!("run={run_id}&event=lease.revoked"))
        .await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["reason"], "capability_revoked");
    fx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_library_gets_a_database_user() {
    let fx = PgFixture::new().await;
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(DbBackends::default())
        .start()
        .await;
    let (_k, _run, token) = app.run_for("alice").await;
    let client = tessera_client::Client::builder()
        .address(app.url(""))
        .run_token(secrecy::SecretString::from(token))
        .build()
        .unwrap();
    let db = client
        .database("select", &fx.resource("granted"))
        .await
        .unwrap();
    assert_eq!(
        (db.kind.as_str(), db.port, db.database.as_str()),
        ("postgres", 5432, "postgres")
    );
    let shown = format!("{db:?}");
    assert!(!shown.contains(db.password()) && shown.contains(&db.username));
    let env: std::collections::BTreeMap<_, _> = db.environment().into_iter().collect();
    assert_eq!(env["PGUSER"], db.username);
    assert_eq!(env["DATABASE_URL"], db.dsn());
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(db.dsn())
        .await
        .unwrap();
    let v: String = sqlx::query_scalar(&format!("select v from {}.granted", fx.schema))
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(v, "a");
    drop(conn);
    // A capability for something policy does not grant is a typed denial.
    assert!(matches!(
        client.database("delete", &fx.resource("granted")).await,
        Err(tessera_client::Error::Denied { .. })
    ));
    assert!(client.revoke(&db.capability).await.unwrap());
    tessera_broker::jobs::revocation::run_once(&app.state)
        .await
        .unwrap();
    assert!(!fx.role_exists(&db.username).await);
    fx.cleanup().await;
}
