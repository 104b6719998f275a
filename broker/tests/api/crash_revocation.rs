//! Revocation survives the broker dying at any step: the real binary is killed
//! (a failpoint aborts it, as `kill -9` would) or stopped with SIGTERM between
//! every two steps of a removal, and the next start must have every revoked
//! PostgreSQL and MariaDB user gone and every one of their sessions cut within
//! [`BOUND`] of being ready — not after a two-minute claim timeout.

use crate::support::app::{Db, DbBackends, ProcessBroker, TestApp};
use crate::support::mysql::MyFixture;
use crate::support::postgres::PgFixture;
use nix::sys::signal::Signal;
use reqwest::StatusCode;
use sqlx::{Connection, MySqlConnection, PgConnection};
use std::time::{Duration, Instant};

/// From the restarted broker being ready to every user gone and session cut.
/// The claim lease is 15 s; a correct takeover needs about one worker tick.
const BOUND: Duration = Duration::from_secs(8);

/// How the first broker stops.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// The failpoint aborts the process (no unwinding, nothing released).
    Abort,
    /// The failpoint stalls; the test sends this signal meanwhile.
    Signal(Signal),
}

struct Minted {
    pg_users: Vec<String>,
    my_users: Vec<String>,
    pg_sessions: Vec<PgConnection>,
    my_sessions: Vec<MySqlConnection>,
}

/// Three PostgreSQL and two MariaDB users for one run, each with an open session.
async fn mint(app: &TestApp, pg: &PgFixture, my: &MyFixture, token: &str) -> Minted {
    let pg_cap = app
        .capability_ok(token, "select", &pg.resource("granted"))
        .await;
    let my_cap = app
        .capability_ok(token, "select", &my.resource("granted"))
        .await;
    let mut m = Minted {
        pg_users: vec![],
        my_users: vec![],
        pg_sessions: vec![],
        my_sessions: vec![],
    };
    for _ in 0..3 {
        let v = app.exchange_ok(&pg_cap).await;
        m.pg_users.push(v["username"].as_str().unwrap().to_owned());
        let mut conn = PgConnection::connect(v["dsn"].as_str().unwrap())
            .await
            .unwrap();
        sqlx::query("SELECT 1").execute(&mut conn).await.unwrap();
        m.pg_sessions.push(conn);
    }
    for _ in 0..2 {
        let v = app.exchange_ok(&my_cap).await;
        m.my_users.push(v["username"].as_str().unwrap().to_owned());
        let mut conn = MySqlConnection::connect(v["dsn"].as_str().unwrap())
            .await
            .unwrap();
        sqlx::query("SELECT 1").execute(&mut conn).await.unwrap();
        m.my_sessions.push(conn);
    }
    m
}

/// Whether every user is gone and every session refused.
async fn all_gone(m: &mut Minted, pg: &PgFixture, my: &MyFixture) -> bool {
    for u in &m.pg_users {
        if pg.role_exists(u).await {
            return false;
        }
    }
    for u in &m.my_users {
        if my.user_exists(u).await {
            return false;
        }
    }
    for c in &mut m.pg_sessions {
        if sqlx::query("SELECT 1").execute(&mut *c).await.is_ok() {
            return false;
        }
    }
    for c in &mut m.my_sessions {
        if sqlx::query("SELECT 1").execute(&mut *c).await.is_ok() {
            return false;
        }
    }
    true
}

/// Ends a run on a broker that stops at `point` (as `stop` says), starts a
/// new one and returns how long after its start everything was gone.
async fn crash_at(db: Db, point: &str, stop: Stop) -> Duration {
    let pg = PgFixture::new().await;
    let my = MyFixture::new().await;
    let mut app = TestApp::builder(db)
        .db_backends(DbBackends::default())
        .start()
        .await;
    let (key, run_id, token) = app.run_for("alice").await;
    let mut minted = mint(&app, &pg, &my, &token).await;

    let action = match stop {
        Stop::Abort => format!("{point}=abort"),
        Stop::Signal(_) => format!("{point}=sleep(60000)"),
    };
    let mut first: ProcessBroker = app.process(&[("TESSERA_FAILPOINTS", &action)]).await;
    let in_process = app.addr;
    app.addr = first.addr;
    let resp = app.end_run(&key, &run_id).await;
    assert_eq!(resp.status(), StatusCode::OK);
    first
        .logged(&format!("failpoint {point}"), Duration::from_secs(20))
        .await;
    let status = match stop {
        Stop::Abort => first.exited(Duration::from_secs(10)).await,
        Stop::Signal(sig) => {
            first.signal(sig);
            // SIGTERM: the stalled pass gets its grace (10 s), then its claims
            // are released and the process exits.
            first.exited(Duration::from_secs(20)).await
        }
    };
    assert!(
        !status.success() || matches!(stop, Stop::Signal(Signal::SIGTERM)),
        "{point}: {status}"
    );
    if let Stop::Signal(Signal::SIGTERM) = stop {
        assert!(
            first.log_text().contains("releasing its claims"),
            "{}",
            first.log_text()
        );
    }

    let started = Instant::now();
    let second = app.process(&[]).await;
    app.addr = second.addr;
    let mut took = None;
    while started.elapsed() < BOUND + Duration::from_secs(5) {
        if all_gone(&mut minted, &pg, &my).await {
            took = Some(started.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = took.unwrap_or_else(|| {
        panic!(
            "{db:?} {point} {stop:?}: users or sessions still there {:?} after restart;\nfirst broker:\n{}\nsecond broker:\n{}",
            started.elapsed(),
            first.log_text(),
            second.log_text()
        )
    });
    assert!(
        took < BOUND,
        "{db:?} {point} {stop:?}: took {took:?} after restart, bound {BOUND:?}"
    );
    // Each of the five leases is recorded as revoked (once or more: a removal
    // repeated after a crash is idempotent and audited again). After a crash
    // past the removal, the users are already gone; the record follows.
    let users: Vec<&String> = minted.pg_users.iter().chain(&minted.my_users).collect();
    let mut audit = vec![];
    for _ in 0..200 {
        audit = app.audit("event=lease.revoked").await;
        let recorded = |u: &&String| {
            audit
                .iter()
                .any(|e| e["detail"].as_str().unwrap().contains(u.as_str()))
        };
        if users.iter().all(recorded) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for u in &users {
        assert!(
            audit
                .iter()
                .any(|e| e["detail"].as_str().unwrap().contains(u.as_str())),
            "{u} not recorded as revoked: {audit:?}"
        );
    }
    eprintln!("{db:?} {point} {stop:?}: everything gone {took:?} after restart");
    app.addr = in_process;
    drop(second);
    pg.cleanup().await;
    my.cleanup().await;
    took
}

const POINTS: [&str; 5] = [
    "revocation.before_claim",
    "revocation.after_claim",
    "revocation.mid_removal",
    "revocation.before_drop",
    "revocation.before_finish",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_crash_at_every_revocation_step_is_taken_over_at_once() {
    for point in POINTS {
        crash_at(Db::Sqlite, point, Stop::Abort).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_crash_at_every_revocation_step_is_taken_over_at_once() {
    for point in POINTS {
        crash_at(Db::Postgres, point, Stop::Abort).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_or_kill_while_holding_claims_hands_them_over() {
    for db in [Db::Sqlite, Db::Postgres] {
        crash_at(db, "revocation.after_claim", Stop::Signal(Signal::SIGTERM)).await;
        crash_at(db, "revocation.before_drop", Stop::Signal(Signal::SIGKILL)).await;
    }
}
