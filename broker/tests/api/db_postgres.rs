//! Backend kind `postgres` against the real PostgreSQL server on this machine:
//! throw-away roles with exactly one privilege on one table, removed for real.
//!
//! Each test works in schemas of its own (`tsr_t_<random>`) in the `postgres`
//! database and drops them, and the group roles it caused, at the end.
//! Note: this machine's pg_hba.conf trusts loopback, so a login here proves the
//! role exists and may log in, not that the password matches; that the handed
//! out password matches the stored verifier is checked separately
//! (`pg_issued_user_gets_exactly_one_grant` recomputes it).

use crate::both_stores;
use crate::support::app::{assert_error, pg_url, Db, DbBackends, TestApp};
use crate::support::postgres::{PgFixture, SQLSTATE_PERMISSION_DENIED};
use crate::support::proxy::Proxy;
use base64::Engine;
use reqwest::StatusCode;
use serde_json::Value;
use sqlx::{Connection, PgConnection, Row};
use tessera_broker::backends::postgres::scram;

both_stores!(
    pg_run_end_removes_user_and_cuts_sessions,
    pg_revocation_survives_restart
);

/// A broker account with only what docs/backends/databases.md lists
/// (CREATEROLE, pg_signal_backend, grantable CONNECT, USAGE and SELECT on the
/// fixture's `granted` table), and the backends that use it.
async fn least_privileged_account(fx: &PgFixture) -> (String, DbBackends) {
    let s = &fx.schema;
    let account = format!("{s}_broker");
    sqlx::raw_sql(&format!(
        "CREATE ROLE {account} LOGIN CREATEROLE; GRANT pg_signal_backend TO {account};
         GRANT CONNECT ON DATABASE postgres TO {account} WITH GRANT OPTION;
         GRANT USAGE ON SCHEMA {s} TO {account} WITH GRANT OPTION;
         GRANT SELECT ON {s}.granted TO {account} WITH GRANT OPTION;"
    ))
    .execute(&fx.admin)
    .await
    .unwrap();
    let backends = DbBackends {
        pg: pg_url().replace("postgres://postgres@", &format!("postgres://{account}@")),
        ..DbBackends::default()
    };
    (account, backends)
}

/// Drops the account of [`least_privileged_account`] (once its broker is
/// gone) and the fixture. The groups' grants were made by the account: its
/// own privileges go first (cascading to what it granted).
async fn drop_account(fx: PgFixture, account: &str) {
    sqlx::raw_sql(&format!("DROP OWNED BY {account}"))
        .execute(&fx.admin)
        .await
        .unwrap();
    let admin = fx.admin.clone();
    fx.cleanup().await;
    sqlx::raw_sql(&format!("DROP ROLE {account}"))
        .execute(&admin)
        .await
        .unwrap();
}

/// Exchanges a capability; asserts success and returns the response.
fn denied(e: sqlx::Error) -> bool {
    matches!(&e, sqlx::Error::Database(d) if d.code().as_deref() == Some(SQLSTATE_PERMISSION_DENIED))
}

/// A select the connection must be allowed / refused.
async fn select(conn: &mut PgConnection, table: &str) -> Result<i64, sqlx::Error> {
    sqlx::query(&format!("SELECT count(*) AS n FROM {table}"))
        .fetch_one(conn)
        .await
        .map(|r| r.get::<i64, _>("n"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_issued_user_gets_exactly_one_grant() {
    let fx = PgFixture::new().await;
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(DbBackends::default())
        .start()
        .await;
    let (_key, run_id, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    let v = app.exchange_ok(&cap).await;
    assert_eq!(v["kind"], "postgres");
    let f = &v;
    let user = f["username"].as_str().unwrap();
    let password = f["password"].as_str().unwrap();
    assert!(user.starts_with("tsr_") && user.contains(&run_id.replace('-', "")));
    assert!(password.starts_with("tsr_pw_"));
    assert_eq!(f["host"], "127.0.0.1");
    assert_eq!(f["port"], 5432);
    assert_eq!(f["database"], "postgres");
    assert_eq!(
        f["dsn"],
        format!("postgres://{user}:{password}@127.0.0.1:5432/postgres")
    );
    assert_eq!(f["valid_until"], v["expires_at"]);

    // The role as PostgreSQL stores it: SCRAM verifier of exactly this password,
    // VALID UNTIL the capability's expiry, the connection limit, one membership.
    let row = sqlx::query(
        "SELECT rolpassword, extract(epoch FROM rolvaliduntil)::bigint AS until, rolconnlimit, \
         rolcanlogin, rolinherit, rolcreaterole, rolcreatedb, rolsuper \
         FROM pg_authid WHERE rolname = $1",
    )
    .bind(user)
    .fetch_one(&fx.admin)
    .await
    .unwrap();
    let stored: String = row.get("rolpassword");
    let salt_b64 = stored.split(['$', ':']).nth(2).unwrap();
    let salt = base64::engine::general_purpose::STANDARD
        .decode(salt_b64)
        .unwrap();
    assert_eq!(stored, scram::verifier_with(password, &salt, 4096));
    let exp = tessera_broker::clock::parse_rfc3339_ms(v["expires_at"].as_str().unwrap()).unwrap();
    assert_eq!(row.get::<i64, _>("until"), exp / 1000);
    assert_eq!(row.get::<i32, _>("rolconnlimit"), 2);
    assert!(row.get::<bool, _>("rolcanlogin") && row.get::<bool, _>("rolinherit"));
    assert!(!row.get::<bool, _>("rolcreaterole") && !row.get::<bool, _>("rolcreatedb"));
    assert!(!row.get::<bool, _>("rolsuper"));
    let groups: Vec<String> = sqlx::query_scalar(
        "SELECT g.rolname::text FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid \
         JOIN pg_roles u ON u.oid = m.member WHERE u.rolname = $1",
    )
    .bind(user)
    .fetch_all(&fx.admin)
    .await
    .unwrap();
    // PostgreSQL 15 (this machine's server): the user holds its grants itself
    // and is a member of nothing it could act as (db_contained covers 16+).
    assert_eq!(groups, Vec::<String>::new());

    // What the user can and cannot do.
    let s = &fx.schema;
    let mut conn = PgConnection::connect(f["dsn"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(select(&mut conn, &format!("{s}.granted")).await.unwrap(), 1);
    assert!(denied(
        select(&mut conn, &format!("{s}.other")).await.unwrap_err()
    ));
    assert!(denied(
        select(&mut conn, &format!("{s}_b.granted"))
            .await
            .unwrap_err()
    ));
    for write in [
        format!("INSERT INTO {s}.granted VALUES (9, 'x')"),
        format!("UPDATE {s}.granted SET v = 'y'"),
        format!("DELETE FROM {s}.granted"),
        format!("CREATE TABLE {s}.mine (id int)"),
    ] {
        let e = sqlx::raw_sql(&write).execute(&mut conn).await.unwrap_err();
        assert!(denied(e), "{write}");
    }
    conn.close().await.unwrap();

    // A second exchange for the same resource is a second user with a grant
    // of its own: one ACL entry per live user.
    let v2 = app.exchange_ok(&cap).await;
    assert_ne!(v2["username"], f["username"]);
    let acl: Vec<String> =
        sqlx::query_scalar("SELECT unnest(relacl)::text FROM pg_class WHERE oid = $1::regclass")
            .bind(format!("{s}.granted"))
            .fetch_all(&fx.admin)
            .await
            .unwrap();
    let entries: Vec<&String> = acl.iter().filter(|a| a.starts_with("tsr_")).collect();
    assert_eq!(entries.len(), 2, "{acl:?}");
    assert!(
        entries.iter().all(|a| a.contains("=r/")),
        "SELECT only: {acl:?}"
    );

    // Another action is another grant, and works for that action only.
    let ins = app
        .capability_ok(&token, "insert", &fx.resource("granted"))
        .await;
    let v3 = app.exchange_ok(&ins).await;
    let mut conn = PgConnection::connect(v3["dsn"].as_str().unwrap())
        .await
        .unwrap();
    sqlx::raw_sql(&format!("INSERT INTO {s}.granted VALUES (5, 'z')"))
        .execute(&mut conn)
        .await
        .unwrap();
    assert!(denied(
        select(&mut conn, &format!("{s}.granted"))
            .await
            .unwrap_err()
    ));
    conn.close().await.unwrap();

    app.end_run(&_key, &run_id).await;
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        3
    );
    // No password, verifier or privileged URL in the audit log.
    let audit = serde_json::to_string(&app.audit("limit=500").await).unwrap();
    assert!(audit.contains(user), "the user name is audited");
    for secret in [password, "tsr_pw_", "SCRAM-SHA-256", "postgres://"] {
        assert!(!audit.contains(secret), "{secret} in the audit log");
    }
    fx.cleanup().await;
}

async fn pg_run_end_removes_user_and_cuts_sessions(_plain: TestApp) {
    let fx = PgFixture::new().await;
    let app = TestApp::builder(store_of(&_plain))
        .db_backends(DbBackends::default())
        .start()
        .await;
    let (key, run_id, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    let v = app.exchange_ok(&cap).await;
    let user = v["username"].as_str().unwrap().to_owned();
    let dsn = v["dsn"].as_str().unwrap().to_owned();
    let mut open = PgConnection::connect(&dsn).await.unwrap();
    select(&mut open, &format!("{}.granted", fx.schema))
        .await
        .unwrap();

    let resp = app.end_run(&key, &run_id).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        1
    );

    assert!(!fx.role_exists(&user).await, "user dropped");
    assert!(
        select(&mut open, &format!("{}.granted", fx.schema))
            .await
            .is_err(),
        "the session opened before was terminated"
    );
    assert!(PgConnection::connect(&dsn).await.is_err(), "login fails");
    let audit = app.audit("event=lease.revoked").await;
    assert_eq!(audit.len(), 1);
    assert!(audit[0]["detail"].as_str().unwrap().contains(&user));
    // Settled: nothing pending, a second pass does nothing.
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        0
    );
    fx.cleanup().await;
}

/// The store of a `both_stores!` app (whose own backends are not used).
fn store_of(app: &TestApp) -> Db {
    if app.state.store.dialect() == tessera_broker::store::Dialect::Postgres {
        Db::Postgres
    } else {
        Db::Sqlite
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_capability_revoke_and_expiry_remove_users() {
    let fx = PgFixture::new().await;
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(DbBackends::default())
        .start()
        .await;
    let (_key, _run, token) = app.run_for("alice").await;

    // Capability revoke.
    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    let v = app.exchange_ok(&cap).await;
    let revoked_user = v["username"].as_str().unwrap().to_owned();
    let mut open = PgConnection::connect(v["dsn"].as_str().unwrap())
        .await
        .unwrap();
    let id = cap["capability_id"].as_str().unwrap();
    let resp = app
        .post(
            &format!("/v1/capabilities/{id}/revoke"),
            Some(&token),
            Value::Null,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        1
    );
    assert!(!fx.role_exists(&revoked_user).await);
    assert!(select(&mut open, "pg_class").await.is_err(), "session cut");

    // Expiry: nobody ends the run; the reaper does the work.
    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    let v = app.exchange_ok(&cap).await;
    let expiring = v["username"].as_str().unwrap().to_owned();
    let dsn = v["dsn"].as_str().unwrap().to_owned();
    let mut open = PgConnection::connect(&dsn).await.unwrap();
    tessera_broker::jobs::expiry::sweep(&app.state)
        .await
        .unwrap();
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        0
    );
    assert!(fx.role_exists(&expiring).await, "not expired yet");
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
    assert!(!fx.role_exists(&expiring).await);
    assert!(select(&mut open, "pg_class").await.is_err(), "session cut");
    assert!(PgConnection::connect(&dsn).await.is_err());
    fx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_fifty_parallel_exchanges_get_distinct_working_users() {
    let fx = PgFixture::new().await;
    let app = TestApp::builder(Db::Postgres)
        .db_backends(DbBackends::default())
        .start()
        .await;
    let (key, run_id, token) = app.run_for("dora").await;
    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    assert_eq!(cap["uses"], 50);
    let capability = cap["token"].as_str().unwrap().to_owned();
    let calls = (0..50).map(|_| {
        let app = &app;
        let capability = capability.clone();
        async move { app.exchange(&capability).await }
    });
    let responses = futures_util::future::join_all(calls).await;
    let mut dsns = std::collections::BTreeSet::new();
    for resp in responses {
        assert_eq!(resp.status(), StatusCode::OK);
        let v: Value = resp.json().await.unwrap();
        dsns.insert(v["dsn"].as_str().unwrap().to_owned());
    }
    assert_eq!(dsns.len(), 50, "distinct users");
    assert_error(
        app.exchange(&capability).await,
        StatusCode::FORBIDDEN,
        "uses_exhausted",
    )
    .await;
    for dsn in &dsns {
        let mut conn = PgConnection::connect(dsn).await.unwrap();
        assert_eq!(
            select(&mut conn, &format!("{}.granted", fx.schema))
                .await
                .unwrap(),
            1
        );
        conn.close().await.unwrap();
    }
    app.end_run(&key, &run_id).await;
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        50
    );
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_roles WHERE rolname LIKE $1")
        .bind(format!("tsr_{}_%", run_id.replace('-', "")))
        .fetch_one(&fx.admin)
        .await
        .unwrap();
    assert_eq!(left, 0);
    fx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_hostile_resource_names_are_refused_before_any_sql() {
    let fx = PgFixture::exclusive().await;
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(DbBackends::default())
        .start()
        .await;
    let (_key, _run, token) = app.run_for("alice").await;
    let roles_before = fx.role_count().await;
    let s = &fx.schema;
    let long = "t".repeat(300);
    let hostile = [
        format!("pg-test:postgres.{s}.granted'; DROP ROLE postgres; --"),
        format!("pg-test:postgres.{s}.\"granted\""),
        format!("pg-test:postgres.{s}.granted;"),
        format!("pg-test:postgres.{s}.granted--"),
        format!("pg-test:postgres.{s}.gränted"),
        format!("pg-test:postgres.{s}.{long}"),
        format!("pg-test:postgres.{s}.granted.extra"),
        format!("pg-test:postgres.{s}.gran*"),
        "pg-test:postgres.*.granted".to_owned(),
        format!("pg-test:postgres.{s}"),
        format!("pg-test:postgres.{s}.gran ted"),
        format!("pg-test:postgres.{s}.granted\u{0}"),
        format!("pg-test:other_db.{s}.granted"),
        // System catalogs are never a resource (issue 13, item 9).
        "pg-test:postgres.pg_catalog.pg_authid".to_owned(),
        "pg-test:postgres.pg_catalog.*".to_owned(),
        "pg-test:postgres.information_schema.tables".to_owned(),
        "pg-test:postgres.INFORMATION_SCHEMA.tables".to_owned(),
        "pg-test:postgres.pg_toast.pg_toast_2619".to_owned(),
        "pg-test:postgres.pg_temp_3.t".to_owned(),
        "pg-test:postgres.Pg_Catalog.pg_shadow".to_owned(),
    ];
    for res in &hostile {
        let v = assert_error(
            app.capability(&token, "select", res).await,
            StatusCode::BAD_REQUEST,
            "invalid_resource",
        )
        .await;
        assert!(!v.to_string().contains("DROP ROLE"), "{v}");
    }
    assert_error(
        app.capability(&token, "usage", &fx.resource("granted"))
            .await,
        StatusCode::BAD_REQUEST,
        "invalid_action",
    )
    .await;
    assert_eq!(app.count("capabilities").await, 0);
    assert_eq!(app.count("leases").await, 0);
    assert_eq!(fx.role_count().await, roles_before, "no role was created");
    fx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_downstream_down_is_503_and_revocation_completes_when_back() {
    let fx = PgFixture::new().await;
    let mut proxy = Proxy::start("127.0.0.1:5432").await;
    let backends = DbBackends {
        pg: pg_url().replace("127.0.0.1:5432", &format!("127.0.0.1:{}", proxy.port)),
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
    let first = app.exchange_ok(&cap).await;
    let user = first["username"].as_str().unwrap().to_owned();

    proxy.cut().await;
    let v = assert_error(
        app.exchange(cap["token"].as_str().unwrap()).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "backend_unavailable",
    )
    .await;
    assert!(!v.to_string().contains("postgres://"), "{v}");
    let live: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM leases WHERE revoked_at IS NULL")
        .fetch_one(app.state.store.pool())
        .await
        .unwrap();
    assert_eq!(
        live, 1,
        "only the first lease is live; the failed one is not"
    );

    app.end_run(&key, &run_id).await;
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        0
    );
    let stuck = tessera_broker::store::revocations::pending(&app.state.store, false, 10)
        .await
        .unwrap();
    assert_eq!(stuck.len(), 2);
    assert!(stuck.iter().all(|r| r.last_error.is_some()));
    assert!(
        stuck
            .iter()
            .all(|r| !r.last_error.as_deref().unwrap().contains("postgres://")),
        "{stuck:?}"
    );
    assert!(
        fx.role_exists(&user).await,
        "still there while the server is away"
    );
    let failures = app.audit("event=lease.revocation_failed").await;
    assert_eq!(failures.len(), 2);

    // Still failing after three attempts: stuck, and listed as such.
    for _ in 0..2 {
        app.state.clock.advance(std::time::Duration::from_secs(60));
        assert_eq!(
            tessera_broker::jobs::revocation::run_once(&app.state)
                .await
                .unwrap(),
            0
        );
    }
    let listed: Value = app
        .get("/v1/admin/leases?stuck=true", Some(&app.admin_token))
        .await
        .json()
        .await
        .unwrap();
    let listed = listed["revocations"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed
        .iter()
        .all(|r| r["stuck"] == true && r["attempts"] == 3));
    assert!(listed.iter().any(|r| r["downstream_ref"] == user.as_str()));

    proxy.restore().await;
    app.state.clock.advance(std::time::Duration::from_secs(60));
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        2
    );
    assert!(
        !fx.role_exists(&user).await,
        "removed once the server is back"
    );
    let listed: Value = app
        .get("/v1/admin/leases", Some(&app.admin_token))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["revocations"], serde_json::json!([]));
    fx.cleanup().await;
}

async fn pg_revocation_survives_restart(plain: TestApp) {
    let fx = PgFixture::new().await;
    let app = TestApp::builder(store_of(&plain))
        .db_backends(DbBackends::default())
        .start()
        .await;
    drop(plain);
    let (key, run_id, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    let v = app.exchange_ok(&cap).await;
    let user = v["username"].as_str().unwrap().to_owned();
    app.end_run(&key, &run_id).await;
    // The broker stops before its worker ran: the user is still there...
    let app = app.restart().await;
    assert!(fx.role_exists(&user).await);
    // ...and the restarted broker removes it from the durable outbox.
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        1
    );
    assert!(!fx.role_exists(&user).await);
    fx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_missing_table_is_422_and_leaves_nothing() {
    let fx = PgFixture::exclusive().await;
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(DbBackends::default())
        .start()
        .await;
    let (_key, _run, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "select", &fx.resource("no_such_table"))
        .await;
    let before = fx.login_role_count().await;
    assert_error(
        app.exchange(cap["token"].as_str().unwrap()).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "backend_rejected",
    )
    .await;
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        1
    );
    let reserved: String = sqlx::query_scalar("SELECT downstream_ref FROM leases")
        .fetch_one(app.state.store.pool())
        .await
        .unwrap();
    assert!(!fx.role_exists(&reserved).await, "no user was left behind");
    // At most NOLOGIN groups were created before the GRANT failed; no login role.
    assert_eq!(fx.login_role_count().await, before);
    fx.cleanup().await;
}

/// The target of issue 4: 10,000 live users on one table. Through the real
/// exchange path (8 concurrent clients), then a sample logs in and reads, then
/// one run end removes them all.
/// `database.schema.*` (every table of a schema) needs a permit that names the
/// wildcard itself: a permit for "any one table" does not grant all at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_all_tables_only_by_an_explicit_permit() {
    let fx = PgFixture::new().await;
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(DbBackends::default())
        .start()
        .await;
    let all = fx.resource("*");

    // alice's permit matches any postgres path ("db-analysts"), so it matches
    // the literal `*` too, but it does not name it: refused.
    let (_k, _r, alice) = app.run_for("alice").await;
    assert!(app
        .capability(&alice, "select", &fx.resource("other"))
        .await
        .status()
        .is_success());
    assert_error(
        app.capability(&alice, "select", &all).await,
        StatusCode::FORBIDDEN,
        "wildcard_not_covered",
    )
    .await;

    // erin's permit says `like "postgres.tsr_t_*.\*"`: the wildcard, explicitly.
    let (key, run_id, erin) = app.run_for("erin").await;
    assert_error(
        app.capability(&erin, "select", &fx.resource("granted"))
            .await,
        StatusCode::FORBIDDEN,
        "capability_denied",
    )
    .await;
    let cap = app.capability_ok(&erin, "select", &all).await;
    let v = app.exchange_ok(&cap).await;
    let s = &fx.schema;
    // A table created after the group was first set up is covered by the next exchange.
    sqlx::raw_sql(&format!("CREATE TABLE {s}.later (id int)"))
        .execute(&fx.admin)
        .await
        .unwrap();
    let later = app.exchange_ok(&cap).await;
    for (dsn, tables) in [
        (v["dsn"].as_str().unwrap(), vec!["granted", "other"]),
        (
            later["dsn"].as_str().unwrap(),
            vec!["granted", "other", "later"],
        ),
    ] {
        let mut conn = PgConnection::connect(dsn).await.unwrap();
        for t in tables {
            select(&mut conn, &format!("{s}.{t}")).await.unwrap();
        }
        assert!(denied(
            select(&mut conn, &format!("{s}_b.granted"))
                .await
                .unwrap_err()
        ));
        assert!(denied(
            sqlx::raw_sql(&format!("DELETE FROM {s}.granted"))
                .execute(&mut conn)
                .await
                .unwrap_err()
        ));
        conn.close().await.unwrap();
    }
    app.end_run(&key, &run_id).await;
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        2
    );
    fx.cleanup().await;
}

/// The least privileges docs/backends/databases.md asks for are enough: a
/// broker account with CREATEROLE, pg_signal_backend and grant options on the
/// table — not a superuser — issues, and removes on run end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_least_privileged_broker_account_suffices() {
    let fx = PgFixture::new().await;
    let s = &fx.schema;
    let (account, backends) = least_privileged_account(&fx).await;
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
    let mut open = PgConnection::connect(v["dsn"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(select(&mut open, &format!("{s}.granted")).await.unwrap(), 1);
    // Not granted to the broker, so not grantable by it: refused, nothing left.
    let other = app
        .capability_ok(&token, "select", &fx.resource("other"))
        .await;
    let resp = app.exchange(other["token"].as_str().unwrap()).await;
    assert!(resp.status().is_server_error() || resp.status().is_client_error());
    app.end_run(&key, &run_id).await;
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        2
    );
    assert!(!fx.role_exists(&user).await);
    assert!(select(&mut open, "pg_class").await.is_err(), "session cut");
    drop(app);
    drop_account(fx, &account).await;
}

/// An `insert` capability on a table with a `serial` or identity column can
/// use the column's default (issue 13, item 10): USAGE on the table's own
/// sequences comes with the grant, and on no other sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_insert_covers_the_tables_own_sequences() {
    let fx = PgFixture::new().await;
    let s = &fx.schema;
    sqlx::raw_sql(&format!(
        "CREATE TABLE {s}.serials (id serial PRIMARY KEY, v text);
         CREATE TABLE {s}.idents (id int GENERATED ALWAYS AS IDENTITY, v text);
         CREATE SEQUENCE {s}.unrelated;"
    ))
    .execute(&fx.admin)
    .await
    .unwrap();
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(DbBackends::default())
        .start()
        .await;
    let (_key, _run, token) = app.run_for("alice").await;
    for table in ["serials", "idents"] {
        let cap = app
            .capability_ok(&token, "insert", &fx.resource(table))
            .await;
        let v = app.exchange_ok(&cap).await;
        let mut conn = PgConnection::connect(v["dsn"].as_str().unwrap())
            .await
            .unwrap();
        sqlx::query(&format!("INSERT INTO {s}.{table} (v) VALUES ('x')"))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("insert into {table}: {e}"));
        let other = sqlx::query(&format!("SELECT nextval('{s}.unrelated')"))
            .execute(&mut conn)
            .await;
        assert!(
            other.is_err_and(denied),
            "{table}: another sequence is usable"
        );
    }
    let count: i64 = sqlx::query_scalar(&format!(
        "SELECT (SELECT count(*) FROM {s}.serials) + (SELECT count(*) FROM {s}.idents)"
    ))
    .fetch_one(&fx.admin)
    .await
    .unwrap();
    assert_eq!(count, 2);
    // Removal revokes the sequence grants it made, with only the grant option.
    app.end_run(&_key, &_run).await;
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        2
    );
    fx.cleanup().await;
}

/// A throw-away user that makes itself hard to remove (a large object, a
/// default-privileges entry) is removed anyway, by a CREATEROLE-only broker
/// account, and the clean users revoked with it go in the same pass
/// (issue 13, items 2 and 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_users_that_own_objects_are_removed_with_their_batch() {
    let fx = PgFixture::new().await;
    let (account, backends) = least_privileged_account(&fx).await;
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(backends)
        .start()
        .await;
    let (key, run_id, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    let mut users = vec![];
    let mut sessions = vec![];
    for _ in 0..5 {
        let v = app.exchange_ok(&cap).await;
        users.push(v["username"].as_str().unwrap().to_owned());
        sessions.push(
            PgConnection::connect(v["dsn"].as_str().unwrap())
                .await
                .unwrap(),
        );
    }
    // Two users leave objects behind; three stay clean.
    sqlx::query("SELECT lo_create(0)")
        .execute(&mut sessions[1])
        .await
        .unwrap();
    sqlx::raw_sql("ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO PUBLIC")
        .execute(&mut sessions[3])
        .await
        .unwrap();
    app.end_run(&key, &run_id).await;
    let started = std::time::Instant::now();
    let done = tessera_broker::jobs::revocation::run_once(&app.state)
        .await
        .unwrap();
    eprintln!(
        "5 users (2 owning objects) removed in one pass: {:?}",
        started.elapsed()
    );
    assert_eq!(done, 5, "every lease of the batch settled in one pass");
    for u in &users {
        assert!(!fx.role_exists(u).await, "{u} still exists");
    }
    let left: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_largeobject_metadata m JOIN pg_roles r ON r.oid = m.lomowner \
         WHERE r.rolname = ANY($1)",
    )
    .bind(&users)
    .fetch_one(&fx.admin)
    .await
    .unwrap();
    assert_eq!(left, 0);
    drop(sessions);
    drop(app);
    drop_account(fx, &account).await;
}

/// `unsafe_defaults` names what this server leaves open to every role, and the
/// SQL it prints closes exactly that: applied in a transaction that is rolled
/// back (the server is shared by the suite), the same check finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_unsafe_defaults_are_found_and_their_fix_closes_them() {
    use tessera_broker::backends::postgres::check::unsafe_defaults;
    let mut conn = PgConnection::connect(&pg_url()).await.unwrap();
    let found = unsafe_defaults(&mut conn).await.unwrap();
    let ids: Vec<&str> = found.iter().map(|f| f.id).collect();
    // PostgreSQL's defaults on this machine (as shipped by Debian).
    assert!(ids.contains(&"connect_public"), "{found:?}");
    assert!(ids.contains(&"large_objects_public"), "{found:?}");
    let lo = found
        .iter()
        .find(|f| f.id == "large_objects_public")
        .unwrap();
    assert_eq!(
        lo.fix,
        "REVOKE EXECUTE ON FUNCTION lo_create(oid), lo_creat(integer), lo_from_bytea(oid, bytea) FROM PUBLIC;"
    );
    // Other databases only: the broker's own is where its users are meant to be.
    let connect = found.iter().find(|f| f.id == "connect_public").unwrap();
    assert!(
        !connect.fix.contains("\"postgres\"") && connect.fix.contains("\"template1\""),
        "{}",
        connect.fix
    );
    assert!(found.iter().all(|f| f.strict), "{found:?}");
    sqlx::raw_sql("BEGIN").execute(&mut conn).await.unwrap();
    for f in &found {
        sqlx::raw_sql(&f.fix).execute(&mut conn).await.unwrap();
    }
    let after = unsafe_defaults(&mut conn).await.unwrap();
    sqlx::raw_sql("ROLLBACK").execute(&mut conn).await.unwrap();
    assert_eq!(after, vec![], "not closed by its own fix");
    // Rolled back: the shared server is as it was.
    assert_eq!(unsafe_defaults(&mut conn).await.unwrap(), found);
}
