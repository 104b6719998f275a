//! The first run, as the README walks through it: `serve --dev` in an empty
//! folder creates its database, dev KEK and admin token (owner-only), a runtime
//! and a run get a capability and exchange it, the admin CLI verifies the audit,
//! rotates keys and ends the run — and afterwards no secret it handled is in the
//! trace log or in any byte of the database. What `serve --dev` writes is also
//! ignored by git, so a clone cannot commit it. These tests guard the promise a
//! newcomer sees first: nothing secret is left lying around.

use crate::support::{cli, start_dev_broker};
use serde_json::{json, Value};
use std::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_flow_leaves_no_secret_anywhere() {
    let broker = start_dev_broker().await;
    let dir = &broker.dir;
    // --dev created its files in the working folder, secrets with mode 0600.
    for f in ["tessera.db", "tessera-dev.kek", "admin.token"] {
        assert!(dir.join(f).exists(), "{f} missing");
    }
    use std::os::unix::fs::PermissionsExt;
    for f in ["tessera-dev.kek", "admin.token"] {
        let mode = std::fs::metadata(dir.join(f)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{f}");
    }

    let out = cli(
        &broker,
        &[
            "runtimes",
            "create",
            "demo",
            "--users",
            "*",
            "--task-kinds",
            "summarize",
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rt: Value = serde_json::from_slice(&out.stdout).unwrap();
    let key = rt["key"].as_str().unwrap().to_owned();
    assert!(key.starts_with("tsr_rt_"));
    let listed = cli(&broker, &["runtimes", "list"]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains("demo"));
    assert!(
        !String::from_utf8_lossy(&listed.stdout).contains(&key),
        "the key is shown once"
    );

    let http = reqwest::Client::new();
    let run: Value = http
        .post(format!("{}/v1/runs", broker.addr))
        .bearer_auth(&key)
        .json(
            &json!({ "user": "alice", "task": { "id": "t-1", "kind": "summarize" }, "ttl": "30m" }),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_token = run["run_token"].as_str().unwrap();
    let resp = http
        .post(format!("{}/v1/capabilities", broker.addr))
        .bearer_auth(run_token)
        .json(&json!({ "action": "read", "resource": "svc-reports:reports/2026/q1.csv" }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let cap: Value = resp.json().await.unwrap();
    assert_eq!(
        cap["uses"], 20,
        "shipped policy analysts-read-reports: @uses(20)"
    );
    let ex = http
        .post(format!("{}/v1/exchange", broker.addr))
        .json(&json!({ "capability": cap["token"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(ex.status(), 200);
    let exchanged: Value = ex.json().await.unwrap();

    let verified = cli(&broker, &["audit", "verify"]);
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
    assert!(String::from_utf8_lossy(&verified.stdout).contains("audit chain links verify"));
    let rotated = cli(&broker, &["keys", "rotate", "--json"]);
    assert!(rotated.status.success());
    let keys = cli(&broker, &["keys", "list"]);
    let text = String::from_utf8_lossy(&keys.stdout);
    // The new key is published at once and signs after the pre-publication.
    assert!(
        text.contains("active") && text.contains("scheduled"),
        "{text}"
    );

    let run_id = run["run_id"].as_str().unwrap();
    let end = cli(&broker, &["runs", "end", run_id, "--json"]);
    assert!(end.status.success());
    let end: Value = serde_json::from_slice(&end.stdout).unwrap();
    assert_eq!(
        end["revoked"],
        json!({ "capabilities": 1, "leases": 1, "pending": 0, "approvals": 0 })
    );
    let intro: Value = http
        .post(format!("{}/v1/introspect", broker.addr))
        .bearer_auth(&key)
        .json(&json!({ "token": cap["token"] }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(intro, json!({ "active": false }));
    // A refused request with a bad credential must not echo it either.
    let bogus = format!("tsr_run_{}", "Z".repeat(43));
    let _ = http
        .post(format!("{}/v1/capabilities", broker.addr))
        .bearer_auth(&bogus)
        .json(&json!({ "action": "read", "resource": "svc-reports:reports/x" }))
        .send()
        .await
        .unwrap();

    // No secret in any log line, at trace level.
    let log = std::fs::read_to_string(dir.join("broker.log")).unwrap();
    assert!(log.lines().count() > 10, "the broker logged at trace level");
    assert!(
        !log.contains('\u{1b}'),
        "no terminal colour codes in a log file"
    );
    let admin = std::fs::read_to_string(dir.join("admin.token")).unwrap();
    let kek = std::fs::read_to_string(dir.join("tessera-dev.kek")).unwrap();
    for (name, secret) in [
        ("runtime key", key.as_str()),
        ("run token", run_token),
        ("capability", cap["token"].as_str().unwrap()),
        ("exchanged token", exchanged["token"].as_str().unwrap()),
        ("admin token", admin.trim()),
        ("kek", kek.trim()),
        ("bogus bearer", bogus.as_str()),
    ] {
        assert!(!log.contains(secret), "{name} found in the broker log");
        // Also the random half alone (a log could cut the prefix off).
        assert!(
            !log.contains(&secret[secret.len() - 24..]),
            "{name} fragment found in the broker log"
        );
        // Nor in any byte of the database: every table, index, free page and the
        // write-ahead log — not only the rows a query would show.
        for file in ["tessera.db", "tessera.db-wal", "tessera.db-shm"] {
            let Ok(bytes) = std::fs::read(dir.join(file)) else {
                continue;
            };
            let fragment = &secret.as_bytes()[secret.len() - 24..];
            assert!(
                !bytes.windows(fragment.len()).any(|w| w == fragment),
                "{name} found in {file}"
            );
        }
    }
    // The search would have found them: ids it was handed are in the database.
    let db = std::fs::read(dir.join("tessera.db")).unwrap();
    let wal = std::fs::read(dir.join("tessera.db-wal")).unwrap_or_default();
    let run_id = run_id.as_bytes();
    assert!(
        db.windows(run_id.len()).any(|w| w == run_id)
            || wal.windows(run_id.len()).any(|w| w == run_id),
        "the byte search finds what is stored"
    );
}

/// What `serve --dev` writes in its working folder (the database, the dev KEK,
/// the admin token of the walk-through) is ignored by git, so `git add -A` in a
/// clone cannot commit a secret (issue 15).
#[test]
fn what_serve_dev_writes_is_ignored_by_git() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    for f in [
        "tessera.db",
        "tessera.db-wal",
        "tessera-dev.kek",
        "admin.token",
        "broker/admin.token",
    ] {
        let status = Command::new("git")
            .args(["check-ignore", "-q", "--no-index", f])
            .current_dir(root)
            .status()
            .expect("git");
        assert!(status.success(), "{f} is not ignored by .gitignore");
    }
}
