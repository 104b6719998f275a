//! Throw-away PostgreSQL users tried as an attacker holding one would, on
//! private clusters of PostgreSQL 15 and 17 (`pg_cluster`): every login is a
//! SCRAM password login over TCP, the broker runs on the least-privileged
//! account of docs/backends/databases.md, and strict mode is on unless a test
//! says otherwise.
//!
//! Every cluster has CONNECT revoked from PUBLIC on `postgres` and `template1`
//! and the large-object functions revoked from PUBLIC in `template1` (so in
//! every database created here): the fixes `tessera backends check` prints.
//! Each test works in a database of its own. Tests that open a database to
//! PUBLIC (an unsafe default, on purpose) hold [`OPEN`] exclusively, because
//! strict mode checks the whole cluster and would refuse the others meanwhile.

use crate::pg_cluster::{cluster, Cluster};
use crate::support::app::{assert_error, Db, DbBackends, TestApp};
use reqwest::StatusCode;
use serde_json::Value;
use sqlx::postgres::PgPool;
use sqlx::{Connection, PgConnection};

static OPEN: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());
static HARDENED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

const PERMISSION_DENIED: &str = "42501";
/// Hardened cluster-wide once per cluster (both are in the same binary).
static HARDENED_17: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

struct Fx {
    cluster: &'static Cluster,
    /// Superuser on this test's database.
    admin: PgPool,
    /// Superuser on `postgres`.
    root: PgPool,
    db: String,
    broker: String,
    broker_password: String,
}

async fn harden(c: &'static Cluster) {
    let cell = if c.version == 15 {
        &HARDENED
    } else {
        &HARDENED_17
    };
    cell.get_or_init(|| async {
        let root = c.superuser("postgres").await;
        sqlx::raw_sql("REVOKE CONNECT ON DATABASE postgres, template1 FROM PUBLIC")
            .execute(&root)
            .await
            .unwrap();
        let t1 = c.superuser("template1").await;
        sqlx::raw_sql(
            "REVOKE EXECUTE ON FUNCTION lo_create(oid), lo_creat(integer), \
             lo_from_bytea(oid, bytea) FROM PUBLIC; REVOKE CREATE ON SCHEMA public FROM PUBLIC",
        )
        .execute(&t1)
        .await
        .unwrap();
        t1.close().await;
    })
    .await;
}

fn rand() -> String {
    tessera_broker::ids::hex(&tessera_broker::ids::random_bytes::<5>())
}

impl Fx {
    /// A database `tsr_c_…` (no PUBLIC CONNECT) with schema `app`: tables
    /// `granted` (a serial key) and `secrets`; and a least-privileged broker
    /// account that may grant SELECT and INSERT on `granted` only.
    async fn new(version: u32) -> Fx {
        let c = cluster(version).await;
        harden(c).await;
        let root = c.superuser("postgres").await;
        let db = format!("tsr_c_{}", rand());
        let broker = format!("{db}_broker");
        let broker_password = rand();
        sqlx::raw_sql(&format!("CREATE DATABASE {db}"))
            .execute(&root)
            .await
            .unwrap();
        sqlx::raw_sql(&format!(
            "REVOKE CONNECT ON DATABASE {db} FROM PUBLIC;
             CREATE ROLE {broker} LOGIN CREATEROLE PASSWORD '{broker_password}';
             GRANT pg_signal_backend TO {broker};
             GRANT CONNECT ON DATABASE {db} TO {broker} WITH GRANT OPTION;"
        ))
        .execute(&root)
        .await
        .unwrap();
        let admin = c.superuser(&db).await;
        sqlx::raw_sql(&format!(
            "CREATE SCHEMA app;
             CREATE TABLE app.granted (id serial PRIMARY KEY, v text); INSERT INTO app.granted (v) VALUES ('a');
             CREATE TABLE app.secrets (s text); INSERT INTO app.secrets VALUES ('s3cret');
             GRANT USAGE ON SCHEMA app TO {broker} WITH GRANT OPTION;
             GRANT SELECT, INSERT ON app.granted TO {broker} WITH GRANT OPTION;
             GRANT USAGE ON SEQUENCE app.granted_id_seq TO {broker} WITH GRANT OPTION;"
        ))
        .execute(&admin)
        .await
        .unwrap();
        Fx {
            cluster: c,
            admin,
            root,
            db,
            broker,
            broker_password,
        }
    }

    fn backends(&self, strict: bool) -> DbBackends {
        DbBackends {
            pg: self
                .cluster
                .url(&self.broker, &self.broker_password, &self.db),
            strict,
            ..DbBackends::default()
        }
    }

    fn resource(&self, table: &str) -> String {
        format!("pg-test:{}.app.{table}", self.db)
    }

    async fn role_exists(&self, name: &str) -> bool {
        sqlx::query("SELECT 1 FROM pg_roles WHERE rolname = $1")
            .bind(name)
            .fetch_optional(&self.root)
            .await
            .unwrap()
            .is_some()
    }

    async fn login_roles(&self) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM pg_roles WHERE rolcanlogin AND rolname LIKE 'tsr\\_%'",
        )
        .fetch_one(&self.root)
        .await
        .unwrap()
    }

    /// Another database, optionally open to PUBLIC with the large-object
    /// functions executable there (two unsafe defaults, on purpose).
    async fn other_database(&self, open: bool) -> String {
        let name = format!("{}_x{}", self.db, rand());
        sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
            .execute(&self.root)
            .await
            .unwrap();
        if open {
            let pool = self.cluster.superuser(&name).await;
            sqlx::raw_sql("GRANT EXECUTE ON FUNCTION lo_create(oid) TO PUBLIC")
                .execute(&pool)
                .await
                .unwrap();
            pool.close().await;
        } else {
            sqlx::raw_sql(&format!("REVOKE CONNECT ON DATABASE {name} FROM PUBLIC"))
                .execute(&self.root)
                .await
                .unwrap();
        }
        name
    }

    async fn drop_database(&self, name: &str) {
        sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&self.root)
            .await
            .unwrap();
    }

    async fn cleanup(self) {
        self.admin.close().await;
        let db = self.db.clone();
        self.drop_database(&db).await;
        // Groups (16+) this broker created hold grants on the dropped database
        // only; the account and its groups go.
        let groups: Vec<String> = sqlx::query_scalar(
            "SELECT r.rolname::text FROM pg_roles r JOIN pg_auth_members m ON m.roleid = r.oid \
             JOIN pg_roles b ON b.oid = m.member WHERE b.rolname = $1 AND r.rolname LIKE 'tsr\\_%'",
        )
        .bind(&self.broker)
        .fetch_all(&self.root)
        .await
        .unwrap();
        for g in groups.iter().filter(|g| !g.starts_with(&self.db)) {
            let _ = sqlx::raw_sql(&format!("DROP OWNED BY \"{g}\"; DROP ROLE \"{g}\""))
                .execute(&self.root)
                .await;
        }
        sqlx::raw_sql(&format!(
            "DROP OWNED BY {b}; DROP ROLE {b}",
            b = self.broker
        ))
        .execute(&self.root)
        .await
        .unwrap();
    }
}

fn denied(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.code().as_deref() == Some(PERMISSION_DENIED))
}

/// `dsn` with another database.
fn dsn_for(dsn: &str, database: &str) -> String {
    let (head, _) = dsn.rsplit_once('/').unwrap();
    format!("{head}/{database}")
}

/// Whether an ACCESS EXCLUSIVE lock on `app.granted` is had within `timeout`.
async fn lock_exclusive(admin: &PgPool, timeout: &str) -> bool {
    let mut conn = admin.acquire().await.unwrap();
    let got = sqlx::raw_sql(&format!(
        "BEGIN; SET LOCAL lock_timeout = '{timeout}'; LOCK TABLE app.granted IN ACCESS EXCLUSIVE MODE"
    ))
    .execute(&mut *conn)
    .await
    .is_ok();
    sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await.unwrap();
    got
}

async fn end_run(app: &TestApp, key: &str, run_id: &str) {
    let resp = app.end_run(key, run_id).await;
    assert_eq!(resp.status(), StatusCode::OK);
}

async fn exactly_the_grant_and_nothing_that_outlives_it(version: u32) {
    let _shared = OPEN.read().await;
    let fx = Fx::new(version).await;
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(fx.backends(true))
        .start()
        .await;
    let (key, run_id, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    let v = app.exchange_ok(&cap).await;
    let user = v["username"].as_str().unwrap().to_owned();
    let dsn = v["dsn"].as_str().unwrap().to_owned();

    // The password is checked: a wrong one is refused.
    let wrong = dsn.replace(v["password"].as_str().unwrap(), "tsr_pw_wrong");
    assert!(PgConnection::connect(&wrong).await.is_err());
    let mut conn = PgConnection::connect(&dsn).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM app.granted")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(n, 1);

    // Nothing beyond the grant.
    for sql in [
        "SELECT * FROM app.secrets",
        "INSERT INTO app.granted (v) VALUES ('x')",
        "SELECT lo_create(0)",
        "SELECT lo_from_bytea(0, 'data')",
        "CREATE TABLE public.mine (id int)",
        "CREATE TABLE app.mine (id int)",
        "CREATE SCHEMA mine",
    ] {
        let e = sqlx::raw_sql(sql).execute(&mut conn).await.unwrap_err();
        assert!(denied(&e), "{sql}: {e}");
    }
    // No role to act as: on 17 the group's membership has SET FALSE, on 15
    // the user is a member of nothing.
    let memberships: Vec<String> = sqlx::query_scalar(
        "SELECT r.rolname::text FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid \
         JOIN pg_roles u ON u.oid = m.member WHERE u.rolname = $1",
    )
    .bind(&user)
    .fetch_all(&fx.root)
    .await
    .unwrap();
    if version >= 16 {
        assert_eq!(memberships.len(), 1, "{memberships:?}");
        let e = sqlx::raw_sql(&format!("SET ROLE \"{}\"", memberships[0]))
            .execute(&mut conn)
            .await
            .unwrap_err();
        assert!(denied(&e), "SET ROLE to the group: {e}");
    } else {
        assert_eq!(memberships, Vec::<String>::new());
    }
    for role in ["tsr_admin", &fx.broker] {
        let e = sqlx::raw_sql(&format!("SET ROLE \"{role}\""))
            .execute(&mut conn)
            .await
            .unwrap_err();
        assert!(denied(&e), "SET ROLE {role}: {e}");
    }
    // No login to another database.
    for db in ["postgres", "template1"] {
        assert!(
            PgConnection::connect(&dsn_for(&dsn, db)).await.is_err(),
            "logged in to {db}"
        );
    }

    // What it may do to itself, and what must not outlive it: its own
    // settings, default privileges, and a prepared transaction holding a lock.
    sqlx::raw_sql(
        "ALTER ROLE CURRENT_USER SET application_name = 'left behind'; \
         ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO PUBLIC",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::raw_sql(
        "BEGIN; LOCK TABLE app.granted IN ACCESS SHARE MODE; PREPARE TRANSACTION 'tsr-left-behind'",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    assert!(
        !lock_exclusive(&fx.admin, "100ms").await,
        "the prepared transaction holds its lock"
    );

    // An insert capability can use the serial default.
    let ins = app
        .capability_ok(&token, "insert", &fx.resource("granted"))
        .await;
    let vi = app.exchange_ok(&ins).await;
    let mut writer = PgConnection::connect(vi["dsn"].as_str().unwrap())
        .await
        .unwrap();
    sqlx::raw_sql("INSERT INTO app.granted (v) VALUES ('by insert')")
        .execute(&mut writer)
        .await
        .unwrap();
    let users = [user.clone(), vi["username"].as_str().unwrap().to_owned()];

    end_run(&app, &key, &run_id).await;
    let done = tessera_broker::jobs::revocation::run_once(&app.state)
        .await
        .unwrap();
    assert_eq!(
        done,
        2,
        "{:?}",
        app.audit("event=lease.revocation_failed").await
    );
    for u in &users {
        assert!(!fx.role_exists(u).await, "{u} was not dropped");
    }
    let prepared: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_prepared_xacts")
        .fetch_one(&fx.root)
        .await
        .unwrap();
    assert_eq!(
        prepared, 0,
        "the user's prepared transaction was rolled back"
    );
    assert!(lock_exclusive(&fx.admin, "5s").await, "the lock is free");
    let defaults: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_default_acl")
        .fetch_one(&fx.admin)
        .await
        .unwrap();
    assert_eq!(defaults, 0, "default privileges went with the user");
    let settings: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_db_role_setting")
        .fetch_one(&fx.root)
        .await
        .unwrap();
    assert_eq!(settings, 0, "role settings went with the user");
    assert!(PgConnection::connect(&dsn).await.is_err(), "login fails");
    drop(conn);
    drop(writer);
    drop(app);
    fx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg15_user_does_exactly_its_grant_and_nothing_outlives_it() {
    exactly_the_grant_and_nothing_that_outlives_it(15).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg17_user_does_exactly_its_grant_and_nothing_outlives_it() {
    exactly_the_grant_and_nothing_that_outlives_it(17).await;
}

/// Strict mode (the default): while another database is open to every role,
/// nothing is issued (503 `backend_unsafe_defaults`, no role created); the
/// first exchange after the operator's fix succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_strict_mode_refuses_until_the_server_is_fixed() {
    let _exclusive = OPEN.write().await;
    let fx = Fx::new(15).await;
    let open = fx.other_database(true).await;
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(fx.backends(true))
        .start()
        .await;
    let (_key, _run, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    let before = fx.login_roles().await;
    let resp = app.exchange(cap["token"].as_str().unwrap()).await;
    assert_error(
        resp,
        StatusCode::SERVICE_UNAVAILABLE,
        "backend_unsafe_defaults",
    )
    .await;
    assert_eq!(fx.login_roles().await, before, "no role was created");
    let audit = app.audit("event=lease.failed").await;
    assert!(
        serde_json::to_string(&audit)
            .unwrap()
            .contains("connect_public"),
        "the audit names the finding: {audit:?}"
    );

    sqlx::raw_sql(&format!("REVOKE CONNECT ON DATABASE {open} FROM PUBLIC"))
        .execute(&fx.root)
        .await
        .unwrap();
    app.exchange_ok(&cap).await;
    drop(app);
    fx.drop_database(&open).await;
    fx.cleanup().await;
}

/// With strict mode off and two databases open to every role: one user leaves
/// a large object in one of them (removal reaches it), another in a database
/// the broker cannot reach (it cannot be removed yet), three stay clean. The
/// clean ones and the first go in the same pass; the poisoned one is reported
/// alone and goes once its database is reachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_objects_in_other_databases_are_removed_and_a_poisoned_user_delays_no_one() {
    let _exclusive = OPEN.write().await;
    let fx = Fx::new(15).await;
    let reachable = fx.other_database(true).await;
    let unreachable = fx.other_database(true).await;
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(fx.backends(false))
        .start()
        .await;
    let (key, run_id, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    let mut users = vec![];
    let mut dsns = vec![];
    let mut sessions = vec![];
    for _ in 0..5 {
        let v = app.exchange_ok(&cap).await;
        users.push(v["username"].as_str().unwrap().to_owned());
        dsns.push(v["dsn"].as_str().unwrap().to_owned());
        sessions.push(
            PgConnection::connect(v["dsn"].as_str().unwrap())
                .await
                .unwrap(),
        );
    }
    // users[1] leaves a large object in `reachable`, users[3] in `unreachable`.
    for (i, db) in [(1, &reachable), (3, &unreachable)] {
        let mut there = PgConnection::connect(&dsn_for(&dsns[i], db)).await.unwrap();
        sqlx::query("SELECT lo_create(0)")
            .execute(&mut there)
            .await
            .unwrap();
        there.close().await.unwrap();
    }
    // The broker's account may not connect there any more.
    sqlx::raw_sql(&format!(
        "REVOKE CONNECT ON DATABASE {unreachable} FROM PUBLIC"
    ))
    .execute(&fx.root)
    .await
    .unwrap();

    end_run(&app, &key, &run_id).await;
    let started = std::time::Instant::now();
    let done = tessera_broker::jobs::revocation::run_once(&app.state)
        .await
        .unwrap();
    eprintln!(
        "5 users, one owning an object in another database and one unremovable: \
         {done} removed in one pass, {:?}",
        started.elapsed()
    );
    assert_eq!(
        done, 4,
        "every user but the poisoned one settled in one pass"
    );
    for (i, u) in users.iter().enumerate() {
        assert_eq!(fx.role_exists(u).await, i == 3, "{u}");
    }
    let pool = fx.cluster.superuser(&reachable).await;
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_largeobject_metadata")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "the large object in the other database went");
    pool.close().await;
    drop(sessions);

    // Reachable again: the next attempt removes it.
    sqlx::raw_sql(&format!(
        "GRANT CONNECT ON DATABASE {unreachable} TO PUBLIC"
    ))
    .execute(&fx.root)
    .await
    .unwrap();
    app.state.clock.advance(std::time::Duration::from_secs(60));
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        1
    );
    assert!(!fx.role_exists(&users[3]).await);
    drop(app);
    fx.drop_database(&reachable).await;
    fx.drop_database(&unreachable).await;
    fx.cleanup().await;
}

/// PostgreSQL 16+: users share one group per (table, privilege), so the
/// table's ACL does not grow with them (on 15 each live user is an ACL entry,
/// and PostgreSQL refuses GRANTs past about 2,400: docs/backends/databases.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg17_ten_thousand_live_users_on_one_table() {
    const USERS: usize = 10_000;
    let _shared = OPEN.read().await;
    let fx = Fx::new(17).await;
    let app = TestApp::builder(Db::Sqlite)
        .db_backends(fx.backends(true))
        .start()
        .await;
    let (key, run_id, token) = app.run_for("ursula").await;
    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    assert_eq!(cap["uses"], USERS as u64);
    let capability = cap["token"].as_str().unwrap().to_owned();
    let started = std::time::Instant::now();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let clients = (0..8).map(|_| async {
        let mut dsns = vec![];
        while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < USERS {
            let resp = app.exchange(&capability).await;
            let status = resp.status();
            let v: Value = resp.json().await.unwrap();
            assert_eq!(status, StatusCode::OK, "{v}");
            dsns.push(v["dsn"].as_str().unwrap().to_owned());
        }
        dsns
    });
    let dsns: Vec<String> = futures_util::future::join_all(clients)
        .await
        .into_iter()
        .flatten()
        .collect();
    let issued_in = started.elapsed();
    assert_eq!(dsns.len(), USERS);
    let prefix = format!("tsr_{}_%", run_id.replace('-', ""));
    let live = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pg_roles WHERE rolname LIKE $1")
            .bind(&prefix)
            .fetch_one(&fx.root)
            .await
            .unwrap()
    };
    assert_eq!(live().await, USERS as i64);
    for dsn in dsns.iter().step_by(USERS / 20) {
        let mut conn = PgConnection::connect(dsn).await.unwrap();
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM app.granted")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(n, 1);
        conn.close().await.unwrap();
    }
    let started = std::time::Instant::now();
    app.end_run(&key, &run_id).await;
    assert_eq!(
        tessera_broker::jobs::revocation::run_once(&app.state)
            .await
            .unwrap(),
        USERS
    );
    let revoked_in = started.elapsed();
    assert_eq!(live().await, 0);
    eprintln!("{USERS} users: issued in {issued_in:?}, run end + removal in {revoked_in:?}");
    drop(app);
    fx.cleanup().await;
}
