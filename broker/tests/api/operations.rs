//! Running for months: readiness that names what is wrong (a full disk, a
//! frozen store, a rejected policy, a stuck removal), logs that say it once,
//! bounded waits, and removal that follows a recovered downstream at once.

use crate::support::app::{assert_error, Db, DbBackends, Extra, TempDir, TestApp};
use crate::support::postgres::PgFixture;
use crate::support::proxy::Proxy;
use reqwest::StatusCode;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// `/readyz` as (status, reason codes, the whole body).
async fn readiness(client: &reqwest::Client, base: &str) -> (StatusCode, Vec<String>, Value) {
    let resp = client.get(format!("{base}/readyz")).send().await.unwrap();
    let status = resp.status();
    let body: Value = resp.json().await.unwrap();
    let codes = body["reasons"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| r["code"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default();
    (status, codes, body)
}

/// A tmpfs of `size` mounted by the test (root only: CI runs as root, and a
/// test that cannot mount fails rather than skips); unmounted when dropped.
struct Tmpfs {
    dir: TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = TempDir::new();
        let out = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(&dir.0)
            .output()
            .expect("mount");
        assert!(
            out.status.success(),
            "this test mounts a small tmpfs (needs root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        &self.dir.0
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.dir.0)
            .status();
    }
}

/// Writes zeros to `path` until the file system refuses.
fn fill(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 64 * 1024];
    while f.write_all(&block).is_ok() {}
    let small = [0u8; 512];
    while f.write_all(&small).is_ok() {}
    let _ = f.sync_all();
}

/// The disk under the SQLite store fills up: issuance fails closed, `/readyz`
/// answers 503 naming the full disk every time it is asked (not 200 because a
/// small probe still fits), the log names the full disk once however many
/// requests fail, and everything comes back once there is room again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_disk_is_named_once_and_readiness_says_so_until_it_has_room() {
    let disk = Tmpfs::mount("6m");
    let mut app = TestApp::spawn(Db::Sqlite).await;
    let store = disk.path().join("tessera.db");
    let url = format!("sqlite://{}", store.display());
    let broker = app.process(&[("TESSERA_STORE_URL", &url)]).await;
    app.addr = broker.addr;
    let base = format!("http://{}", broker.addr);
    let (_key, _run, token) = app.run_for("alice").await;
    app.capability_ok(&token, "read", "svc-reports:reports/q0")
        .await;

    let filler = disk.path().join("filler");
    fill(&filler);
    // Writes fail once SQLite needs a page it has not got. The WAL may hold a
    // few more commits first, and a checkpoint that copies every frame into
    // pages the database file already has lets SQLite write the WAL again from
    // its start, so commits can come in bursts until the file itself must
    // grow: from then on every one fails (50 in a row here).
    let mut refused = 0;
    for i in 0..5000 {
        let resp = app
            .capability(&token, "read", &format!("svc-reports:reports/f{i}"))
            .await;
        if resp.status() == StatusCode::SERVICE_UNAVAILABLE {
            assert_error(resp, StatusCode::SERVICE_UNAVAILABLE, "store_unavailable").await;
            refused += 1;
            if refused == 50 {
                break;
            }
        } else {
            assert_eq!(resp.status(), StatusCode::CREATED);
            refused = 0;
        }
    }
    assert_eq!(refused, 50, "issuance kept succeeding on a full disk");
    // Readiness says not ready, and why, while the writer's batches fail. A
    // small write can still fit where the WAL was written before (a job's,
    // a readiness probe's), and the store is then truthfully ready for a
    // moment: each answer is taken right after an issuance the store refused,
    // and 20 of them must name the full disk.
    // (A verdict is reused for a second: the answers are 100 ms apart.)
    let mut named = 0;
    for i in 0..200 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let resp = app
            .capability(&token, "read", &format!("svc-reports:reports/g{i}"))
            .await;
        if resp.status() != StatusCode::SERVICE_UNAVAILABLE {
            continue;
        }
        let (status, codes, body) = readiness(&app.client, &base).await;
        if status == StatusCode::OK {
            continue;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(codes, vec!["store_cannot_commit".to_owned()], "{body}");
        let message = body["reasons"][0]["message"].as_str().unwrap();
        assert!(message.contains("disk is full"), "{body}");
        // The cause, never the driver's own text (the log has that).
        assert!(!message.contains("database or disk"), "{body}");
        named += 1;
        if named == 20 {
            break;
        }
    }
    assert_eq!(
        named,
        20,
        "readiness did not name the full disk:\n{}",
        broker.log_text()
    );
    let log = broker.log_text();
    // Once per outage, not per request. A checkpoint can let SQLite reuse its
    // WAL from the start, so a commit may get through on the full disk and
    // the next outage is named again: never more often than the store
    // recovered in between.
    let named = log.matches("store cannot commit: the disk is full").count();
    let recovered = log.matches("the store commits again").count();
    assert!(
        named >= 1 && named <= recovered + 1,
        "the full disk is named once per outage ({named} for {recovered} recoveries):\n{log}"
    );
    assert!(!log.contains("closed pool"), "{log}");
    assert!(
        log.matches("requests fail: store unavailable").count() <= 2,
        "request failures are counted, not logged one by one:\n{log}"
    );

    // Room again: ready within a few probes, and issuing.
    std::fs::remove_file(&filler).unwrap();
    let back = Instant::now();
    loop {
        let (status, _, body) = readiness(&app.client, &base).await;
        if status == StatusCode::OK {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(15),
            "not ready 15 s after the disk had room: {body}\n{}",
            broker.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    app.capability_ok(&token, "read", "svc-reports:reports/back")
        .await;
    assert!(broker.log_text().contains("the store commits again"));
    drop(broker);
}

/// A store that holds its write lock (another process in a long transaction)
/// makes issuance answer 503 within `store.timeout`, not after the writer's
/// own 10 s; readiness names the write that is stuck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_store_answers_503_within_the_store_timeout() {
    let app = TestApp::builder(Db::Sqlite)
        .extra(Extra {
            config: "\n[store]\ntimeout = \"1s\"\n".into(),
            ..Default::default()
        })
        .start()
        .await;
    let (_key, _run, token) = app.run_for("alice").await;
    app.capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    let caps_before = app.count("capabilities").await;
    let mut lock = app.state.store.pool().acquire().await.unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let asked = Instant::now();
    let resp = app
        .capability(&token, "read", "svc-reports:reports/q2")
        .await;
    let took = asked.elapsed();
    assert_error(resp, StatusCode::SERVICE_UNAVAILABLE, "store_unavailable").await;
    // One second configured; the busy wait alone would be 5 s and the old
    // bound 10 s. A generous margin for a loaded machine.
    assert!(took < Duration::from_secs(4), "503 after {took:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, codes, body) = readiness(&app.client, &format!("http://{}", app.addr)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(codes.contains(&"store_cannot_commit".to_owned()), "{body}");
    sqlx::query("ROLLBACK").execute(&mut *lock).await.unwrap();
    drop(lock);
    let mut ready = false;
    for _ in 0..50 {
        if readiness(&app.client, &format!("http://{}", app.addr))
            .await
            .0
            == StatusCode::OK
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(ready, "ready again once the lock is gone");
    // The timed-out issuance may or may not have committed afterwards; its
    // token was never returned. Nothing else was issued.
    assert!(app.count("capabilities").await <= caps_before + 1);
    app.capability_ok(&token, "read", "svc-reports:reports/q3")
        .await;
}

/// A rejected policy reload leaves the previous set in force, so the policy
/// files are not what the broker enforces: not ready, with the file's error,
/// until a reload succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_policy_reload_is_a_readiness_reason_until_fixed() {
    let app = TestApp::spawn(Db::Sqlite).await;
    let base = format!("http://{}", app.addr);
    assert_eq!(readiness(&app.client, &base).await.0, StatusCode::OK);
    let broken = app.policy_dir().join("broken.cedar");
    std::fs::write(
        &broken,
        "permit (principal, action, resource) when { nonsense };",
    )
    .unwrap();
    let resp = app
        .post(
            "/v1/admin/policy/reload",
            Some(&app.admin_token),
            Value::Null,
        )
        .await;
    assert!(resp.status().is_client_error(), "{}", resp.status());
    let (status, codes, body) = readiness(&app.client, &base).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(codes, vec!["policy_load_failed".to_owned()], "{body}");
    assert!(
        body["reasons"][0]["message"]
            .as_str()
            .unwrap()
            .contains("broken.cedar"),
        "{body}"
    );
    std::fs::remove_file(&broken).unwrap();
    let resp = app
        .post(
            "/v1/admin/policy/reload",
            Some(&app.admin_token),
            Value::Null,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(readiness(&app.client, &base).await.0, StatusCode::OK);
}

/// After a long downstream outage (removals backing off for minutes), the
/// removal follows the server's return within seconds; meanwhile readiness
/// names the stuck outbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removal_follows_a_recovered_downstream_within_seconds() {
    let fx = PgFixture::new().await;
    let mut proxy = Proxy::start("127.0.0.1:5432").await;
    let backends = DbBackends {
        pg: crate::support::app::pg_url()
            .replace("127.0.0.1:5432", &format!("127.0.0.1:{}", proxy.port)),
        ..DbBackends::default()
    };
    let mut app = TestApp::builder(Db::Sqlite)
        .db_backends(backends)
        .extra(Extra {
            config: "\n[readiness]\noutbox_stuck_after = \"60s\"\n".into(),
            ..Default::default()
        })
        .start()
        .await;
    let broker = app.process(&[]).await;
    app.addr = broker.addr;
    let base = format!("http://{}", broker.addr);
    let (key, run_id, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    let user = app.exchange_ok(&cap).await["username"]
        .as_str()
        .unwrap()
        .to_owned();

    proxy.cut().await;
    assert_eq!(app.end_run(&key, &run_id).await.status(), StatusCode::OK);
    broker
        .logged("downstream revocation failed", Duration::from_secs(20))
        .await;
    // As after an outage of many minutes: the twelfth failure, the next
    // attempt five minutes away, queued ten minutes ago.
    let pool = app.state.store.pool();
    let now = app.state.clock.now();
    let changed = sqlx::query(&format!(
        "UPDATE revocations SET attempts = 12, next_attempt_at = {}, created_at = {} \
         WHERE done_at IS NULL",
        now + 300,
        now - 600
    ))
    .execute(pool)
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(changed, 1);
    // Readiness verdicts are reused for a second: ask until it is fresh.
    let mut last = (StatusCode::OK, vec![], Value::Null);
    for _ in 0..30 {
        last = readiness(&app.client, &base).await;
        if last.0 == StatusCode::SERVICE_UNAVAILABLE {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, codes, body) = last;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(codes, vec!["revocation_outbox_stuck".to_owned()], "{body}");
    assert!(fx.role_exists(&user).await);

    proxy.restore().await;
    let back = Instant::now();
    while fx.role_exists(&user).await {
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "the user was not removed within 10 s of the server's return:\n{}",
            broker.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("removed {:?} after the server came back", back.elapsed());
    assert!(broker.log_text().contains("the backend answers again"));
    let mut ready = false;
    for _ in 0..50 {
        if readiness(&app.client, &base).await.0 == StatusCode::OK {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "{}", broker.log_text());
    fx.cleanup().await;
}

/// Out of file descriptors (a connection cap set above what the limit
/// allows): the log says so with the limit in force, once per 10 s, and the
/// broker keeps serving once connections close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_file_descriptors_is_logged_with_the_limit() {
    let app = TestApp::builder(Db::Sqlite)
        .extra(Extra {
            config: "\n[http]\nmax_connections = 5000\n".into(),
            ..Default::default()
        })
        .start()
        .await;
    let broker = app
        .process_with(&[], &["prlimit", "--nofile=128:128", "--"])
        .await;
    let started = Instant::now();
    let mut held = vec![];
    for _ in 0..200 {
        // Past the listen backlog a connect waits for SYN retries: give up.
        let connect = tokio::net::TcpStream::connect(broker.addr);
        match tokio::time::timeout(Duration::from_millis(300), connect).await {
            Ok(Ok(s)) => held.push(s),
            _ => break,
        }
    }
    broker
        .logged("out of file descriptors", Duration::from_secs(10))
        .await;
    let log = broker.log_text();
    assert!(log.contains("open_files_limit=Some(128)"), "{log}");
    // Once, then at most once per 10 s while it lasts.
    let lines = log.matches("out of file descriptors").count() as u64;
    assert!(
        lines <= 1 + started.elapsed().as_secs() / 10,
        "{lines} lines in {:?}:\n{log}",
        started.elapsed()
    );
    drop(held);
    let base = format!("http://{}", broker.addr);
    let mut served = false;
    for _ in 0..50 {
        if let Ok(r) = app.client.get(format!("{base}/healthz")).send().await {
            served = r.status() == StatusCode::OK;
            if served {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served, "{}", broker.log_text());
}
