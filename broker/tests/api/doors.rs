//! One decision, many doors — through the real binary (`tessera serve --dev`
//! with a gateway, an injection rule and OAuth): one table of requests (allow,
//! no permit, a forbid over a wildcard permit, an approval, a rate, an ended
//! run) is sent to every door — `POST /v1/capabilities`, `POST /oauth/token`,
//! the gateway's `CONNECT`, an injected request — and every door must reach the
//! same decision and write the same audit `reason` (or, for an approval, open
//! one; for an ended run, write nothing). A door that drifted from the decision
//! layer fails here.

use crate::support::app::TempDir;
use crate::support::dns::Dns;
use crate::support::upstream::{TestCa, Upstream};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tessera_client::types::{GRANT_TYPE_TOKEN_EXCHANGE, RUN_TOKEN_TYPE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BIN: &str = env!("CARGO_BIN_EXE_tessera");

/// The cases, by the word every door's resource for them carries.
const CASES: [&str; 6] = ["open", "nopermit", "forbidden", "gated", "rated", "ended"];

/// The same rules for every door: what differs is only the action each door
/// asks for (`read`, the scope `notes:read`, `connect`, the method `GET`).
const POLICY: &str = r#"
@id("doors-open") @allow_addresses("127.0.0.0/8")
permit (principal == Tessera::User::"alice", action in [Tessera::Action::"read", Tessera::Action::"notes:read", Tessera::Action::"connect", Tessera::Action::"GET"], resource)
when { resource.path like "*open*" || resource.path like "*ended*" };

@id("doors-wildcard") @allow_addresses("127.0.0.0/8")
permit (principal == Tessera::User::"alice", action in [Tessera::Action::"read", Tessera::Action::"notes:read", Tessera::Action::"connect", Tessera::Action::"GET"], resource)
when { resource.path like "*forbid*" };

@id("doors-forbidden")
forbid (principal, action, resource)
when { resource.path like "*forbidden*" };

@id("doors-gated") @approval("group:release-managers") @allow_addresses("127.0.0.0/8")
permit (principal == Tessera::User::"alice", action in [Tessera::Action::"read", Tessera::Action::"notes:read", Tessera::Action::"connect", Tessera::Action::"GET"], resource)
when { resource.path like "*gated*" };

@id("doors-rated") @rate("1/min") @allow_addresses("127.0.0.0/8")
permit (principal == Tessera::User::"alice", action in [Tessera::Action::"read", Tessera::Action::"notes:read", Tessera::Action::"connect", Tessera::Action::"GET"], resource)
when { resource.path like "*rated*" };

@id("doors-api-host") @allow_addresses("127.0.0.0/8")
permit (principal == Tessera::User::"alice", action == Tessera::Action::"connect", resource)
when { resource.path like "api.doors.test:*" };
"#;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Door {
    Capability,
    Token,
    Connect,
    Request,
}

const DOORS: [Door; 4] = [Door::Capability, Door::Token, Door::Connect, Door::Request];

/// A door's answer, in the decision layer's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Allowed,
    Denied,
    Pending,
    RateLimited,
    RunEnded,
}

struct Broker {
    child: Child,
    addr: String,
    gateway: SocketAddr,
    admin: String,
    dir: TempDir,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn start(dns: &Dns, ca_file: &Path, api_port: u16) -> Broker {
    tessera_broker::server::install_crypto_provider();
    let dir = TempDir::new();
    let policy = dir.0.join("policy");
    std::fs::create_dir_all(&policy).unwrap();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policy");
    for f in ["schema.cedarschema", "entities.json"] {
        std::fs::copy(shipped.join(f), policy.join(f)).unwrap();
    }
    std::fs::write(policy.join("doors.cedar"), POLICY).unwrap();
    let gateway: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut config = String::from(
        "[backends.docs]\nkind = \"token\"\naudience = \"https://docs.doors.test\"\n\n\
         [backends.net]\nkind = \"net\"\n\n",
    );
    for case in CASES {
        config.push_str(&format!(
            "[backends.notes-{case}]\nkind = \"oauth-resource\"\n\
             resource = \"https://{case}.doors.test/mcp\"\nscopes = [\"notes:read\"]\n\n"
        ));
    }
    config.push_str(&format!(
        "[backends.api]\nkind = \"http\"\nhosts = [\"api.doors.test:{api_port}\"]\n\
         requests = [\"GET /*\"]\nauth = \"bearer\"\nsecret_env = \"DOORS_API_SECRET\"\n\
         placeholder_env = \"DOORS_API_TOKEN\"\n\n\
         [gateway]\nlisten = \"{gateway}\"\nnameservers = [\"{}\"]\nupstream_roots = \"{}\"\n",
        dns.addr,
        ca_file.display()
    ));
    std::fs::write(dir.0.join("tessera.toml"), &config).unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let log = std::fs::File::create(dir.0.join("broker.log")).unwrap();
    let child = Command::new(BIN)
        .args(["serve", "--dev", "--listen", &listen, "--data-dir"])
        .arg(dir.0.join("data"))
        .arg("--policy-dir")
        .arg(&policy)
        .arg("--config")
        .arg(dir.0.join("tessera.toml"))
        .current_dir(&dir.0)
        .env("TESSERA_ADMIN_TOKEN_FILE", dir.0.join("admin.token"))
        .env("DOORS_API_SECRET", "doors-api-secret-0123456789")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    let addr = format!("http://{listen}");
    let mut broker = Broker {
        child,
        addr,
        gateway,
        admin: String::new(),
        dir,
    };
    for _ in 0..400 {
        if reqwest::get(format!("{}/readyz", broker.addr))
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            broker.admin = std::fs::read_to_string(broker.dir.0.join("admin.token"))
                .unwrap()
                .trim()
                .to_owned();
            return broker;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = std::fs::read_to_string(broker.dir.0.join("broker.log")).unwrap_or_default();
    panic!("tessera serve --dev did not become ready:\n{log}");
}

impl Broker {
    /// `POST path` with `bearer` and a JSON body; the JSON answer.
    async fn post(&self, path: &str, bearer: &str, body: Value) -> Value {
        reqwest::Client::new()
            .post(format!("{}{path}", self.addr))
            .bearer_auth(bearer)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap_or(Value::Null)
    }

    async fn runtime_key(&self) -> String {
        let body = json!({"name": format!("doors-{}", free_port())});
        let v = self.post("/v1/admin/runtimes", &self.admin, body).await;
        v["key"]
            .as_str()
            .unwrap_or_else(|| panic!("{v}"))
            .to_owned()
    }

    /// A new run of alice: its id and token.
    async fn run(&self, runtime: &str) -> (String, String) {
        let body =
            json!({"user": "alice", "task": {"id": "t-doors", "kind": "summarize"}, "ttl": "30m"});
        let v = self.post("/v1/runs", runtime, body).await;
        (
            v["run_id"]
                .as_str()
                .unwrap_or_else(|| panic!("{v}"))
                .to_owned(),
            v["run_token"].as_str().unwrap().to_owned(),
        )
    }

    async fn end(&self, runtime: &str, run_id: &str) {
        let resp = reqwest::Client::new()
            .post(format!("{}/v1/runs/{run_id}/end", self.addr))
            .bearer_auth(runtime)
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{}", resp.status());
    }

    /// The run's decision rows about `case` (its connection to the API host
    /// and the closing rows of connections left out).
    async fn decisions(&self, run_id: &str, case: &str) -> Vec<Value> {
        let v: Value = reqwest::Client::new()
            .get(format!(
                "{}/v1/admin/audit?run={run_id}&limit=500&order=desc",
                self.addr
            ))
            .bearer_auth(&self.admin)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["resource"].as_str().is_some_and(|r| r.contains(case)))
            .filter(|e| {
                !matches!(
                    e["event"].as_str(),
                    Some("egress.closed" | "egress.response")
                )
            })
            .cloned()
            .collect()
    }

    /// Asks at `door` for the `case` resource as the run with `token`.
    async fn ask(&self, door: Door, case: &str, token: &str, api_port: u16, ca: &Path) -> Outcome {
        match door {
            Door::Capability => {
                let resp = reqwest::Client::new()
                    .post(format!("{}/v1/capabilities", self.addr))
                    .bearer_auth(token)
                    .json(&json!({"action": "read", "resource": format!("docs:{case}/report")}))
                    .send()
                    .await
                    .unwrap();
                let status = resp.status().as_u16();
                let v: Value = resp.json().await.unwrap_or(Value::Null);
                outcome(status, v["error"]["code"].as_str().unwrap_or(""))
            }
            Door::Token => {
                let resp = reqwest::Client::new()
                    .post(format!("{}/oauth/token", self.addr))
                    .form(&[
                        ("grant_type", GRANT_TYPE_TOKEN_EXCHANGE),
                        ("subject_token", token),
                        ("subject_token_type", RUN_TOKEN_TYPE),
                        ("resource", &format!("https://{case}.doors.test/mcp")),
                        ("scope", "notes:read"),
                    ])
                    .send()
                    .await
                    .unwrap();
                let status = resp.status().as_u16();
                let v: Value = resp.json().await.unwrap_or(Value::Null);
                if status == 200 {
                    return Outcome::Allowed;
                }
                if v["error"] == "authorization_pending" {
                    return Outcome::Pending;
                }
                outcome(status, v["code"].as_str().unwrap_or(""))
            }
            Door::Connect => {
                let target = format!("{case}.doors.test:{api_port}");
                let mut s = tokio::net::TcpStream::connect(self.gateway).await.unwrap();
                let req = format!(
                    "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Bearer {token}\r\n\r\n"
                );
                s.write_all(req.as_bytes()).await.unwrap();
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
                        .await
                        .unwrap()
                        .unwrap();
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                let text = String::from_utf8_lossy(&got).into_owned();
                let status: u16 = text
                    .split(' ')
                    .nth(1)
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
                if status == 200 {
                    return Outcome::Allowed;
                }
                // The body follows the head (Content-Length).
                let mut rest = text
                    .split_once("\r\n\r\n")
                    .map(|(_, b)| b.to_owned())
                    .unwrap_or_default();
                while !rest.ends_with('}') {
                    match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
                        Ok(Ok(n)) if n > 0 => rest.push_str(&String::from_utf8_lossy(&buf[..n])),
                        _ => break,
                    }
                }
                let v: Value = serde_json::from_str(&rest).unwrap_or(Value::Null);
                outcome(status, v["error"]["code"].as_str().unwrap_or(""))
            }
            Door::Request => {
                let url = format!("https://api.doors.test:{api_port}/api/{case}/x");
                let out = tokio::process::Command::new("curl")
                    .args(["-sS", "--max-time", "20", "--noproxy", ""])
                    .args(["--proxy", &format!("http://{}", self.gateway)])
                    .args([
                        "--proxy-header",
                        &format!("Proxy-Authorization: Bearer {token}"),
                    ])
                    .arg("--cacert")
                    .arg(ca)
                    .args(["-w", "\n%{http_connect} %{http_code}"])
                    .arg(&url)
                    .output()
                    .await
                    .unwrap();
                let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
                let (body, codes) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
                let (connect, status) = codes.split_once(' ').unwrap_or(("", ""));
                let v: Value = serde_json::from_str(body.trim()).unwrap_or(Value::Null);
                let code = v["error"]["code"].as_str().unwrap_or("");
                if connect != "200" {
                    // Refused at the CONNECT to the API host (an ended run).
                    return outcome(connect.parse().unwrap_or(0), "run_ended");
                }
                outcome(status.parse().unwrap_or(0), code)
            }
        }
    }

    /// The run's CA file (`POST /v1/gateway/session`).
    async fn run_ca(&self, token: &str) -> PathBuf {
        let v = self.post("/v1/gateway/session", token, json!({})).await;
        let path = self.dir.0.join(format!("ca-{}.pem", free_port()));
        std::fs::write(&path, v["ca_pem"].as_str().unwrap_or_else(|| panic!("{v}"))).unwrap();
        path
    }
}

fn outcome(status: u16, code: &str) -> Outcome {
    match (status, code) {
        (200 | 201, _) => Outcome::Allowed,
        (202, _) | (_, "approval_pending") => Outcome::Pending,
        (429, _) | (_, "limit_reached") => Outcome::RateLimited,
        (_, "run_ended" | "run_expired") => Outcome::RunEnded,
        (400 | 403, _) => Outcome::Denied,
        other => panic!("an answer outside the table: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_door_reaches_the_same_decision_and_records_the_same_reason() {
    let dns = Dns::start().await;
    let ca = TestCa::new();
    let api = Upstream::https(&ca, &["api.doors.test"]).await;
    let tmp = TempDir::new();
    let ca_file = tmp.0.join("test-ca.pem");
    std::fs::write(&ca_file, &ca.pem).unwrap();
    dns.set("api.doors.test", vec![vec!["127.0.0.1"]]);
    for case in CASES {
        dns.set(&format!("{case}.doors.test"), vec![vec!["127.0.0.1"]]);
    }
    let broker = start(&dns, &ca_file, api.port()).await;
    let runtime = broker.runtime_key().await;

    // (case, the decision, the audit row's event family and reason).
    let expected: [(&str, Outcome, Option<&str>); 6] = [
        ("open", Outcome::Allowed, None),
        ("nopermit", Outcome::Denied, Some("no_permit")),
        ("forbidden", Outcome::Denied, Some("forbidden")),
        ("gated", Outcome::Pending, None),
        ("rated", Outcome::RateLimited, Some("rate_limited")),
        ("ended", Outcome::RunEnded, Some("run_ended")),
    ];
    let mut table = Vec::new();
    for (case, want, reason) in expected {
        for door in DOORS {
            let (run_id, token) = broker.run(&runtime).await;
            let ca = broker.run_ca(&token).await;
            if case == "ended" {
                broker.end(&runtime, &run_id).await;
            }
            let mut got = broker.ask(door, case, &token, api.port(), &ca).await;
            if case == "rated" {
                assert_eq!(
                    got,
                    Outcome::Allowed,
                    "{door:?}: the first is within the rate"
                );
                got = broker.ask(door, case, &token, api.port(), &ca).await;
            }
            // An injected request of an ended run is refused at its CONNECT
            // to the API's host, which is that door's first decision.
            let about = if (door, case) == (Door::Request, "ended") {
                "api.doors.test"
            } else {
                case
            };
            let rows = broker.decisions(&run_id, about).await;
            let last = rows.first().cloned().unwrap_or(Value::Null);
            table.push((case, door, got.clone(), last.clone()));
            assert_eq!(got, want, "{case} at {door:?}: {rows:?}");
            match case {
                "gated" => {
                    assert_eq!(last["event"], "approval.requested", "{door:?}: {rows:?}");
                    assert_eq!(last["decision"], "pending", "{door:?}: {rows:?}");
                }
                "open" => assert_eq!(last["decision"], "allow", "{door:?}: {rows:?}"),
                _ => {
                    assert_eq!(last["decision"], "deny", "{door:?}: {rows:?}");
                    assert_eq!(
                        last["reason"].as_str(),
                        reason,
                        "{case} at {door:?}: {rows:?}"
                    );
                }
            }
        }
    }
    // Every door, the same reason, case by case.
    for case in CASES {
        let reasons: Vec<&Value> = table
            .iter()
            .filter(|(c, ..)| *c == case)
            .map(|(.., row)| &row["reason"])
            .collect();
        assert!(
            reasons.windows(2).all(|w| w[0] == w[1]),
            "{case}: {reasons:?}"
        );
    }
    assert_eq!(
        api.seen().iter().filter(|r| r.contains("/open/")).count(),
        1,
        "only the allowed request reached the API: {:?}",
        api.seen()
    );
    assert!(!api
        .seen()
        .iter()
        .any(|r| ["/nopermit/", "/forbidden/", "/gated/"]
            .iter()
            .any(|c| r.contains(c))));
}
