//! End-to-end test of the real `tessera` binary: `serve --dev` with nothing but an
//! empty folder, the admin CLI against it, and the README's walk-through over HTTP.

#![allow(clippy::unwrap_used)]

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_tessera");

struct Broker {
    child: Child,
    dir: PathBuf,
    addr: String,
    /// Left for a restart ([`Broker::stop`]).
    keep_dir: bool,
}

impl Broker {
    /// SIGTERM, wait for the exit, keep the directory; returns it.
    fn stop(mut self) -> PathBuf {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the broker exits 0 on SIGTERM: {status}");
        self.keep_dir = true;
        self.dir.clone()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn policy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../policy")
}

async fn start_dev_broker() -> Broker {
    let dir = std::env::temp_dir().join(format!("tessera-cli-{}", tessera_broker::ids::new_id()));
    std::fs::create_dir_all(&dir).unwrap();
    start_dev_broker_in(dir, None).await
}

/// `serve --dev` in `dir` (kept: a restart finds its database and KEK), with
/// `config` as its `tessera.toml` when given.
async fn start_dev_broker_in(dir: PathBuf, config: Option<&str>) -> Broker {
    start_dev_broker_with(dir, config, &[]).await
}

/// A dev broker with `env` set (e.g. `TESSERA_FAILPOINTS`).
async fn start_dev_broker_with(dir: PathBuf, config: Option<&str>, env: &[(&str, &str)]) -> Broker {
    start_dev_broker_policy(dir, config, env, &policy_dir()).await
}

/// A dev broker enforcing the policy folder `policy`.
async fn start_dev_broker_policy(
    dir: PathBuf,
    config: Option<&str>,
    env: &[(&str, &str)],
    policy: &Path,
) -> Broker {
    start_dev_broker_under(dir, config, env, policy, &[]).await
}

/// A dev broker started through `wrapper` (a program and its arguments that
/// then run the broker, e.g. `setpriv …`), when not empty.
async fn start_dev_broker_under(
    dir: PathBuf,
    config: Option<&str>,
    env: &[(&str, &str)],
    policy: &Path,
    wrapper: &[&str],
) -> Broker {
    tessera_broker::server::install_crypto_provider();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut cmd = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(BIN);
            c
        }
        None => Command::new(BIN),
    };
    cmd.envs(env.iter().copied());
    cmd.args(["serve", "--dev", "--listen", &addr, "--data-dir"])
        .arg(&dir)
        .arg("--policy-dir")
        .arg(policy);
    if let Some(text) = config {
        std::fs::write(dir.join("tessera.toml"), text).unwrap();
        cmd.arg("--config").arg(dir.join("tessera.toml"));
    }
    let child = cmd
        .current_dir(&dir)
        .env("TESSERA_ADMIN_TOKEN_FILE", dir.join("admin.token"))
        // Everything the broker logs, at the most verbose level, goes to a file
        // that the test then searches for every secret it handled.
        .env("TESSERA_LOG", "trace")
        .stdout(Stdio::null())
        .stderr(Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("broker.log"))
                .unwrap(),
        ))
        .spawn()
        .unwrap();
    let broker = Broker {
        child,
        dir,
        addr: format!("http://{addr}"),
        keep_dir: false,
    };
    for _ in 0..200 {
        if reqwest::get(format!("{}/readyz", broker.addr))
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return broker;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("tessera serve --dev did not become ready");
}

fn cli(broker: &Broker, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .env("TESSERA_ADDR", &broker.addr)
        .env("TESSERA_ADMIN_TOKEN_FILE", broker.dir.join("admin.token"))
        .output()
        .unwrap()
}

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

fn stdout_of(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_cli_reads_the_audit_lists_runs_and_reloads_on_sighup() {
    let broker = start_dev_broker().await;
    let rt: Value = serde_json::from_str(&stdout_of(&cli(
        &broker,
        &["runtimes", "create", "agents", "--json"],
    )))
    .unwrap();
    let key = rt["key"].as_str().unwrap();
    let http = reqwest::Client::new();
    let run: Value = http
        .post(format!("{}/v1/runs", broker.addr))
        .bearer_auth(key)
        .json(
            &json!({ "user": "alice", "task": { "id": "t-7", "kind": "summarize" }, "ttl": "30m" }),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_id = run["run_id"].as_str().unwrap();
    let cap: Value = http
        .post(format!("{}/v1/capabilities", broker.addr))
        .bearer_auth(run["run_token"].as_str().unwrap())
        .json(&json!({ "action": "read", "resource": "svc-reports:reports/2026/q1.csv" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let cap_id = cap["capability_id"].as_str().unwrap();

    // runs list: a table by default, JSON on request.
    let table = stdout_of(&cli(&broker, &["runs", "list"]));
    assert!(table.starts_with("RUN_ID"), "{table}");
    assert!(
        table.contains(run_id) && table.contains("agents"),
        "{table}"
    );
    let listed: Value = serde_json::from_str(&stdout_of(&cli(
        &broker,
        &["runs", "list", "--user", "bob", "--json"],
    )))
    .unwrap();
    assert_eq!(listed["runs"], json!([]));

    let revoked = stdout_of(&cli(&broker, &["capabilities", "revoke", cap_id]));
    assert!(revoked.contains("revoked"), "{revoked}");

    // The run's story, oldest first, one line per row.
    let tail = stdout_of(&cli(&broker, &["audit", "tail", "--run", run_id]));
    let events: Vec<&str> = tail
        .lines()
        .map(|l| l.split_whitespace().nth(2).unwrap())
        .collect();
    assert_eq!(
        events,
        ["run.started", "capability.issued", "capability.revoked"],
        "{tail}"
    );
    assert!(
        tail.contains("user=alice") && tail.contains("task_id=t-7"),
        "{tail}"
    );

    // SIGHUP reloads the policy directory, attributed to the signal.
    let pid = broker.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
    let mut reloaded = String::new();
    for _ in 0..100 {
        reloaded = stdout_of(&cli(
            &broker,
            &["audit", "tail", "--event", "policy.reloaded", "--json"],
        ));
        if !reloaded.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let row: Value = serde_json::from_str(reloaded.lines().next().expect("reloaded")).unwrap();
    assert_eq!(row["actor"], "signal");
    // And on request, from the admin CLI.
    let out = stdout_of(&cli(&broker, &["policy", "reload"]));
    assert!(out.contains("policies in force"), "{out}");
    let admin_reloads = stdout_of(&cli(
        &broker,
        &["audit", "tail", "--event", "policy.reloaded", "--json"],
    ));
    assert!(
        admin_reloads
            .lines()
            .any(|l| l.contains("\"actor\":\"admin\"")),
        "{admin_reloads}"
    );

    // Disabling the runtime ends its open run.
    let disabled = stdout_of(&cli(&broker, &["runtimes", "disable", "agents"]));
    assert!(disabled.contains("ended 1 open runs"), "{disabled}");

    // export: every row, as JSON lines in chain order, linked hash to hash.
    let export = stdout_of(&cli(&broker, &["audit", "export", "--since", "1h"]));
    let rows: Vec<Value> = export
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let verify: Value =
        serde_json::from_str(&stdout_of(&cli(&broker, &["audit", "verify", "--json"]))).unwrap();
    assert_eq!(verify["status"], "chain_intact_no_checkpoints");
    assert_eq!(rows.len() as i64, verify["chain"]["rows"].as_i64().unwrap());
    for pair in rows.windows(2) {
        assert_eq!(pair[1]["prev_hash"], pair[0]["hash"]);
    }
    assert!(rows.iter().any(|r| r["event"] == "runtime.disabled"));
    let none = stdout_of(&cli(
        &broker,
        &[
            "audit",
            "export",
            "--since",
            "2000-01-01T00:00:00Z",
            "--until",
            "2000-01-02T00:00:00Z",
        ],
    ));
    assert!(none.is_empty());

    // Clear errors: a bad argument, a filter the broker rejects, an unknown id.
    let out = cli(&broker, &["audit", "export", "--since", "whenever"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--since"));
    let out = cli(&broker, &["runs", "list", "--state", "bogus"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid_query"));
    let out = cli(&broker, &["capabilities", "revoke", run_id]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("404"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A runtime and a run for alice on a dev broker; returns the run id and the
/// path of a file holding the run token (as a runtime would mount it).
async fn sandbox_run(broker: &Broker) -> (String, PathBuf) {
    let rt: Value = serde_json::from_str(&stdout_of(&cli(
        broker,
        &[
            "runtimes",
            "create",
            &format!("rt-{}", free_port()),
            "--json",
        ],
    )))
    .unwrap();
    let run: Value = reqwest::Client::new()
        .post(format!("{}/v1/runs", broker.addr))
        .bearer_auth(rt["key"].as_str().unwrap())
        .json(
            &json!({ "user": "alice", "task": { "id": "t-1", "kind": "summarize" }, "ttl": "30m" }),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let file = broker.dir.join(format!("run-{}.token", free_port()));
    std::fs::write(&file, run["run_token"].as_str().unwrap()).unwrap();
    // Clients refuse a token file that group or others may read.
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    (run["run_id"].as_str().unwrap().to_owned(), file)
}

fn sandbox_cmd(broker: &Broker, token_file: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.env("TESSERA_ADDR", &broker.addr)
        .env("TESSERA_RUN_TOKEN_FILE", token_file)
        .env("AWS_SECRET_ACCESS_KEY", "parent-secret-aws")
        .env("DATABASE_URL", "postgres://prod-password@db/prod")
        .env("KEEP_ME", "kept");
    c
}

/// The capabilities of a run as `runs show --json` lists them.
fn capabilities_of(broker: &Broker, run_id: &str) -> Vec<Value> {
    let v: Value = serde_json::from_str(&stdout_of(&cli(
        broker,
        &["runs", "show", run_id, "--json"],
    )))
    .unwrap();
    v["capabilities"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_scrubs_the_environment_and_revokes_on_exit() {
    let broker = start_dev_broker().await;
    let (run_id, token_file) = sandbox_run(&broker).await;
    let out = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--token",
            "read=svc-reports:reports/2026/q1.csv",
            "--keep-env",
            "KEEP_ME",
            "--",
            "env",
        ])
        .output()
        .unwrap();
    let env = stdout_of(&out);
    let names: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    assert!(!env.contains("parent-secret-aws"), "{env}");
    assert!(!env.contains("prod-password"), "{env}");
    assert!(
        !names.iter().any(|n| n.starts_with("TESSERA_RUN_TOKEN")),
        "{env}"
    );
    assert!(!env.contains(&std::fs::read_to_string(&token_file).unwrap()));
    assert!(env.contains("KEEP_ME=kept"), "{env}");
    assert!(
        names.contains(&"PATH") && names.contains(&"TESSERA_ACCESS_TOKEN"),
        "{env}"
    );
    // Every capability obtained for the command is revoked once it exited.
    let caps = capabilities_of(&broker, &run_id);
    assert_eq!(caps.len(), 1);
    assert_eq!(caps[0]["state"], "revoked");

    // Exit codes pass through; a denial or a missing command is Tessera's own code.
    let code = |args: &[&str]| {
        sandbox_cmd(&broker, &token_file)
            .args(args)
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(code(&["exec", "--", "sh", "-c", "exit 7"]), Some(7));
    assert_eq!(code(&["exec", "--", "/nonexistent/tool"]), Some(127));
    let denied = sandbox_cmd(&broker, &token_file)
        .args(["exec", "--token", "read=svc-reports:secret/x", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(denied.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&denied.stderr).contains("capability_denied"));
    assert_eq!(
        code(&["exec", "--keep-env", "TESSERA_RUN_TOKEN_FILE", "--", "true"]),
        Some(125)
    );

    // A child killed outright: its exit is 128+9, and the capability is still revoked.
    let killed = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--token",
            "read=svc-reports:reports/2026/q2.csv",
            "--",
            "sh",
            "-c",
            "kill -9 $$",
        ])
        .output()
        .unwrap();
    assert_eq!(killed.status.code(), Some(137));
    let caps = capabilities_of(&broker, &run_id);
    assert!(caps.iter().all(|c| c["state"] == "revoked"), "{caps:?}");
    assert_eq!(caps.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_forwards_signals_and_token_capability_prints_a_token() {
    let broker = start_dev_broker().await;
    let (run_id, token_file) = sandbox_run(&broker).await;
    let marker = broker.dir.join("ready");
    let script = format!(
        "trap 'exit 42' TERM; touch {}; while true; do sleep 0.1; done",
        marker.display()
    );
    let mut child = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--token",
            "read=svc-reports:reports/2026/q3.csv",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .spawn()
        .unwrap();
    for _ in 0..100 {
        if marker.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(marker.exists(), "the command started");
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(42),
        "SIGTERM reached the command's trap"
    );
    assert!(capabilities_of(&broker, &run_id)
        .iter()
        .all(|c| c["state"] == "revoked"));

    let out = sandbox_cmd(&broker, &token_file)
        .args([
            "token",
            "capability",
            "--action",
            "read",
            "--resource",
            "svc-reports:reports/2026/q4.csv",
            "--json",
        ])
        .output()
        .unwrap();
    let v: Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    assert!(v["token"].as_str().unwrap().starts_with("eyJ"));
    let caps = capabilities_of(&broker, &run_id);
    assert!(caps
        .iter()
        .any(|c| c["capability_id"] == v["capability_id"] && c["state"] == "active"));
    // Without a run token file it says what is missing.
    let out = Command::new(BIN)
        .args([
            "token",
            "capability",
            "--action",
            "read",
            "--resource",
            "svc-reports:x",
        ])
        .env("TESSERA_ADDR", &broker.addr)
        .env_remove("TESSERA_RUN_TOKEN_FILE")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("TESSERA_RUN_TOKEN_FILE"));
}

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

/// A loopback listener that counts the connections it gets; each one is
/// answered `response` (raw HTTP) and closed.
async fn counting_listener(
    response: String,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let response = response.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let _ = sock.write_all(response.as_bytes()).await;
            });
        }
    });
    (port, seen)
}

type Counter = std::sync::Arc<std::sync::atomic::AtomicUsize>;

/// A loopback proxy that answers 502 and counts who reached it, and the proxy
/// variables (sandboxes often set them) that name it.
async fn counting_proxy() -> (Vec<(&'static str, String)>, Counter) {
    let (port, seen) =
        counting_listener("HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n".into()).await;
    let url = format!("http://127.0.0.1:{port}");
    let vars = [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "all_proxy",
    ]
    .into_iter()
    .map(|v| (v, url.clone()))
    .collect();
    (vars, seen)
}

/// A loopback address that answers 307 to `path` on a second listener, and
/// that listener's count (a followed redirect would reach it).
async fn redirect_to(path: &str) -> (String, Counter) {
    let (target, targeted) =
        counting_listener("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".into()).await;
    let (redirector, _) = counting_listener(format!(
        "HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:{target}{path}\r\ncontent-length: 0\r\n\r\n"
    ))
    .await;
    (format!("http://127.0.0.1:{redirector}"), targeted)
}

/// Client commands send the run token only to the broker, never through a
/// proxy the environment names, never to where a redirect points, and never in
/// clear to a host off this machine (issue 22, items 6–8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_send_the_token_to_the_broker_only() {
    let broker = start_dev_broker().await;
    let (_run_id, token_file) = sandbox_run(&broker).await;
    let capability = |cmd: &mut Command| {
        cmd.args([
            "token",
            "capability",
            "--action",
            "read",
            "--resource",
            "svc-reports:reports/2026/q4.csv",
            "--json",
        ])
        .output()
        .unwrap()
    };

    // Proxy variables, as sandboxes often set them: not used for the broker.
    let (vars, proxied) = counting_proxy().await;
    let mut cmd = sandbox_cmd(&broker, &token_file);
    cmd.envs(vars).env_remove("NO_PROXY").env_remove("no_proxy");
    let out = capability(&mut cmd);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        proxied.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the proxy saw a request"
    );

    // A redirect is not followed: the capability request is not re-sent.
    let (redirector, targeted) = redirect_to("/v1/capabilities").await;
    let out = capability(sandbox_cmd(&broker, &token_file).env("TESSERA_ADDR", &redirector));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("redirect"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        targeted.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the redirect was followed"
    );

    // http:// to a host off this machine is refused before any connection
    // (the address is never contacted: the client refuses while it is built).
    let out =
        capability(sandbox_cmd(&broker, &token_file).env("TESSERA_ADDR", "http://192.0.2.10:8700"));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("in clear") && err.contains("TESSERA_INSECURE_HTTP"),
        "{err}"
    );
    // A CA file with an http:// address is a mistake, said as such.
    let out = capability(sandbox_cmd(&broker, &token_file).env("TESSERA_CA_FILE", &token_file));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("TESSERA_CA_FILE"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

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

/// The audit rows of one event, through the admin CLI.
fn broker_audit(broker: &Broker, event: &str) -> Vec<Value> {
    let out = stdout_of(&cli(broker, &["audit", "tail", "--event", event, "--json"]));
    out.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The command `exec` runs, as an unprivileged user (the test is root, and root
/// may read any process), hunts the run token in every place a process of the
/// same user could look — the parent's `environ`, `cmdline`, `mem` and open
/// descriptors, its own descriptors and environment — in the file, descriptor
/// and environment modes, and finds neither the token nor the token file's
/// path (issue 22, items 1 and 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_keeps_the_run_token_from_the_command() {
    let broker = start_dev_broker().await;
    let (_run_id, token_file) = sandbox_run(&broker).await;
    let token = std::fs::read_to_string(&token_file).unwrap();
    // exec runs as nobody and reads the file in the file mode.
    std::os::unix::fs::chown(&token_file, Some(65534), Some(65534)).unwrap();
    let hunt = r#"p=$PPID
        cat /proc/$p/environ; echo; cat /proc/$p/cmdline; echo
        ls -l /proc/$p/fd/; for f in /proc/$p/fd/*; do head -c 4096 "$f"; done
        head -c 65536 /proc/$p/mem; cat /proc/$p/maps
        env; ls -l /proc/self/fd/
        for f in /proc/self/fd/*; do case "$f" in */0|*/1|*/2) ;; *) head -c 4096 "$f";; esac; done
        echo hunted"#;
    let as_nobody = [
        "setpriv",
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
        "--",
    ];
    let modes: [(&str, Vec<(&str, String)>); 3] = [
        (
            "file",
            vec![("TESSERA_RUN_TOKEN_FILE", token_file.display().to_string())],
        ),
        ("descriptor", vec![("TESSERA_RUN_TOKEN_FD", "3".to_owned())]),
        (
            "environment",
            vec![
                ("TESSERA_RUN_TOKEN", token.trim().to_owned()),
                ("TESSERA_ALLOW_TOKEN_ENV", "1".to_owned()),
            ],
        ),
    ];
    for (mode, vars) in modes {
        // sh opens the token file on descriptor 3 for the descriptor mode.
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"exec "$@" 3<"$TOKEN_FILE""#)
            .arg("sh")
            .args(as_nobody)
            .args([BIN, "exec", "--", "sh", "-c", hunt])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("TOKEN_FILE", &token_file)
            .env("TESSERA_ADDR", &broker.addr);
        for (k, v) in &vars {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stdout.contains("hunted"),
            "{mode}: the hunt did not run: {stdout}{stderr}"
        );
        let seen = format!("{stdout}{stderr}");
        assert!(
            !seen.contains(token.trim()),
            "{mode}: the command found the run token:\n{seen}"
        );
        assert!(
            !seen.contains(&token_file.display().to_string()),
            "{mode}: the command found the token file's path:\n{seen}"
        );
    }
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

/// On a terminal, the command's own process group is made the foreground
/// group for its life (an interactive tool reads the terminal instead of being
/// stopped by SIGTTIN) and `exec` takes the terminal back after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_hands_the_terminal_to_the_command() {
    let broker = start_dev_broker().await;
    let (_run_id, token_file) = sandbox_run(&broker).await;
    // script(1) runs the line on a new pseudo-terminal, fed from its stdin.
    let line = format!(
        "{BIN} exec --token read=svc-reports:reports/2026/q3.csv -- sh -c 'read x; echo got:$x'; \
         echo back:$(ps -o stat= -p $$)"
    );
    let mut child = Command::new("timeout")
        .args(["20", "script", "-qec", &line, "/dev/null"])
        .env("TESSERA_ADDR", &broker.addr)
        .env("TESSERA_RUN_TOKEN_FILE", &token_file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"typed\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{:?} {text}", out.status);
    assert!(text.contains("got:typed"), "{text}");
    // ps marks a process of the terminal's foreground group with `+`.
    let back = text.split("back:").nth(1).unwrap_or_default();
    assert!(
        back.trim().contains('+'),
        "the shell has its terminal back: {text}"
    );
}

/// What the client library warns about reaches the sandbox command's stderr
/// (there was no subscriber: the warning was dropped), and a token file that
/// others may read is refused with the fix (issue 22, item 8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_commands_warn_on_stderr_and_refuse_a_shared_token_file() {
    let broker = start_dev_broker().await;
    let (_run_id, token_file) = sandbox_run(&broker).await;
    let token = std::fs::read_to_string(&token_file).unwrap();
    let out = Command::new(BIN)
        .args(["exec", "--", "true"])
        .env("TESSERA_ADDR", &broker.addr)
        .env("TESSERA_RUN_TOKEN", token.trim())
        .env("TESSERA_ALLOW_TOKEN_ENV", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("WARN") && stderr.contains("TESSERA_RUN_TOKEN"),
        "{stderr:?}"
    );
    assert!(!stderr.contains(token.trim()));

    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    for args in [
        &["exec", "--", "true"][..],
        &[
            "token",
            "capability",
            "--action",
            "read",
            "--resource",
            "svc-reports:a",
        ][..],
    ] {
        let out = sandbox_cmd(&broker, &token_file)
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            stderr.contains("mode 644") && stderr.contains("chmod 600"),
            "{stderr}"
        );
    }
}

/// The safe mode for a hostile command: `exec` runs as root and starts the
/// command as another user (`--user nobody`). Told the token file's path, the
/// command still cannot read it (0600, root's), cannot read `exec`'s `/proc`
/// entries, and cannot kill or stop `exec` (another user's process): `exec`
/// outlives it and revokes (issue 22, items 1 and 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_as_root_runs_the_command_as_another_user() {
    let broker = start_dev_broker().await;
    let (run_id, token_file) = sandbox_run(&broker).await;
    let token = std::fs::read_to_string(&token_file).unwrap();
    let hostile = r#"id -u; cat "$0"; cat /proc/$PPID/environ
        kill -9 $PPID && echo killed; kill -STOP $PPID && echo stopped
        echo "home=$HOME user=$USER"; exit 7"#;
    let out = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--user",
            "nobody",
            "--token",
            "read=svc-reports:reports/2026/q1.csv",
        ])
        .args(["--", "sh", "-c", hostile])
        .arg(&token_file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seen = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        out.status.code(),
        Some(7),
        "exec outlived the command: {seen}"
    );
    assert!(stdout.starts_with("65534\n"), "{seen}");
    assert!(
        !seen.contains(token.trim()),
        "the command read the token: {seen}"
    );
    assert!(
        !stdout.contains("killed") && !stdout.contains("stopped"),
        "{seen}"
    );
    assert!(stdout.contains("home=/nonexistent user=nobody"), "{seen}");
    let caps = capabilities_of(&broker, &run_id);
    assert!(caps.iter().all(|c| c["state"] == "revoked"), "{caps:?}");

    // A token file that user owns: the command could read it; refused.
    std::os::unix::fs::chown(&token_file, Some(65534), None).unwrap();
    let out = sandbox_cmd(&broker, &token_file)
        .args(["exec", "--user", "nobody", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("belongs to that user"));
    std::os::unix::fs::chown(&token_file, Some(0), None).unwrap();

    // On root's terminal, the command has no controlling terminal: it cannot
    // push input into root's shell (TIOCSTI), nor is it in root's session.
    let inject = broker.dir.join("inject.py");
    std::fs::write(
        &inject,
        "import fcntl, termios\ntry:\n    fcntl.ioctl(0, termios.TIOCSTI, b'x')\n    print('injected')\n\
         except OSError as e:\n    print('refused', e.errno)\n",
    )
    .unwrap();
    for (user, expect) in [("--user nobody", "refused"), ("", "injected")] {
        let line = format!("{BIN} exec {user} -- python3 {}", inject.display());
        let out = Command::new("timeout")
            .args(["20", "script", "-qec", &line, "/dev/null"])
            .env("TESSERA_ADDR", &broker.addr)
            .env("TESSERA_RUN_TOKEN_FILE", &token_file)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(expect), "{user:?}: {text}");
    }

    // Only root may switch users, and never to root.
    for user in ["root", "0", "no-such-user-here"] {
        let out = sandbox_cmd(&broker, &token_file)
            .args(["exec", "--user", user, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "--user {user}");
    }
}

/// The admin commands hold the admin token, worth more than any run token:
/// they too ignore proxy variables, follow no redirect and refuse `http://`
/// to a host off this machine before any connection (the test saw the proxy
/// get `runtimes list` with the admin token, and the redirect followed, first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_commands_send_the_admin_token_to_the_broker_only() {
    let broker = start_dev_broker().await;
    let admin = |addr: &str, env: &[(&str, String)]| {
        let mut cmd = Command::new(BIN);
        cmd.args(["runtimes", "list", "--json"])
            .env("TESSERA_ADDR", addr)
            .env("TESSERA_ADMIN_TOKEN_FILE", broker.dir.join("admin.token"))
            .env_remove("NO_PROXY")
            .env_remove("no_proxy");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let (vars, proxied) = counting_proxy().await;
    let out = admin(&broker.addr, &vars);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        proxied.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the proxy saw the admin token"
    );

    let (redirector, targeted) = redirect_to("/v1/admin/runtimes").await;
    let out = admin(&redirector, &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("redirect"));
    assert_eq!(
        targeted.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the redirect was followed"
    );

    let out = admin("http://192.0.2.10:8700", &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in clear"), "{err}");
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

/// `runtimes list` says which runtimes are disabled, and `runs show` lists the
/// run's leases as well as its capabilities (issue 15: a disabled runtime read
/// as live; leases were not shown).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_show_states_and_leases() {
    let broker = start_dev_broker().await;
    assert!(cli(
        &broker,
        &[
            "runtimes",
            "create",
            "gone",
            "--users",
            "*",
            "--task-kinds",
            "*"
        ]
    )
    .status
    .success());
    assert!(cli(&broker, &["runtimes", "disable", "gone"])
        .status
        .success());
    let list = stdout_of(&cli(&broker, &["runtimes", "list"]));
    let header = list.lines().next().unwrap_or_default();
    assert!(header.contains("DISABLED_AT"), "{list}");
    let row = list
        .lines()
        .find(|l| l.starts_with("gone "))
        .expect("the runtime's row");
    assert!(
        !row.trim_end().ends_with('-'),
        "disabled_at is shown: {list}"
    );

    let (run_id, token_file) = sandbox_run(&broker).await;
    let out = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--token",
            "read=svc-reports:reports/2026/q1.csv",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = stdout_of(&cli(&broker, &["runs", "show", &run_id]));
    assert!(shown.contains("LEASE_ID"), "{shown}");
}

/// `runs list` pages: with more runs than `--limit`, it says how to ask for the
/// next page (on stderr, so stdout stays the table), and `--after` asks for it
/// (issue 15: the API returned `next_cursor` but the CLI had no way to use it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_list_pages() {
    let broker = start_dev_broker().await;
    let (first, _) = sandbox_run(&broker).await;
    let (second, _) = sandbox_run(&broker).await;
    let out = cli(&broker, &["runs", "list", "--limit", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page1 = stdout_of(&out);
    assert!(
        page1.contains(&first) && !page1.contains(&second),
        "{page1}"
    );
    let hint = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(hint.contains(&format!("--after {first}")), "{hint}");
    let out = cli(
        &broker,
        &["runs", "list", "--limit", "1", "--after", &first],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page2 = stdout_of(&out);
    assert!(
        page2.contains(&second) && !page2.contains(&first),
        "{page2}"
    );
}

/// `tessera exec` asks for a capability that needs a human, says so on stderr
/// and waits; `tessera approvals` shows the arguments and an approver key (not
/// the admin token) approves; the command then runs with the access token,
/// whose `args` claim is the hash of the arguments it was approved for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_waits_for_an_approval_that_the_cli_gives() {
    let broker = start_dev_broker().await;
    let rt: Value = serde_json::from_str(&stdout_of(&cli(
        &broker,
        &["runtimes", "create", "deploy-rt", "--json"],
    )))
    .unwrap();
    let run: Value = reqwest::Client::new()
        .post(format!("{}/v1/runs", broker.addr))
        .bearer_auth(rt["key"].as_str().unwrap())
        .json(&json!({ "user": "bob", "task": { "id": "deploy-42", "kind": "deploy" }, "ttl": "30m" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token_file = broker.dir.join("bob.token");
    std::fs::write(&token_file, run["run_token"].as_str().unwrap()).unwrap();
    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();

    let made: Value = serde_json::from_str(&stdout_of(&cli(
        &broker,
        &[
            "approvers",
            "create",
            "dana-laptop",
            "--user",
            "dana",
            "--json",
        ],
    )))
    .unwrap();
    let key_file = broker.dir.join("dana.key");
    std::fs::write(&key_file, made["key"].as_str().unwrap()).unwrap();
    let listed = stdout_of(&cli(&broker, &["approvers", "list"]));
    assert!(
        listed.contains("dana-laptop") && !listed.contains("tsr_apr_"),
        "{listed}"
    );

    let args = r#"{"service":"web","commit":"4f2a9c1","environment":"staging"}"#;
    let out_file = broker.dir.join("claims.txt");
    let mut exec = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--token",
            "invoke=deployer:prod/web",
            "--arguments",
            args,
            "--approval-wait",
            "60s",
            "--",
            "sh",
            "-c",
        ])
        .arg(format!(
            "printf %s \"$TESSERA_ACCESS_TOKEN\" > {}",
            out_file.display()
        ))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let mut id = String::new();
    for _ in 0..100 {
        let v: Value =
            serde_json::from_str(&stdout_of(&cli(&broker, &["approvals", "list", "--json"])))
                .unwrap();
        if let Some(a) = v["approvals"].as_array().and_then(|a| a.first()) {
            id = a["approval_id"].as_str().unwrap().to_owned();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!id.is_empty(), "exec opened no approval");
    // The admin token can show and deny, never approve.
    let refused = cli(&broker, &["approvals", "approve", &id]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("needs an approver key"));
    let with_key = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env("TESSERA_ADDR", &broker.addr)
            .env("TESSERA_APPROVER_KEY_FILE", &key_file)
            .output()
            .unwrap()
    };
    let shown = stdout_of(&with_key(&["approvals", "show", &id]));
    assert!(
        shown.contains("\"commit\": \"4f2a9c1\"") && shown.contains("user bob"),
        "{shown}"
    );
    let approved = with_key(&["approvals", "approve", &id, "--comment", "matches CHG-42"]);
    assert!(
        approved.status.success(),
        "{}",
        String::from_utf8_lossy(&approved.stderr)
    );

    let status = exec.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(exec.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "approval {id} for invoke on deployer:prod/web is pending"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("is approved"), "{stderr}");
    // The downstream token is bound to exactly these arguments.
    let token = std::fs::read_to_string(&out_file).unwrap();
    let payload = token.split('.').nth(1).unwrap();
    use base64::Engine;
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap();
    let want = tessera_client::arguments::hash(&serde_json::from_str(args).unwrap()).unwrap();
    assert_eq!(claims["args"], want.as_str());
    assert_eq!(
        broker_audit(&broker, "approval.approved")[0]["actor"],
        "approver:dana-laptop"
    );
}

/// A loopback HTTP server answering `hello PATH` to every request, counting
/// the connections it accepted.
fn hello_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 8192];
            let n = s.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).into_owned();
            let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
            let body = format!("hello {path}");
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, count)
}

/// `exec --egress`: the command reaches what policy permits through the
/// gateway, holds only a per-exec proxy credential (never the run token), and
/// is refused elsewhere; with `--isolate-net` a command that ignores the proxy
/// variables reaches nothing, while through the gateway it still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_egress_goes_through_the_gateway_and_isolate_net_leaves_no_other_way() {
    let (up_port, connections) = hello_server();
    let dir = std::env::temp_dir().join(format!("tessera-cli-{}", tessera_broker::ids::new_id()));
    let policy = dir.join("policy");
    std::fs::create_dir_all(&policy).unwrap();
    for entry in std::fs::read_dir(policy_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, policy.join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(
        policy.join("egress-test.cedar"),
        format!(
            "@id(\"egress-test-hello\")\n@allow_addresses(\"127.0.0.0/8\")\n\
             permit (principal == Tessera::User::\"alice\", action == Tessera::Action::\"connect\", resource)\n\
             when {{ resource.kind == \"net\" && resource.path == \"127.0.0.1:{up_port}\" }};\n"
        ),
    )
    .unwrap();
    let gateway = format!("127.0.0.1:{}", free_port());
    let config = format!("[backends.net]\nkind = \"net\"\n\n[gateway]\nlisten = \"{gateway}\"\n");
    let broker = start_dev_broker_policy(dir.clone(), Some(&config), &[], &policy).await;
    let (run_id, token_file) = sandbox_run(&broker).await;
    let token = std::fs::read_to_string(&token_file).unwrap();

    let script = format!(
        "curl -sS --max-time 10 http://127.0.0.1:{up_port}/through; echo; \
         curl -sS --max-time 10 -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{other}/elsewhere; echo; \
         env"
    , other = free_port());
    let out = sandbox_cmd(&broker, &token_file)
        .args(["exec", "--egress", &gateway, "--", "sh", "-c", &script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("hello /through"), "{text}");
    assert_eq!(
        lines.next(),
        Some("403"),
        "a destination outside policy: {text}"
    );
    assert!(text.contains("http_proxy=http://tessera:tsr_px_"), "{text}");
    assert!(
        !text.contains(token.trim()),
        "the command never sees the run token"
    );
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 1);
    let allowed: Vec<Value> = broker_audit(&broker, "egress.allowed")
        .into_iter()
        .filter(|r| r["run_id"] == run_id.as_str())
        .collect();
    assert_eq!(allowed.len(), 1, "{allowed:?}");
    assert!(!broker_audit(&broker, "egress.denied").is_empty());

    // --isolate-net: only the gateway is reachable.
    let script = format!(
        "curl -sS --max-time 5 --noproxy '*' http://127.0.0.1:{up_port}/direct; echo \" direct=$?\"; \
         curl -sS --max-time 10 http://127.0.0.1:{up_port}/isolated; echo"
    );
    // Root in the namespace could join another one: the command must be another user.
    let out = sandbox_cmd(&broker, &token_file)
        .args(["exec", "--egress", &gateway, "--isolate-net", "--", "true"])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "--isolate-net without --user is refused"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("--user"));
    let out = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--egress",
            &gateway,
            "--isolate-net",
            "--user",
            "nobody",
            "--",
        ])
        .args(["sh", "-c", &script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(" direct=7"),
        "a direct connection fails to connect: {text}"
    );
    assert!(
        text.contains("hello /isolated"),
        "through the gateway it works: {text}"
    );
    let script = "nsenter --net=/proc/1/ns/net true && echo escaped; \
                  grep NoNewPrivs /proc/self/status; id -u";
    let out = sandbox_cmd(&broker, &token_file)
        .args([
            "exec",
            "--egress",
            &gateway,
            "--isolate-net",
            "--user",
            "nobody",
            "--",
        ])
        .args(["sh", "-c", script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        !text.contains("escaped"),
        "the command cannot leave the namespace: {text}"
    );
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    assert_ne!(text.lines().last(), Some("0"), "not root: {text}");
    assert_eq!(
        connections.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "the direct attempt never reached the server"
    );
}

/// `exec --egress` when the gateway holds a connection for an approval: the
/// relay says so on stderr, waits (`--approval-wait`) while an approver key
/// approves it, then sends the identical request again, which passes once; the
/// command only ever sees the answer to the request that passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_egress_shows_and_waits_for_a_gateway_approval() {
    let (up_port, connections) = hello_server();
    let dir = std::env::temp_dir().join(format!("tessera-cli-{}", tessera_broker::ids::new_id()));
    let policy = dir.join("policy");
    std::fs::create_dir_all(&policy).unwrap();
    for entry in std::fs::read_dir(policy_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, policy.join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(
        policy.join("egress-gated.cedar"),
        format!(
            "@id(\"egress-test-gated\")\n@approval(\"group:release-managers\")\n\
             @allow_addresses(\"127.0.0.0/8\")\n\
             permit (principal == Tessera::User::\"alice\", action == Tessera::Action::\"connect\", resource)\n\
             when {{ resource.kind == \"net\" && resource.path == \"127.0.0.1:{up_port}\" }};\n"
        ),
    )
    .unwrap();
    let gateway = format!("127.0.0.1:{}", free_port());
    let config = format!("[backends.net]\nkind = \"net\"\n\n[gateway]\nlisten = \"{gateway}\"\n");
    let broker = start_dev_broker_policy(dir.clone(), Some(&config), &[], &policy).await;
    let (_, token_file) = sandbox_run(&broker).await;
    let made: Value = serde_json::from_str(&stdout_of(&cli(
        &broker,
        &[
            "approvers",
            "create",
            "erin-laptop",
            "--user",
            "erin",
            "--json",
        ],
    )))
    .unwrap();
    let key = made["key"].as_str().unwrap().to_owned();

    let exec = sandbox_cmd(&broker, &token_file)
        .args(["exec", "--egress", &gateway, "--approval-wait", "60s", "--"])
        .args(["curl", "-sS", "--max-time", "90"])
        .arg(format!("http://127.0.0.1:{up_port}/gated"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut id = String::new();
    for _ in 0..200 {
        let v: Value =
            serde_json::from_str(&stdout_of(&cli(&broker, &["approvals", "list", "--json"])))
                .unwrap();
        if let Some(a) = v["approvals"].as_array().and_then(|a| a.first()) {
            id = a["approval_id"].as_str().unwrap().to_owned();
            assert_eq!(a["action"], "connect", "{a}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!id.is_empty(), "the gateway opened no approval");
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 0);
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/approvals/{id}/approve", broker.addr))
        .bearer_auth(&key)
        .json(&json!({"comment": "one fetch"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let out = exec.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout} {stderr}");
    assert_eq!(stdout.trim(), "hello /gated", "{stderr}");
    assert!(
        stderr.contains(&format!(
            "holds GET http://127.0.0.1:{up_port}/gated for approval {id}"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("is approved"), "{stderr}");
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 1);

    // Without waiting (0s) the command gets the refusal with the approval named.
    let out = sandbox_cmd(&broker, &token_file)
        .args(["exec", "--egress", &gateway, "--approval-wait", "0s", "--"])
        .args(["curl", "-sS", "-D", "-", "-o", "/dev/null"])
        .arg(format!("http://127.0.0.1:{up_port}/gated"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(
        stdout.starts_with("http/1.1 403"),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("tessera-approval-id: "), "{stdout}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("for approval"));
    // A body that is still coming flows while the relay reads the answer: a
    // gated upload is answered (once the gateway read it), not left hanging.
    let upload = dir.join("upload.bin");
    std::fs::write(&upload, vec![b'x'; 256 * 1024]).unwrap();
    let out = sandbox_cmd(&broker, &token_file)
        .args(["exec", "--egress", &gateway, "--approval-wait", "60s", "--"])
        .args([
            "curl",
            "-sS",
            "--max-time",
            "30",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .arg("--data-binary")
        .arg(format!("@{}", upload.display()))
        .arg(format!("http://127.0.0.1:{up_port}/upload"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "403", "{stderr}");
    assert!(stderr.contains("holds POST http://127.0.0.1:"), "{stderr}");
    assert!(
        !stderr.contains("is approved"),
        "an upload is not resent: {stderr}"
    );
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// The credential-injection example (`examples/injection/`) as shipped: its
/// configuration and policy load, `exec --egress` gives the command the run's CA
/// bundle and the placeholder in `GITHUB_TOKEN`, and the token the broker holds
/// is in neither the command's environment nor the broker's trace log. (No
/// request goes to api.github.com: tests send nothing off loopback.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_injection_example_runs_as_documented() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/injection");
    let dir = std::env::temp_dir().join(format!("tessera-cli-{}", tessera_broker::ids::new_id()));
    let policy = dir.join("policy");
    std::fs::create_dir_all(&policy).unwrap();
    for f in ["schema.cedarschema", "entities.json"] {
        std::fs::copy(policy_dir().join(f), policy.join(f)).unwrap();
    }
    std::fs::copy(example.join("github.cedar"), policy.join("github.cedar")).unwrap();
    let gateway = format!("127.0.0.1:{}", free_port());
    let config = std::fs::read_to_string(example.join("tessera.toml"))
        .unwrap()
        .replace("127.0.0.1:8701", &gateway);
    let secret = "ghp_example0secret0never0shown0anywhere";
    let broker = start_dev_broker_policy(
        dir.clone(),
        Some(&config),
        &[("GITHUB_TOKEN", secret)],
        &policy,
    )
    .await;
    let (_, token_file) = sandbox_run(&broker).await;
    let script = "echo \"token=$GITHUB_TOKEN\"; echo \"bundle=$REQUESTS_CA_BUNDLE\"; \
                  grep -c 'BEGIN CERTIFICATE' \"$SSL_CERT_FILE\"; \
                  for v in CURL_CA_BUNDLE NODE_EXTRA_CA_CERTS AWS_CA_BUNDLE; do printenv $v; done; env";
    let out = sandbox_cmd(&broker, &token_file)
        .args(["exec", "--egress", &gateway, "--", "sh", "-c", script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("token=tsr_ph_"), "{text}");
    let bundle = text
        .lines()
        .find_map(|l| l.strip_prefix("bundle="))
        .unwrap()
        .to_owned();
    assert!(bundle.ends_with("ca-bundle.pem"), "{text}");
    assert_eq!(
        text.lines().filter(|l| *l == bundle).count(),
        3,
        "every TLS stack's variable names the bundle: {text}"
    );
    assert!(!text.contains(secret), "{text}");
    assert!(
        !Path::new(&bundle).exists(),
        "the bundle's folder is removed when exec ends"
    );
    let log = std::fs::read_to_string(dir.join("broker.log")).unwrap();
    assert!(
        !log.contains(secret),
        "the rule's secret is in the broker's log"
    );
}

/// Each thread of `pid` (a thread that ends while they are read is left
/// out): its name and nice value.
fn thread_nices(pid: u32) -> Vec<(String, i32)> {
    let mut threads = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(task.join("comm")),
            std::fs::read_to_string(task.join("stat")),
        ) else {
            continue;
        };
        threads.push((comm.trim_end().to_owned(), nice_in(&stat)));
    }
    threads
}

/// The nice value in a `/proc/…/stat` line: after the parenthesised
/// command, state is field 3 and nice field 19.
fn nice_in(stat: &str) -> i32 {
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split(' ').nth(16).unwrap().parse().unwrap()
}

/// What `tessera_store_writer_nice` says.
async fn writer_nice_metric(broker: &Broker) -> i32 {
    let metrics = reqwest::get(format!("{}/metrics", broker.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("tessera_store_writer_nice "))
        .unwrap_or_else(|| panic!("no writer nice in {metrics}"))
        .parse()
        .unwrap()
}

/// The writer's nice value in `broker`, after checking that every other
/// thread runs at the main thread's nice value, that the writer runs at
/// `expected(that value)`, and that the log and `/metrics` say what it runs at.
async fn writer_runs(broker: &Broker, expected: impl Fn(i32) -> i32) -> i32 {
    let pid = broker.child.id();
    let threads = thread_nices(pid);
    let others = nice_in(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap());
    let writer: Vec<i32> = threads
        .iter()
        .filter(|(name, _)| name == "tessera-writer")
        .map(|&(_, nice)| nice)
        .collect();
    assert_eq!(writer, [expected(others)], "{threads:?}");
    assert!(
        threads
            .iter()
            .all(|(name, nice)| name == "tessera-writer" || *nice == others),
        "a thread besides the writer moved: {threads:?}"
    );
    let log = std::fs::read_to_string(broker.dir.join("broker.log")).unwrap();
    let said = if writer[0] < others {
        "the store writer runs above the request threads"
    } else {
        "the store writer runs at the request threads' priority"
    };
    assert!(log.contains(said), "the log does not say '{said}'");
    assert_eq!(writer_nice_metric(broker).await, writer[0]);
    writer[0]
}

/// The store writer (the one thread every commit goes through) runs ten nice
/// steps above the broker's other threads when the system allows it, as far
/// as `RLIMIT_NICE` allows when that is less, and at their priority when
/// nothing is allowed; the log and `/metrics` say which (issue 20). The
/// broker is started with the test's privileges (root in CI: CAP_SYS_NICE,
/// required there) and writes before its threads are read; then, as root
/// only, without CAP_SYS_NICE and with RLIMIT_NICE 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_runs_above_the_request_threads_where_allowed_and_says_so() {
    use tessera_broker::store::priority::{raise_current_thread, Priority, WRITER_BOOST};
    let allowed = std::thread::spawn(|| raise_current_thread(WRITER_BOOST))
        .join()
        .unwrap();
    // As many steps as a thread of the test could take: the broker has the
    // same privileges.
    let steps = match allowed {
        Priority::Raised { from, to } => from - to,
        _ => 0,
    };
    let root = nix::unistd::geteuid().is_root();
    if std::env::var_os("CI").is_some() && root {
        assert_eq!(
            steps, WRITER_BOOST,
            "CI runs as root, where the whole raise is allowed: {allowed:?}"
        );
    }
    let new_dir = || {
        let dir =
            std::env::temp_dir().join(format!("tessera-cli-{}", tessera_broker::ids::new_id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    };
    let broker = start_dev_broker_in(new_dir(), None).await;
    // Writes first: a thread the writer started would have its nice value.
    sandbox_run(&broker).await;
    writer_runs(&broker, |others| others - steps).await;
    drop(broker);
    if !root {
        eprintln!("not root: the broker without CAP_SYS_NICE is not started ({allowed:?})");
        return;
    }

    // Without CAP_SYS_NICE and with RLIMIT_NICE 0: refused. (A partial
    // raise under an RLIMIT_NICE between 21 and 29 is not started here: this
    // sandbox has no CAP_SYS_RESOURCE to raise the hard limit with.)
    let broker = start_dev_broker_under(
        new_dir(),
        None,
        &[],
        &policy_dir(),
        &[
            "prlimit",
            "--nice=0:0",
            "--",
            "setpriv",
            "--bounding-set=-sys_nice",
            "--inh-caps=-sys_nice",
            "--",
        ],
    )
    .await;
    writer_runs(&broker, |others| others).await;
    // Slower, not broken: a run is still committed through the writer.
    let (run_id, _) = sandbox_run(&broker).await;
    assert!(!run_id.is_empty());
}
