//! What every family of these tests shares: a dev broker started from the real
//! `tessera` binary in a folder of its own ([`Broker`], `start_dev_broker*`), the
//! admin CLI against it ([`cli`], [`stdout_of`], [`broker_audit`]), a run whose
//! token a sandbox command reads ([`sandbox_run`], [`sandbox_cmd`],
//! [`capabilities_of`]), and loopback listeners that count who reached them
//! ([`counting_proxy`], [`redirect_to`]) for the tests that check where a token
//! may be sent. Helpers only one family uses live in that family's module.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_tessera");

pub struct Broker {
    pub child: Child,
    pub dir: PathBuf,
    pub addr: String,
    /// Left for a restart ([`Broker::stop`]).
    keep_dir: bool,
}

impl Broker {
    /// SIGTERM, wait for the exit, keep the directory; returns it.
    pub fn stop(mut self) -> PathBuf {
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

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn policy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../policy")
}

pub async fn start_dev_broker() -> Broker {
    let dir = std::env::temp_dir().join(format!("tessera-cli-{}", tessera_broker::ids::new_id()));
    std::fs::create_dir_all(&dir).unwrap();
    start_dev_broker_in(dir, None).await
}

/// `serve --dev` in `dir` (kept: a restart finds its database and KEK), with
/// `config` as its `tessera.toml` when given.
pub async fn start_dev_broker_in(dir: PathBuf, config: Option<&str>) -> Broker {
    start_dev_broker_with(dir, config, &[]).await
}

/// A dev broker with `env` set (e.g. `TESSERA_FAILPOINTS`).
pub async fn start_dev_broker_with(
    dir: PathBuf,
    config: Option<&str>,
    env: &[(&str, &str)],
) -> Broker {
    start_dev_broker_policy(dir, config, env, &policy_dir()).await
}

/// A dev broker enforcing the policy folder `policy`.
pub async fn start_dev_broker_policy(
    dir: PathBuf,
    config: Option<&str>,
    env: &[(&str, &str)],
    policy: &Path,
) -> Broker {
    start_dev_broker_under(dir, config, env, policy, &[]).await
}

/// A dev broker started through `wrapper` (a program and its arguments that
/// then run the broker, e.g. `setpriv …`), when not empty.
pub async fn start_dev_broker_under(
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

pub fn cli(broker: &Broker, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .env("TESSERA_ADDR", &broker.addr)
        .env("TESSERA_ADMIN_TOKEN_FILE", broker.dir.join("admin.token"))
        .output()
        .unwrap()
}

pub fn stdout_of(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A runtime and a run for alice on a dev broker; returns the run id and the
/// path of a file holding the run token (as a runtime would mount it).
pub async fn sandbox_run(broker: &Broker) -> (String, PathBuf) {
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

pub fn sandbox_cmd(broker: &Broker, token_file: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.env("TESSERA_ADDR", &broker.addr)
        .env("TESSERA_RUN_TOKEN_FILE", token_file)
        .env("AWS_SECRET_ACCESS_KEY", "parent-secret-aws")
        .env("DATABASE_URL", "postgres://prod-password@db/prod")
        .env("KEEP_ME", "kept");
    c
}

/// The capabilities of a run as `runs show --json` lists them.
pub fn capabilities_of(broker: &Broker, run_id: &str) -> Vec<Value> {
    let v: Value = serde_json::from_str(&stdout_of(&cli(
        broker,
        &["runs", "show", run_id, "--json"],
    )))
    .unwrap();
    v["capabilities"].as_array().unwrap().clone()
}

/// The audit rows of one event, through the admin CLI.
pub fn broker_audit(broker: &Broker, event: &str) -> Vec<Value> {
    let out = stdout_of(&cli(broker, &["audit", "tail", "--event", event, "--json"]));
    out.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A loopback listener that counts the connections it gets; each one is
/// answered `response` (raw HTTP) and closed.
pub async fn counting_listener(
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

pub type Counter = std::sync::Arc<std::sync::atomic::AtomicUsize>;

/// A loopback proxy that answers 502 and counts who reached it, and the proxy
/// variables (sandboxes often set them) that name it.
pub async fn counting_proxy() -> (Vec<(&'static str, String)>, Counter) {
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
pub async fn redirect_to(path: &str) -> (String, Counter) {
    let (target, targeted) =
        counting_listener("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".into()).await;
    let (redirector, _) = counting_listener(format!(
        "HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:{target}{path}\r\ncontent-length: 0\r\n\r\n"
    ))
    .await;
    (format!("http://127.0.0.1:{redirector}"), targeted)
}
