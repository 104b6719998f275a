//! Backend kind `mysql` against the real MariaDB server on this machine: a
//! throw-away account with one privilege on one table, removed for real.
//!
//! Each test uses tables of its own (`tsr_t_<random>_…`) in the backend's
//! database `test`, plus a database of its own for "another schema", and drops
//! them and the roles they caused at the end. MariaDB checks passwords here, so
//! logins prove the handed-out password matches the hash the broker sent.

use crate::support::app::{assert_error, mysql_url, Db, DbBackends, TestApp};
use crate::support::mysql::{MyFixture, DENIED};
use crate::support::proxy::Proxy;
use reqwest::StatusCode;
use serde_json::Value;
use sqlx::mysql::MySqlDatabaseError;
use sqlx::{Connection, MySqlConnection, Row};

fn denied(e: sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<MySqlDatabaseError>())
        .is_some_and(|m| DENIED.contains(&m.number()))
}

async fn select(conn: &mut MySqlConnection, table: &str) -> Result<i64, sqlx::Error> {
    sqlx::query(&format!("SELECT COUNT(*) AS n FROM {table}"))
        .fetch_one(conn)
        .await
        .map(|r| r.get::<i64, _>("n"))
}

async fn end_run(app: &TestApp, key: &str, run_id: &str) {
    let resp = app.end_run(key, run_id).await;
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn my_issued_user_gets_exactly_one_grant_and_run_end_removes_it() {
    let fx = MyFixture::new().await;
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(DbBackends::default())
        .start()
        .await;
    let (key, run_id, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    let v = app.exchange_ok(&cap).await;
    assert_eq!(v["kind"], "mysql");
    let user = v["username"].as_str().unwrap().to_owned();
    let password = v["password"].as_str().unwrap();
    let dsn = v["dsn"].as_str().unwrap().to_owned();
    assert_eq!(
        dsn,
        format!("mysql://{user}:{password}@127.0.0.1:3306/test")
    );
    assert_eq!(
        (v["host"].as_str(), v["port"].as_u64()),
        (Some("127.0.0.1"), Some(3306))
    );

    // The password really is checked: a wrong one is refused.
    let wrong = dsn.replace(password, "tsr_pw_wrong");
    assert!(MySqlConnection::connect(&wrong).await.is_err());

    let mut conn = MySqlConnection::connect(&dsn).await.unwrap();
    assert_eq!(select(&mut conn, &fx.table("granted")).await.unwrap(), 1);
    assert!(denied(
        select(&mut conn, &fx.table("other")).await.unwrap_err()
    ));
    let p = &fx.prefix;
    assert!(denied(
        select(&mut conn, &format!("{p}_b.{p}_granted"))
            .await
            .unwrap_err()
    ));
    for write in [
        format!("INSERT INTO {} VALUES (9, 'x')", fx.table("granted")),
        format!("UPDATE {} SET v = 'y'", fx.table("granted")),
        format!("DELETE FROM {}", fx.table("granted")),
    ] {
        let e = sqlx::raw_sql(&write).execute(&mut conn).await.unwrap_err();
        assert!(denied(e), "{write}");
    }
    let limit: i64 = sqlx::query_scalar(
        "SELECT CAST(max_user_connections AS SIGNED) FROM mysql.user WHERE User = ?",
    )
    .bind(&user)
    .fetch_one(&fx.admin)
    .await
    .unwrap();
    assert_eq!(limit, 2);

    // Run end: locked, session killed, dropped.
    end_run(&app, &key, &run_id).await;
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        1
    );
    assert!(!fx.user_exists(&user).await, "user dropped");
    assert!(
        select(&mut conn, &fx.table("granted")).await.is_err(),
        "the session opened before was killed"
    );
    assert!(MySqlConnection::connect(&dsn).await.is_err(), "login fails");
    fx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn my_capability_revoke_and_expiry_remove_users() {
    let fx = MyFixture::new().await;
    let app = TestApp::builder(Db::Postgres)
        .db_backends(DbBackends::default())
        .start()
        .await;
    let (_key, _run, token) = app.run_for("alice").await;

    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    let v = app.exchange_ok(&cap).await;
    let revoked = v["username"].as_str().unwrap().to_owned();
    let mut open = MySqlConnection::connect(v["dsn"].as_str().unwrap())
        .await
        .unwrap();
    let id = cap["capability_id"].as_str().unwrap();
    app.post(
        &format!("/v1/capabilities/{id}/revoke"),
        Some(&token),
        Value::Null,
    )
    .await;
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        1
    );
    assert!(!fx.user_exists(&revoked).await);
    assert!(select(&mut open, &fx.table("granted")).await.is_err());

    // MariaDB has no account expiry: only the reaper ends this user.
    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    let v = app.exchange_ok(&cap).await;
    let expiring = v["username"].as_str().unwrap().to_owned();
    let dsn = v["dsn"].as_str().unwrap().to_owned();
    let mut open = MySqlConnection::connect(&dsn).await.unwrap();
    app.state
        .clock
        .advance(std::time::Duration::from_secs(11 * 60));
    tessera_broker::jobs::expiry::sweep(&app.state)
        .await
        .unwrap();
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        1
    );
    assert!(!fx.user_exists(&expiring).await);
    assert!(select(&mut open, &fx.table("granted")).await.is_err());
    assert!(MySqlConnection::connect(&dsn).await.is_err());
    fx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn my_fifty_parallel_exchanges_get_distinct_working_users() {
    let fx = MyFixture::new().await;
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(DbBackends::default())
        .start()
        .await;
    let (key, run_id, token) = app.run_for("dora").await;
    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    let capability = cap["token"].as_str().unwrap().to_owned();
    let calls = (0..50).map(|_| app.exchange(&capability));
    let mut dsns = std::collections::BTreeSet::new();
    for resp in futures_util::future::join_all(calls).await {
        assert_eq!(resp.status(), StatusCode::OK);
        let v: Value = resp.json().await.unwrap();
        dsns.insert(v["dsn"].as_str().unwrap().to_owned());
    }
    assert_eq!(dsns.len(), 50);
    assert_error(
        app.exchange(&capability).await,
        StatusCode::FORBIDDEN,
        "uses_exhausted",
    )
    .await;
    for dsn in &dsns {
        let mut conn = MySqlConnection::connect(dsn).await.unwrap();
        assert_eq!(select(&mut conn, &fx.table("granted")).await.unwrap(), 1);
        conn.close().await.unwrap();
    }
    end_run(&app, &key, &run_id).await;
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        50
    );
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM mysql.user WHERE User LIKE ?")
        .bind(format!("tsr_{}_%", run_id.replace('-', "")))
        .fetch_one(&fx.admin)
        .await
        .unwrap();
    assert_eq!(left, 0);
    fx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn my_hostile_resource_names_are_refused_before_any_sql() {
    let fx = MyFixture::exclusive().await;
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(DbBackends::default())
        .start()
        .await;
    let (_key, _run, token) = app.run_for("alice").await;
    let before = fx.account_count().await;
    let long = "t".repeat(300);
    for res in [
        "my-test:test.t`; DROP USER root; --".to_owned(),
        "my-test:test.t'".to_owned(),
        "my-test:test.t\\".to_owned(),
        "my-test:test.t;".to_owned(),
        "my-test:test.t--".to_owned(),
        "my-test:test.tä".to_owned(),
        format!("my-test:test.{long}"),
        "my-test:test.t*".to_owned(),
        "my-test:*.t".to_owned(),
        "my-test:test.public.t".to_owned(),
        "my-test:mysql.user".to_owned(),
    ] {
        assert_error(
            app.capability(&token, "select", &res).await,
            StatusCode::BAD_REQUEST,
            "invalid_resource",
        )
        .await;
    }
    assert_eq!(app.count("capabilities").await, 0);
    assert_eq!(fx.account_count().await, before, "no account was created");
    fx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn my_downstream_down_is_503_and_revocation_survives_restart() {
    let fx = MyFixture::new().await;
    let mut proxy = Proxy::start("127.0.0.1:3306").await;
    let backends = DbBackends {
        mysql: mysql_url().replace("127.0.0.1:3306", &format!("127.0.0.1:{}", proxy.port)),
        ..DbBackends::default()
    };
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(backends)
        .start()
        .await;
    let (key, run_id, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    let v = app.exchange_ok(&cap).await;
    let user = v["username"].as_str().unwrap().to_owned();

    proxy.cut().await;
    let err = assert_error(
        app.exchange(cap["token"].as_str().unwrap()).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "backend_unavailable",
    )
    .await;
    assert!(!err.to_string().contains("mysql://"));
    let live: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM leases WHERE revoked_at IS NULL")
        .fetch_one(app.state.store.pool())
        .await
        .unwrap();
    assert_eq!(live, 1);
    end_run(&app, &key, &run_id).await;
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        0
    );
    assert!(fx.user_exists(&user).await);

    // Restart while the server is away; it comes back; the new broker finishes.
    let app = app.restart().await;
    proxy.restore().await;
    app.state.clock.advance(std::time::Duration::from_secs(60));
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        2
    );
    assert!(!fx.user_exists(&user).await);
    fx.cleanup().await;
}

/// The least privileges docs/backends/databases.md asks for are enough: an
/// account with CREATE USER, CONNECTION ADMIN, PROCESS and the grant option on
/// the table — not root — issues, and removes on run end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn my_least_privileged_broker_account_suffices() {
    let fx = MyFixture::new().await;
    let account = format!("{}_broker", fx.prefix);
    for sql in [
        format!("CREATE USER '{account}'@'%'"),
        format!("GRANT CREATE USER, CONNECTION ADMIN, PROCESS ON *.* TO '{account}'@'%'"),
        format!(
            "GRANT SELECT ON {} TO '{account}'@'%' WITH GRANT OPTION",
            fx.table("granted")
        ),
    ] {
        sqlx::raw_sql(&sql).execute(&fx.admin).await.unwrap();
    }
    let backends = DbBackends {
        mysql: mysql_url().replace("mysql://root@", &format!("mysql://{account}@")),
        ..DbBackends::default()
    };
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(backends)
        .start()
        .await;
    let (key, run_id, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    let v = app.exchange_ok(&cap).await;
    let user = v["username"].as_str().unwrap().to_owned();
    let mut open = MySqlConnection::connect(v["dsn"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(select(&mut open, &fx.table("granted")).await.unwrap(), 1);
    end_run(&app, &key, &run_id).await;
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        1
    );
    assert!(!fx.user_exists(&user).await);
    assert!(select(&mut open, &fx.table("granted")).await.is_err());
    drop(app);
    sqlx::raw_sql(&format!("DROP USER '{account}'@'%'"))
        .execute(&fx.admin)
        .await
        .unwrap();
    fx.cleanup().await;
}

/// `_` and `%` in a database-level grant are wildcards on MariaDB: a grant on
/// `a_b`.* must not open `aXb` (issue 13, item 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn my_database_grant_does_not_match_similar_names() {
    let fx = MyFixture::new().await;
    let p = &fx.prefix;
    let granted = format!("{p}_main");
    let sibling = format!("{p}Xmain");
    let percent = format!("{p}_m%");
    for sql in [
        format!("CREATE DATABASE `{granted}`"),
        format!("CREATE TABLE `{granted}`.t (v text)"),
        format!("INSERT INTO `{granted}`.t VALUES ('ok')"),
        format!("CREATE DATABASE `{sibling}`"),
        format!("CREATE TABLE `{sibling}`.secrets (v text)"),
        format!("INSERT INTO `{sibling}`.secrets VALUES ('leak')"),
    ] {
        sqlx::raw_sql(&sql).execute(&fx.admin).await.unwrap();
    }
    // The backend grants on the one database its URL names, as deployed.
    let backends = DbBackends {
        mysql: mysql_url().replace("/test", &format!("/{granted}")),
        ..DbBackends::default()
    };
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(backends)
        .start()
        .await;
    let (_key, _run, token) = app.run_for("frank").await;
    // System databases are never a resource (issue 13, item 9).
    for res in [
        "my-test:mysql.user",
        "my-test:mysql.*",
        "my-test:information_schema.processlist",
        "my-test:performance_schema.threads",
        "my-test:sys.sessions",
    ] {
        assert_error(
            app.capability(&token, "select", res).await,
            StatusCode::BAD_REQUEST,
            "invalid_resource",
        )
        .await;
    }
    // `%` is not a database name the grammar accepts at all.
    let resp = app
        .capability(&token, "select", &format!("my-test:{percent}.*"))
        .await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let cap = app
        .capability_ok(&token, "select", &format!("my-test:{granted}.*"))
        .await;
    let v = app.exchange_ok(&cap).await;
    let dsn = v["dsn"].as_str().unwrap().to_owned();
    let mut conn = MySqlConnection::connect(&dsn).await.unwrap();
    assert_eq!(
        select(&mut conn, &format!("`{granted}`.t")).await.unwrap(),
        1
    );
    let leak = select(&mut conn, &format!("`{sibling}`.secrets")).await;
    assert!(
        leak.as_ref().is_err_and(|e| e
            .as_database_error()
            .and_then(|d| d.try_downcast_ref::<MySqlDatabaseError>())
            .is_some_and(|m| DENIED.contains(&m.number()))),
        "the grant on {granted}.* opened {sibling}: {leak:?}"
    );
    let listed: Vec<String> = sqlx::query_scalar("SHOW DATABASES")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    assert!(!listed.contains(&sibling), "{listed:?}");
    assert!(listed.contains(&granted), "{listed:?}");
    drop(conn);
    for db in [&granted, &sibling] {
        sqlx::raw_sql(&format!("DROP DATABASE `{db}`"))
            .execute(&fx.admin)
            .await
            .unwrap();
    }
    fx.cleanup().await;
}

/// Accounts are `'user'@'<account_host>'`, and removal finds them under that
/// host: with `account_host = "127.0.0.1"`, the account exists only for
/// 127.0.0.1, logs in from there, and is gone after the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn my_accounts_use_the_configured_host_and_are_removed_under_it() {
    let fx = MyFixture::new().await;
    let backends = DbBackends {
        mysql_account_host: "127.0.0.1".to_owned(),
        ..DbBackends::default()
    };
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(backends)
        .start()
        .await;
    let (key, run_id, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    let v = app.exchange_ok(&cap).await;
    let user = v["username"].as_str().unwrap().to_owned();
    let hosts: Vec<String> =
        sqlx::query_scalar("SELECT CAST(Host AS CHAR) FROM mysql.user WHERE User = ?")
            .bind(&user)
            .fetch_all(&fx.admin)
            .await
            .unwrap();
    assert_eq!(hosts, ["127.0.0.1"]);
    let mut conn = MySqlConnection::connect(v["dsn"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(select(&mut conn, &fx.table("granted")).await.unwrap(), 1);
    app.end_run(&key, &run_id).await;
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        1
    );
    assert!(!fx.user_exists(&user).await);
    assert!(
        select(&mut conn, &fx.table("granted")).await.is_err(),
        "session cut"
    );
    fx.cleanup().await;
}

/// `unsafe_defaults` finds a grant to PUBLIC (which every account, throw-away
/// ones included, gets) and a prepared XA transaction left without a session;
/// each printed fix closes it; strict mode refuses to issue over the first and
/// not over the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn my_unsafe_defaults_are_found_refused_in_strict_mode_and_fixed() {
    let fx = MyFixture::exclusive().await;
    let p = fx.prefix.clone();
    let backends = DbBackends {
        strict: true,
        ..DbBackends::default()
    };
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(backends)
        .start()
        .await;
    let (_key, _run, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    // A grant a failed run of this test left (its database is gone, the grant is not).
    let leftover: Vec<String> = sqlx::raw_sql("SHOW GRANTS FOR PUBLIC")
        .fetch_all(&fx.admin)
        .await
        .map(|rows| rows.iter().map(|r| r.get::<String, _>(0)).collect())
        .unwrap_or_default();
    for g in leftover.iter().filter(|g| g.contains("`tsr_t_")) {
        let revoke = g
            .replacen("GRANT ", "REVOKE ", 1)
            .replace(" TO PUBLIC", " FROM PUBLIC");
        sqlx::raw_sql(&revoke).execute(&fx.admin).await.unwrap();
    }
    let backend = app.state.backends.get("my-test").unwrap().clone();
    assert_eq!(
        backend.unsafe_defaults().await.unwrap(),
        vec![],
        "clean to begin with"
    );

    sqlx::raw_sql(&format!("GRANT SELECT ON `{p}_b`.* TO PUBLIC"))
        .execute(&fx.admin)
        .await
        .unwrap();
    let found = backend.unsafe_defaults().await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].id, "public_grants");
    assert_eq!(
        found[0].fix,
        format!("REVOKE SELECT ON `{p}_b`.* FROM PUBLIC;")
    );
    let before = fx.account_count().await;
    let resp = app.exchange(cap["token"].as_str().unwrap()).await;
    assert_error(
        resp,
        StatusCode::SERVICE_UNAVAILABLE,
        "backend_unsafe_defaults",
    )
    .await;
    assert_eq!(fx.account_count().await, before, "no account was created");
    sqlx::raw_sql(&found[0].fix)
        .execute(&fx.admin)
        .await
        .unwrap();

    // A prepared XA transaction outlives its session (and its account).
    let mut xa = MySqlConnection::connect(&mysql_url()).await.unwrap();
    sqlx::raw_sql(&format!(
        "XA START '{p}'; UPDATE test.{p}_granted SET v = 'x'; XA END '{p}'; XA PREPARE '{p}'"
    ))
    .execute(&mut xa)
    .await
    .unwrap();
    xa.close().await.unwrap();
    let found = backend.unsafe_defaults().await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].id, found[0].strict), ("xa_prepared", false));
    app.exchange_ok(&cap).await;
    sqlx::raw_sql(&found[0].fix)
        .execute(&fx.admin)
        .await
        .unwrap();
    assert_eq!(backend.unsafe_defaults().await.unwrap(), vec![]);
    fx.cleanup().await;
}
