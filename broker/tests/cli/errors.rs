//! Errors a person at the terminal meets: an unreachable broker (with its
//! cause), a rejected admin token, an invalid configuration or log setting
//! (the setting named, exit 2, nothing written), an invalid policy (with
//! file:line:col), an address given as `host:port`, an id that would change the
//! request's path, and a conflict that is the caller's error rather than a
//! warning in the broker's log. These are the messages an operator acts on, so
//! each must say what is wrong and where (issue 15).

use crate::support::{cli, free_port, policy_dir, start_dev_broker, BIN};
use std::process::Command;
use std::time::Duration;

#[tokio::test]
async fn cli_errors_are_clear() {
    tessera_broker::server::install_crypto_provider();
    let dir = std::env::temp_dir().join(format!("tessera-cli-{}", tessera_broker::ids::new_id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("admin.token");
    std::fs::write(&token, format!("tsr_adm_{}", "A".repeat(43))).unwrap();
    // Unreachable broker.
    let out = Command::new(BIN)
        .args(["runtimes", "list"])
        .env("TESSERA_ADDR", format!("http://127.0.0.1:{}", free_port()))
        .env("TESSERA_ADMIN_TOKEN_FILE", &token)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot reach the broker"), "{err}");
    // With its cause, not only reqwest's "error sending request" (issue 15).
    assert!(err.to_lowercase().contains("connection refused"), "{err}");
    // Bad token against a live broker.
    let broker = start_dev_broker().await;
    let out = Command::new(BIN)
        .args(["runtimes", "list"])
        .env("TESSERA_ADDR", &broker.addr)
        .env("TESSERA_ADMIN_TOKEN_FILE", &token)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("rejected the admin token"));
    // Invalid configuration names the setting and exits 2 without starting.
    let cfg = dir.join("bad.toml");
    std::fs::write(&cfg, "[limits]\nmax_capability_ttl = \"forever\"\n").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--dev", "--config"])
        .arg(&cfg)
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("limits.max_capability_ttl"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Production mode without a store says which setting is missing.
    let out = Command::new(BIN)
        .args(["serve"])
        .current_dir(&dir)
        .env_remove("TESSERA_STORE_URL")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("store"));
    // An invalid policy stops the start with file:line:col.
    let pol = dir.join("policy");
    std::fs::create_dir_all(&pol).unwrap();
    std::fs::copy(
        policy_dir().join("schema.cedarschema"),
        pol.join("schema.cedarschema"),
    )
    .unwrap();
    std::fs::write(pol.join("entities.json"), "[]").unwrap();
    std::fs::write(
        pol.join("bad.cedar"),
        "permit (principal, action, resource)\nwhen { resource.nosuch == 1 };\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["policy", "check"])
        .arg(&pol)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.cedar:2:"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--addr`/`TESSERA_ADDR` may be `host:port` (read as `http://host:port`, still
/// loopback-only in clear), and an id or name that would change the request's
/// path is refused before any request (issue 15: `--addr 127.0.0.1:8700` was a
/// "builder error"; `runs show '../admin/runtimes'` fetched the runtime list).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_address_may_be_host_port_and_ids_cannot_change_the_path() {
    let broker = start_dev_broker().await;
    let bare = broker.addr.trim_start_matches("http://").to_owned();
    assert_ne!(bare, broker.addr, "the dev broker's address has a scheme");
    for addr in [bare.clone(), bare.replace("127.0.0.1", "localhost")] {
        let out = Command::new(BIN)
            .args(["runtimes", "list", "--addr", &addr])
            .env("TESSERA_ADMIN_TOKEN_FILE", broker.dir.join("admin.token"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{addr}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Not loopback: still refused in clear, before any connection.
    let out = Command::new(BIN)
        .args(["runtimes", "list", "--addr", "192.0.2.10:8700"])
        .env("TESSERA_ADMIN_TOKEN_FILE", broker.dir.join("admin.token"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("in clear"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for id in [
        "../admin/runtimes",
        "x/../../v1/admin/keys",
        "a?b=1",
        "%2e%2e",
    ] {
        let out = cli(&broker, &["runs", "show", id, "--json"]);
        assert!(
            !out.status.success(),
            "{id}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("is not an id or a name"),
            "{id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Log settings that cannot be used stop the broker at start, naming the
/// variable, instead of being ignored; the format's name is case-insensitive
/// (issue 15: `TESSERA_LOG_FORMAT=JSON` and an invalid `TESSERA_LOG` were
/// silently ignored).
#[test]
fn invalid_log_settings_are_errors() {
    let dir = std::env::temp_dir().join(format!("tessera-cli-{}", tessera_broker::ids::new_id()));
    std::fs::create_dir_all(&dir).unwrap();
    let serve = |var: &str, value: &str| {
        let mut child = Command::new(BIN)
            .args(["serve", "--dev", "--listen", "127.0.0.1:0", "--policy-dir"])
            .arg(policy_dir())
            .current_dir(&dir)
            .env(var, value)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{var}={value}: the broker started anyway");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        child.wait_with_output().unwrap()
    };
    for (var, value) in [
        ("TESSERA_LOG", "info,tessera=loudest"),
        ("TESSERA_LOG_FORMAT", "yaml"),
    ] {
        let out = serve(var, value);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {err}");
        assert!(err.contains(var), "{var}={value}: {err}");
    }
    // Not written anywhere by a refused start.
    assert!(!dir.join("tessera-dev.kek").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// An ordinary conflict (a runtime name that exists) is a 409 for the caller,
/// not a warning in the broker's log: operators alert on WARN (issue 15: it
/// logged `WARN write batch failed`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_is_not_a_warning() {
    let broker = start_dev_broker().await;
    let create = || {
        cli(
            &broker,
            &[
                "runtimes",
                "create",
                "twice",
                "--users",
                "*",
                "--task-kinds",
                "*",
            ],
        )
    };
    assert!(create().status.success());
    let out = create();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("409"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::read_to_string(broker.dir.join("broker.log")).unwrap();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("write batch failed"))
        .collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
}
