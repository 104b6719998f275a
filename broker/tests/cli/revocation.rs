//! Whatever way `exec` ends, what it obtained is revoked (issue 22, items 3–5
//! and 8): with its stderr closed, when stopped while still fetching, while an
//! exchange outlasts its hold (renewals start with the first capability), when
//! killed, stopped or timed out (the broker revokes once the hold lapses and
//! drops the database user), and after escalating past `--grace` with no
//! process of the command left behind. `exec` never passes the broker's own
//! secrets to the command either. Credentials must not outlive the command that
//! needed them, even when `exec` itself cannot clean up.

use crate::support::{
    broker_audit, capabilities_of, free_port, sandbox_cmd, sandbox_run, start_dev_broker,
    start_dev_broker_with, Broker, BIN,
};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `exec` with its stderr a pipe nobody reads (closed): its messages cannot be
/// written, and it still revokes what it obtained before exiting with its own
/// code; broker secrets are never passed, whatever `--keep-env` asks (issue 22,
/// items 5 and 8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_revokes_with_stderr_closed_and_never_passes_broker_secrets() {
    let broker = start_dev_broker().await;
    let (run_id, token_file) = sandbox_run(&broker).await;
    let closed_stderr = || {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        writer
    };
    let out = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--token",
            "read=svc-reports:reports/2026/q1.csv",
            "--",
            "/nonexistent/tool",
        ])
        .stderr(closed_stderr())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "not a panic (101)");
    let caps = capabilities_of(&broker, &run_id);
    assert_eq!(caps.len(), 1);
    assert_eq!(caps[0]["state"], "revoked", "{caps:?}");

    for secret in [
        "TESSERA_KEK",
        "TESSERA_KEK_FILE",
        "TESSERA_STORE_URL",
        "TESSERA_TLS_KEY_FILE",
        "TESSERA_ADMIN_TOKEN_FILE",
        // Any other broker variable, and any URL a backend's `url_env` may name.
        "TESSERA_FAILPOINTS",
        "PROD_PG_URL",
        "DATABASE_URL",
    ] {
        let out = sandbox_cmd(&broker, &token_file)
            .env(secret, "broker-secret")
            .args(["exec", "--keep-env", secret, "--", "env"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "{secret} was accepted");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("broker-secret"));
    }
}

/// SIGTERM while `exec` is still obtaining credentials (the exchange is held
/// for 3 s by a debug-build failpoint): the command is never started, what was
/// obtained is revoked, and `exec` exits 128+15 (issue 22, item 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_revokes_what_it_fetched_when_stopped_while_fetching() {
    let dir = std::env::temp_dir().join(format!("tessera-cli-{}", tessera_broker::ids::new_id()));
    std::fs::create_dir_all(&dir).unwrap();
    let broker = start_dev_broker_with(
        dir,
        None,
        &[("TESSERA_FAILPOINTS", "exchange.before_issue=sleep(3000)")],
    )
    .await;
    let (run_id, token_file) = sandbox_run(&broker).await;
    let marker = broker.dir.join("started");
    let mut child = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--token",
            "read=svc-reports:reports/2026/q3.csv",
            "--",
            "touch",
        ])
        .arg(&marker)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the exchange is held (the capability exists), then stop exec.
    for _ in 0..100 {
        if !capabilities_of(&broker, &run_id).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert_eq!(capabilities_of(&broker, &run_id).len(), 1);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    assert!(!marker.exists(), "the command was started");
    let caps = capabilities_of(&broker, &run_id);
    assert!(caps.iter().all(|c| c["state"] == "revoked"), "{caps:?}");
}

/// The holds are renewed from the first capability on: an exchange that takes
/// longer than the hold (held by a failpoint) does not make the capability
/// lapse before the command runs (the review saw renewals start only with the
/// command).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_renews_while_it_is_still_obtaining() {
    let dir = std::env::temp_dir().join(format!("tessera-cli-{}", tessera_broker::ids::new_id()));
    std::fs::create_dir_all(&dir).unwrap();
    let broker = start_dev_broker_with(
        dir,
        Some("expiry_sweep_interval = \"1s\"\n"),
        &[("TESSERA_FAILPOINTS", "exchange.before_issue=sleep(4500)")],
    )
    .await;
    let (run_id, token_file) = sandbox_run(&broker).await;
    let out = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--hold",
            "2s",
            "--token",
            "read=svc-reports:reports/2026/q3.csv",
        ])
        .args(["--", "sh", "-c", "sleep 1; echo ran"])
        .output()
        .unwrap();
    let seen = format!("{out:?}");
    assert_eq!(out.status.code(), Some(0), "{seen}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ran"),
        "{seen}"
    );
    let caps = capabilities_of(&broker, &run_id);
    assert_eq!(caps.len(), 1);
    assert_eq!(
        caps[0]["state"], "revoked",
        "revoked by exec at the end: {caps:?}"
    );
    assert!(
        broker_audit(&broker, "capability.lapsed").is_empty(),
        "it never lapsed"
    );
}

/// Whether a process is still alive (a zombie counts as gone).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

/// Waits for a pid the command wrote to `file`.
async fn pid_in(file: &Path) -> i32 {
    for _ in 0..200 {
        if let Some(pid) = std::fs::read_to_string(file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no pid in {}", file.display());
}

/// Polls until every capability of the run is revoked; false after `within`.
async fn all_revoked_within(broker: &Broker, run_id: &str, within: Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    loop {
        let caps = capabilities_of(broker, run_id);
        if !caps.is_empty() && caps.iter().all(|c| c["state"] == "revoked") {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until `pid` is gone; false after `within`.
async fn gone_within(pid: i32, within: Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    while alive(pid) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

/// A table of this test's own in the `analytics` database of the machine's
/// PostgreSQL (the repository's policy lets analysts SELECT from
/// `pg-main:analytics.public.*`), and a superuser connection to inspect roles.
async fn analytics_table() -> (sqlx::PgConnection, String) {
    use sqlx::Connection;
    let server = "postgres://postgres@127.0.0.1:5432";
    let mut admin = sqlx::PgConnection::connect(&format!("{server}/postgres"))
        .await
        .expect("PostgreSQL on 127.0.0.1:5432 (see the env notes)");
    let exists = sqlx::query("SELECT 1 FROM pg_database WHERE datname = 'analytics'")
        .fetch_optional(&mut admin)
        .await
        .unwrap();
    if exists.is_none() {
        // Another test may create it at the same moment.
        let _ = sqlx::query("CREATE DATABASE analytics")
            .execute(&mut admin)
            .await;
    }
    let mut db = sqlx::PgConnection::connect(&format!("{server}/analytics"))
        .await
        .unwrap();
    let table = format!("tsr_cli_{}", free_port());
    sqlx::query(&format!("CREATE TABLE public.{table} (n int)"))
        .execute(&mut db)
        .await
        .unwrap();
    (admin, table)
}

async fn role_exists(admin: &mut sqlx::PgConnection, name: &str) -> bool {
    sqlx::query("SELECT 1 FROM pg_roles WHERE rolname = $1")
        .bind(name)
        .fetch_optional(admin)
        .await
        .unwrap()
        .is_some()
}

/// The command kills `exec` with SIGKILL, stops it with SIGSTOP, or a
/// supervisor's `timeout -k` kills `exec` while the command ignores SIGTERM:
/// nobody is left to revoke, and still every capability is revoked by the
/// broker once `exec`'s hold lapses — within hold (2 s) + sweep (1 s) + slack
/// — with its database user dropped, and the command is killed with `exec`
/// (PR_SET_PDEATHSIG) (issue 22, item 3; the test saw the capability live for
/// its whole ttl first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_revokes_even_when_it_is_killed() {
    let dir = std::env::temp_dir().join(format!("tessera-cli-{}", tessera_broker::ids::new_id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = r#"expiry_sweep_interval = "1s"

[backends.svc-reports]
kind = "token"
audience = "https://reports.internal"

[backends.pg-main]
kind = "postgres"
url_env = "TESSERA_CLI_PG"
strict = false
"#;
    let broker = start_dev_broker_with(
        dir,
        Some(config),
        &[(
            "TESSERA_CLI_PG",
            "postgres://postgres@127.0.0.1:5432/analytics",
        )],
    )
    .await;
    let (mut admin, table) = analytics_table().await;
    let bound = Duration::from_secs(2 + 1 + 12);

    // The command kills its parent, then carries on with its database user.
    let (run_id, token_file) = sandbox_run(&broker).await;
    let (pidfile, userfile) = (
        broker.dir.join("killer.pid"),
        broker.dir.join("killer.user"),
    );
    let status = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--hold",
            "2s",
            "--token",
            "read=svc-reports:reports/2026/q1.csv",
        ])
        .arg("--db")
        .arg(format!("select=pg-main:analytics.public.{table}"))
        .args(["--", "sh", "-c"])
        .arg(r#"echo $PGUSER > "$1"; echo $$ > "$0"; kill -9 $PPID; exec sleep 60"#)
        .arg(&pidfile)
        .arg(&userfile)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(status.status.code(), None, "exec was killed: {status:?}");
    let command = pid_in(&pidfile).await;
    let user = std::fs::read_to_string(&userfile)
        .unwrap()
        .trim()
        .to_owned();
    assert!(user.starts_with("tsr_"), "{user}");
    assert!(
        all_revoked_within(&broker, &run_id, bound).await,
        "still live: {:?}",
        capabilities_of(&broker, &run_id)
    );
    let deadline = std::time::Instant::now() + bound;
    while role_exists(&mut admin, &user).await && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        !role_exists(&mut admin, &user).await,
        "{user} outlived exec"
    );
    assert!(
        gone_within(command, bound).await,
        "the command outlived exec"
    );

    // The command stops its parent: the hold lapses all the same; once
    // continued, exec learns it and stops the command (exit 123).
    let (run_id, token_file) = sandbox_run(&broker).await;
    let pidfile = broker.dir.join("stopper.pid");
    let exec = sandbox_cmd(&broker, &token_file)
        .args(["exec", "--hold", "2s", "--grace", "1s"])
        .args([
            "--token",
            "read=svc-reports:reports/2026/q1.csv",
            "--",
            "sh",
            "-c",
        ])
        .arg(r#"echo $$ > "$0"; kill -STOP $PPID; exec sleep 60"#)
        .arg(&pidfile)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let command = pid_in(&pidfile).await;
    assert!(
        all_revoked_within(&broker, &run_id, bound).await,
        "still live: {:?}",
        capabilities_of(&broker, &run_id)
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(exec.id() as i32),
        nix::sys::signal::Signal::SIGCONT,
    )
    .unwrap();
    let out = tokio::task::spawn_blocking(move || exec.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(123), "{out:?}");
    assert!(!alive(command));

    // The command ignores SIGTERM; `timeout -k 1 1` kills exec after 2 s.
    let (run_id, token_file) = sandbox_run(&broker).await;
    let pidfile = broker.dir.join("stubborn.pid");
    let status = Command::new("timeout")
        .args([
            "-k", "1", "1", BIN, "exec", "--hold", "2s", "--grace", "60s",
        ])
        .args(["--token", "read=svc-reports:reports/2026/q1.csv", "--"])
        .args(["sh", "-c", r#"trap '' TERM; echo $$ > "$0"; exec sleep 60"#])
        .arg(&pidfile)
        .env("TESSERA_ADDR", &broker.addr)
        .env("TESSERA_RUN_TOKEN_FILE", &token_file)
        .status()
        .unwrap();
    // timeout(1) kills exec, then its own group (itself included).
    assert!(!status.success(), "timeout killed exec: {status}");
    let command = pid_in(&pidfile).await;
    assert!(
        all_revoked_within(&broker, &run_id, bound).await,
        "still live: {:?}",
        capabilities_of(&broker, &run_id)
    );
    assert!(
        gone_within(command, bound).await,
        "the command outlived exec"
    );
}

/// `exec`'s own escalation: SIGTERM is forwarded, and a command that ignores
/// it is killed with its whole process group after `--grace`; on exit, every
/// process the command left behind — in its group or daemonized with
/// `setsid` — is killed before `exec` revokes and exits (issue 22, item 8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_escalates_and_leaves_no_process_behind() {
    let broker = start_dev_broker().await;
    let (run_id, token_file) = sandbox_run(&broker).await;
    let pidfile = broker.dir.join("ignorer.pid");
    let mut child = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--grace",
            "1s",
            "--token",
            "read=svc-reports:reports/2026/q2.csv",
        ])
        .args([
            "--",
            "sh",
            "-c",
            r#"trap '' TERM; echo $$ > "$0"; exec sleep 60"#,
        ])
        .arg(&pidfile)
        .spawn()
        .unwrap();
    let command = pid_in(&pidfile).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(137), "killed after the grace: {status}");
    assert!(!alive(command));
    assert!(all_revoked_within(&broker, &run_id, Duration::ZERO).await);

    // Leftovers: one in the command's group, one in a session of its own.
    let (run_id, token_file) = sandbox_run(&broker).await;
    let (grouped, daemon) = (
        broker.dir.join("grouped.pid"),
        broker.dir.join("daemon.pid"),
    );
    let status = sandbox_cmd(&broker, &token_file)
        .args(["exec", "--token", "read=svc-reports:reports/2026/q2.csv", "--", "sh", "-c"])
        .arg(r#"sh -c 'echo $$ > "$0"; exec sleep 60' "$0" & setsid sh -c 'echo $$ > "$0"; exec sleep 60' "$1" & while [ ! -s "$0" ] || [ ! -s "$1" ]; do sleep 0.05; done; exit 3"#)
        .arg(&grouped)
        .arg(&daemon)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(3), "the command's own code");
    for file in [&grouped, &daemon] {
        let pid = pid_in(file).await;
        assert!(!alive(pid), "{} outlived exec", file.display());
    }
    assert!(all_revoked_within(&broker, &run_id, Duration::ZERO).await);

    // A leftover whose main thread exited while another thread runs shows as a
    // zombie but is alive (and no waitpid reaps it): it is killed too.
    let (run_id, token_file) = sandbox_run(&broker).await;
    let ghost = broker.dir.join("ghost.pid");
    let program = format!(
        "import ctypes, os, threading, time\n\
         threading.Thread(target=lambda: time.sleep(60)).start()\n\
         open({:?}, 'w').write(str(os.getpid()))\n\
         ctypes.CDLL(None).pthread_exit(None)\n",
        ghost.display().to_string()
    );
    let status = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--grace",
            "1s",
            "--token",
            "read=svc-reports:reports/2026/q2.csv",
        ])
        .args([
            "--",
            "sh",
            "-c",
            r#"python3 -c "$0" & while [ ! -s "$1" ]; do sleep 0.05; done"#,
        ])
        .arg(&program)
        .arg(&ghost)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let pid = pid_in(&ghost).await;
    let threads = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    assert!(
        !threads.contains("Threads:\t2"),
        "the ghost outlived exec: {threads}"
    );
    assert!(all_revoked_within(&broker, &run_id, Duration::ZERO).await);

    // An admin revokes the capability while the command runs: the next
    // renewal learns it, and exec stops the command and says so (exit 123).
    let (run_id, token_file) = sandbox_run(&broker).await;
    let child = sandbox_cmd(&broker, &token_file)
        .args(["exec", "--hold", "3s", "--grace", "1s"])
        .args([
            "--token",
            "read=svc-reports:reports/2026/q2.csv",
            "--",
            "sleep",
            "60",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut caps = Vec::new();
    for _ in 0..200 {
        caps = capabilities_of(&broker, &run_id);
        if !caps.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let id = caps[0]["capability_id"].as_str().unwrap();
    let admin = std::fs::read_to_string(broker.dir.join("admin.token")).unwrap();
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/capabilities/{id}/revoke", broker.addr))
        .bearer_auth(admin.trim())
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(123), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("lapse"),
        "{out:?}"
    );
}
