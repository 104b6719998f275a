//! `exec --egress` through the gateway: the command reaches what policy permits
//! with a per-exec proxy credential (never the run token) and is refused
//! elsewhere; `--isolate-net` leaves it no other way out; a connection the
//! gateway holds for an approval is shown and waited for by the relay; and the
//! credential-injection example (`examples/injection/`) runs as documented,
//! its secret in neither the command's environment nor the broker's log. All
//! upstreams are loopback servers of the test's own.

use crate::support::{
    broker_audit, cli, free_port, policy_dir, sandbox_cmd, sandbox_run, start_dev_broker_policy,
    stdout_of,
};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

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
