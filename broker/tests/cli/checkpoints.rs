//! Audit checkpoints: the broker writes them to its checkpoint file and delivers
//! them to a witness (retrying refused deliveries), and `audit verify
//! --checkpoints` with the witness's copy proves a truncation that the database
//! alone cannot show. This is what makes the audit log tamper-evident against
//! whoever owns the database, so it is tested end to end with a real cut.

use crate::support::{cli, start_dev_broker_in};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// A witness on loopback: answers 503 to the first `fail_first` POSTs, then
/// 200, and keeps every body it accepted.
async fn witness(fail_first: usize) -> (String, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
    use std::sync::{Arc, Mutex};
    let kept: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let k = kept.clone();
    let app = axum::Router::new().route(
        "/witness",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let k = k.clone();
            let seen = seen.clone();
            async move {
                if seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < fail_first {
                    return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                }
                k.lock().unwrap().push(body);
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/witness", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, kept)
}

fn checkpoint_lines(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("audit-checkpoints.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_reach_their_witnesses_and_prove_a_truncation() {
    let (url, witnessed) = witness(2).await;
    let config = format!(
        "[audit]\ncheckpoint_rows = 3\ncheckpoint_interval = \"1s\"\ncheckpoint_stdout = true\nwitness_url = \"{url}\"\n"
    );
    let dir = std::env::temp_dir().join(format!("tessera-cli-{}", tessera_broker::ids::new_id()));
    std::fs::create_dir_all(&dir).unwrap();
    let broker = start_dev_broker_in(dir, Some(&config)).await;
    for name in ["a1", "a2", "a3", "a4"] {
        assert!(cli(&broker, &["runtimes", "create", name]).status.success());
        tokio::time::sleep(Duration::from_millis(1200)).await;
    }
    let ckpt = broker.dir.join("audit-checkpoints.jsonl");
    for _ in 0..100 {
        if checkpoint_lines(&broker.dir).len() >= 2 && witnessed.lock().unwrap().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lines = checkpoint_lines(&broker.dir);
    assert!(lines.len() >= 2, "{lines:?}");
    use std::os::unix::fs::PermissionsExt;
    // The store and its journal are the owner's only.
    for f in ["tessera.db", "tessera.db-wal", "tessera-dev.kek"] {
        let mode = std::fs::metadata(broker.dir.join(f))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{f}: {mode:o}");
    }
    assert_eq!(
        std::fs::metadata(&ckpt).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // The witness got the same checkpoints, after two refused deliveries.
    let got = witnessed.lock().unwrap().clone();
    for l in &lines[..2] {
        assert!(
            got.iter().any(|g| g["checkpoint"] == l["checkpoint"]),
            "{got:?}"
        );
    }
    let out = cli(
        &broker,
        &["audit", "verify", "--checkpoints", ckpt.to_str().unwrap()],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("audit log intact") || text.contains("unverified tail of"),
        "{text}"
    );
    assert!(!text.contains("BROKEN"), "{text}");
    // A tail longer than the operator allows is a failure.
    let strict = cli(
        &broker,
        &[
            "audit",
            "verify",
            "--checkpoints",
            ckpt.to_str().unwrap(),
            "--max-tail",
            "0",
        ],
    );
    let strict_text = String::from_utf8_lossy(&strict.stdout).into_owned();
    if strict_text.contains("unverified tail") || !strict.status.success() {
        assert!(!strict.status.success(), "{strict_text}");
        assert!(strict_text.contains("--max-tail 0"), "{strict_text}");
    }

    // Stopped; then the database owner cuts every row after the first
    // checkpoint and moves the head back.
    let first = lines[0]["seq"].as_i64().unwrap();
    let dir = broker.stop();
    let db = dir.join("tessera.db");
    let url = format!("sqlite://{}", db.display());
    {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query("DELETE FROM audit WHERE seq > ?1")
            .bind(first)
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query(
            "UPDATE audit_head SET seq = ?1, hash = (SELECT hash FROM audit WHERE seq = ?1)",
        )
        .bind(first)
        .execute(&mut conn)
        .await
        .unwrap();
        // Its own checkpoint rows go too: only the witness's copy remains.
        sqlx::query("DELETE FROM audit_checkpoints")
            .execute(&mut conn)
            .await
            .unwrap();
    }
    // Keep the witness file aside: a restart appends to the live one.
    let kept = dir.join("witness-copy.jsonl");
    std::fs::copy(&ckpt, &kept).unwrap();
    let broker = start_dev_broker_in(dir, Some(&config)).await;
    // From the database alone the chain links verify…
    let chain = cli(&broker, &["audit", "verify"]);
    let chain_text = String::from_utf8_lossy(&chain.stdout).into_owned();
    assert!(chain.status.success(), "{chain_text}");
    assert!(chain_text.contains("cannot be seen"), "{chain_text}");
    // …but the witness's checkpoints name the truncation.
    let out = cli(
        &broker,
        &["audit", "verify", "--checkpoints", kept.to_str().unwrap()],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("BROKEN") && text.contains("is missing"),
        "{text}"
    );
}
