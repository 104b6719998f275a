//! The egress gateway against real servers on loopback: HTTP and HTTPS
//! upstreams with their own CA, a DNS server the test controls, curl and
//! Python `requests` as clients. No traffic leaves the machine: names that
//! resolve to link-local, private or metadata addresses are refused before any
//! connection, which each test asserts (a listener that must see nothing, and
//! the refusal's code, which the gateway returns only before connecting).

use crate::support::app::{Db, DbBackends, Extra, TestApp};
use crate::support::dns::Dns;
use crate::support::egress::{approve, audit_rows, code};
use crate::support::postgres::PgFixture;
use crate::support::upstream::{TestCa, Upstream};
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const POLICY: &str = r#"
@id("egress-allowed")
@allow_addresses("127.0.0.0/8")
permit (principal == Tessera::User::"alice", action == Tessera::Action::"connect", resource)
when { resource.kind == "net" &&
  (resource.path like "allowed.test:*" || resource.path like "rebind.test:*") };

@id("egress-public")
permit (principal == Tessera::User::"alice", action == Tessera::Action::"connect", resource)
when { resource.kind == "net" && resource.path like "*.public.test:*" };

@id("egress-needs-approval")
@approval("group:release")
@allow_addresses("127.0.0.0/8")
permit (principal == Tessera::User::"alice", action == Tessera::Action::"connect", resource)
when { resource.kind == "net" && resource.path like "approval.test:*" };

@id("egress-metadata-ends-run")
@on_deny("end_run")
forbid (principal, action == Tessera::Action::"connect", resource)
when { resource.kind == "net" && resource.path like "metadata.test:*" };
"#;

struct Env {
    app: TestApp,
    dns: Dns,
    gateway: SocketAddr,
    http: Upstream,
    https: Upstream,
    ca_file: std::path::PathBuf,
    _dir: tempdir::Dir,
}

mod tempdir {
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new() -> Dir {
            let p =
                std::env::temp_dir().join(format!("tessera-gw-{}", tessera_broker::ids::new_id()));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// An egress environment; `gateway` is more of the `[gateway]` table.
async fn env_with(db: Option<DbBackends>, gateway: &str) -> Env {
    let dns = Dns::start().await;
    let config = format!(
        "[backends.net]\nkind = \"net\"\n\n[gateway]\nlisten = \"127.0.0.1:0\"\nnameservers = [\"{}\"]\n{gateway}\n",
        dns.addr
    );
    let mut builder = TestApp::builder(Db::Sqlite).extra(Extra {
        config,
        policy: POLICY.to_owned(),
        env: vec![],
    });
    if let Some(db) = db {
        builder = builder.db_backends(db);
    }
    let app = builder.start().await;
    let gateway = app.gateway.expect("[gateway] configured");
    let ca = TestCa::new();
    let dir = tempdir::Dir::new();
    let ca_file = dir.0.join("ca.pem");
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let http = Upstream::http().await;
    let https = Upstream::https(&ca, &["allowed.test", "rebind.test", "other.test"]).await;
    for name in [
        "allowed.test",
        "other.test",
        "loop.public.test",
        "metadata.test",
    ] {
        dns.set(name, vec![vec!["127.0.0.1"]]);
    }
    Env {
        app,
        dns,
        gateway,
        http,
        https,
        ca_file,
        _dir: dir,
    }
}

async fn env() -> Env {
    env_with(None, "").await
}

/// What curl did: exit code, body, and the proxy's answer to CONNECT (`%{http_connect}`)
/// or the response code.
struct Curl {
    code: i32,
    body: String,
    connect: String,
    status: String,
}

async fn curl(e: &Env, token: &str, url: &str, extra: &[&str]) -> Curl {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--max-time", "20", "--noproxy", ""])
        .args(["--proxy", &format!("http://{}", e.gateway)])
        .args([
            "--proxy-header",
            &format!("Proxy-Authorization: Bearer {token}"),
        ])
        .args(["--cacert", e.ca_file.to_str().unwrap()])
        .args(["-w", "\n%{http_connect} %{http_code}"])
        .args(extra)
        .arg(url)
        .output()
        .await
        .expect("curl runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, codes) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    let (connect, status) = codes.split_once(' ').unwrap_or(("", ""));
    let stderr = String::from_utf8_lossy(&out.stderr);
    Curl {
        code: out.status.code().unwrap_or(-1),
        body: format!(
            "{body}{}",
            if stderr.is_empty() {
                String::new()
            } else {
                format!(" [curl: {}]", stderr.trim())
            }
        ),
        connect: connect.to_owned(),
        status: status.to_owned(),
    }
}

/// One request through the gateway with a raw socket: the proxy's status
/// line and body (for absolute-form requests and refused CONNECTs).
async fn raw(gateway: SocketAddr, request: &str) -> (u16, String) {
    let mut s = TcpStream::connect(gateway).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn connect_req(target: &str, token: &str) -> String {
    format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Bearer {token}\r\nConnection: close\r\n\r\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_destinations_work_with_curl_and_python_requests() {
    let e = env().await;
    let (_, run_id, token) = e.app.run_for("alice").await;

    // HTTPS through CONNECT, the tool verifying the real server's certificate.
    let got = curl(
        &e,
        &token,
        &format!("https://allowed.test:{}/tls", e.https.port()),
        &[],
    )
    .await;
    assert_eq!(
        (got.code, got.connect.as_str(), got.status.as_str()),
        (0, "200", "200"),
        "{}",
        got.body
    );
    assert!(
        got.body.starts_with("hello from upstream /tls"),
        "{}",
        got.body
    );

    // Plain HTTP in absolute form, the run token as a Basic password: the
    // upstream never sees the proxy credentials.
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--max-time", "20", "--noproxy", ""])
        .args(["--proxy", &format!("http://run:{token}@{}", e.gateway)])
        .arg(format!("http://Allowed.Test.:{}/plain?q=1", e.http.port()))
        .output()
        .await
        .unwrap();
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{body}");
    assert!(body.starts_with("hello from upstream /plain?q=1"), "{body}");
    assert!(body.contains("proxy-authorization-seen=false"), "{body}");

    // Python requests, as agent runtimes use it: HTTPS through the proxy.
    let script = format!(
        "import requests, sys\n\
         r = requests.get('https://allowed.test:{port}/py', proxies={{'https': 'http://run:{token}@{gw}'}}, verify='{ca}', timeout=20)\n\
         print(r.status_code, r.text)\n",
        port = e.https.port(),
        gw = e.gateway,
        ca = e.ca_file.display(),
    );
    let out = tokio::process::Command::new(crate::support::moto::python())
        .args(["-c", &script])
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("200 hello from upstream /py"),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Every connection: one decision row and one close row with its bytes.
    let allowed = audit_rows(&e.app, &run_id, "egress.allowed", 3).await;
    assert!(allowed.iter().all(|r| r["resource"]
        .as_str()
        .unwrap()
        .starts_with("net:allowed.test:")));
    assert!(allowed
        .iter()
        .all(|r| r["action"] == "connect" && r["user"] == "alice"));
    assert!(allowed[0]["detail"]
        .as_str()
        .unwrap()
        .contains("addresses=127.0.0.1"));
    let closed = audit_rows(&e.app, &run_id, "egress.closed", 3).await;
    for row in &closed {
        let detail = row["detail"].as_str().unwrap();
        assert_eq!(row["reason"], "closed", "{row}");
        assert!(
            detail.contains("bytes_up=") && detail.contains("duration_ms="),
            "{detail}"
        );
        assert!(!detail.contains("bytes_down=0 "), "{detail}");
    }
    assert!(
        !format!("{allowed:?}{closed:?}").contains(&token),
        "no token in the audit"
    );
    let metrics = e.app.get("/metrics", None).await.text().await.unwrap();
    assert!(
        metrics.contains("tessera_egress_decisions_total{decision=\"allow\",reason=\"policy\"} 3"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_outside_policy_is_403_and_audited() {
    let e = env().await;
    let (_, run_id, token) = e.app.run_for("alice").await;
    for target in [
        format!("other.test:{}", e.https.port()),
        format!("127.0.0.1:{}", e.https.port()),
        format!("[::1]:{}", e.https.port()),
        format!("allowed.test.evil.example:{}", e.https.port()),
    ] {
        let got = curl(&e, &token, &format!("https://{target}/"), &[]).await;
        assert_eq!(got.connect, "403", "{target}: {}", got.body);
        let (status, body) = raw(e.gateway, &connect_req(&target, &token)).await;
        assert_eq!(
            (status, code(&body).as_str()),
            (403, "destination_denied"),
            "{target}"
        );
        crate::support::app::wire::<tessera_client::types::ErrorBody>(
            &serde_json::from_str(&body).unwrap(),
        );
        assert!(
            !body.contains("egress-"),
            "the sandbox never learns which policy said no"
        );
    }
    // Absolute-form HTTP too.
    let (status, body) = raw(
        e.gateway,
        &format!(
            "GET http://other.test:{p}/ HTTP/1.1\r\nHost: other.test:{p}\r\nProxy-Authorization: Bearer {token}\r\nConnection: close\r\n\r\n",
            p = e.http.port()
        ),
    )
    .await;
    assert_eq!((status, code(&body).as_str()), (403, "destination_denied"));
    assert_eq!(
        e.https.accepted() + e.http.accepted(),
        0,
        "nothing was connected"
    );
    let denied = audit_rows(&e.app, &run_id, "egress.denied", 9).await;
    assert!(denied
        .iter()
        .all(|r| r["decision"] == "deny" && r["reason"] == "no_permit"));
    // Another user's run reaches nothing, even what alice may.
    let (_, _, erin) = e.app.run_for("erin").await;
    let (status, _) = raw(
        e.gateway,
        &connect_req(&format!("allowed.test:{}", e.https.port()), &erin),
    )
    .await;
    assert_eq!(status, 403);
}

/// One request through the gateway with a raw socket: its status, its
/// `Tessera-Approval-Id` header and its body.
async fn raw_with_approval(gateway: SocketAddr, request: &str) -> (u16, Option<String>, String) {
    let mut s = TcpStream::connect(gateway).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let id = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("tessera-approval-id")
            .then(|| value.trim().to_owned())
    });
    (status, id, body.to_owned())
}

/// A permit with `@approval` at the connect door means what it means at
/// `/v1/capabilities`: the connection waits for an approval bound to it
/// (`403 approval_pending`, `Tessera-Approval-Id`), the identical request
/// while it is pending names the same one, and once approved the identical
/// request passes exactly once. An absolute-form request is bound to its
/// method, path, query and body, so neither a `CONNECT` nor another request
/// to the same destination redeems its approval. (Written first against the
/// gateway that refused every gated connection as `destination_denied`; it
/// failed there.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_connection_waits_for_its_approval_and_passes_once() {
    let e = env().await;
    e.dns.set("approval.test", vec![vec!["127.0.0.1"]]);
    let (_, run_id, token) = e.app.run_for("alice").await;
    let target = format!("approval.test:{}", e.http.port());
    let get = |path: &str| {
        format!(
            "GET http://{target}{path} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        )
    };
    let (status, first, body) = raw_with_approval(e.gateway, &get("/once?n=1")).await;
    assert_eq!(
        (status, code(&body).as_str()),
        (403, "approval_pending"),
        "{body}"
    );
    let first = first.expect("the approval is named in Tessera-Approval-Id");
    let (status, again, _) = raw_with_approval(e.gateway, &get("/once?n=1")).await;
    assert_eq!((status, again.as_deref()), (403, Some(first.as_str())));
    // A CONNECT to the same destination is another request: another approval.
    let (status, tunnel, body) = raw_with_approval(e.gateway, &connect_req(&target, &token)).await;
    assert_eq!(
        (status, code(&body).as_str()),
        (403, "approval_pending"),
        "{body}"
    );
    assert_ne!(tunnel.as_deref(), Some(first.as_str()));
    assert_eq!(e.http.accepted(), 0, "nothing is connected while it waits");

    // The run sees what it waits for; approvers see the same.
    let seen: Value = e
        .app
        .get(&format!("/v1/approvals/{first}"), Some(&token))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(seen["status"], "pending", "{seen}");
    assert_eq!(seen["action"], "connect", "{seen}");
    assert_eq!(seen["resource"], format!("net:{target}"), "{seen}");
    let args = &seen["arguments"];
    assert_eq!(args["method"], "GET", "{seen}");
    assert_eq!(args["host"], target.as_str(), "{seen}");
    assert_eq!(
        (args["path"].as_str(), args["query"].as_str()),
        (Some("/once"), Some("n=1")),
        "{seen}"
    );

    approve(&e.app, "dana", &first).await;

    // Another request to the approved destination does not redeem it.
    let (status, other, _) = raw_with_approval(e.gateway, &get("/other")).await;
    assert_eq!(status, 403);
    assert_ne!(other.as_deref(), Some(first.as_str()));
    // The approved one passes, once.
    let (status, _, body) = raw_with_approval(e.gateway, &get("/once?n=1")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("hello from upstream /once"), "{body}");
    let (status, next, body) = raw_with_approval(e.gateway, &get("/once?n=1")).await;
    assert_eq!(
        (status, code(&body).as_str()),
        (403, "approval_pending"),
        "{body}"
    );
    assert_ne!(
        next.as_deref(),
        Some(first.as_str()),
        "an approval passes one request"
    );
    assert_eq!(e.http.accepted(), 1);

    let allowed = audit_rows(&e.app, &run_id, "egress.allowed", 1).await;
    assert_eq!(allowed.len(), 1, "{allowed:?}");
    assert!(
        allowed[0]["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("approval={first}")),
        "{allowed:?}"
    );
    let requested = audit_rows(&e.app, &run_id, "approval.requested", 4).await;
    assert_eq!(requested.len(), 4, "{requested:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_public_addresses_are_refused_before_any_connection() {
    let e = env().await;
    let (_, run_id, token) = e.app.run_for("alice").await;
    e.dns.set("meta.public.test", vec![vec!["169.254.169.254"]]);
    e.dns.set("ten.public.test", vec![vec!["10.1.2.3"]]);
    e.dns
        .set("mapped.public.test", vec![vec!["::ffff:127.0.0.1"]]);
    e.dns.set("ec2.public.test", vec![vec!["fd00:ec2::254"]]);
    e.dns.set(
        "mixed.public.test",
        vec![vec!["93.184.215.14", "127.0.0.1"]],
    );
    let cases = [
        ("loop.public.test", "address_loopback"),
        ("meta.public.test", "address_link_local"),
        ("ten.public.test", "address_private"),
        ("mapped.public.test", "address_loopback"),
        ("ec2.public.test", "address_unique_local"),
        ("mixed.public.test", "address_loopback"),
    ];
    for (name, _) in cases {
        // The port is the HTTPS listener's: were anything connected to a
        // loopback answer, it would see it.
        let target = format!("{name}:{}", e.https.port());
        let (status, body) = raw(e.gateway, &connect_req(&target, &token)).await;
        assert_eq!(
            (status, code(&body).as_str()),
            (403, "address_refused"),
            "{name}: {body}"
        );
        let got = curl(&e, &token, &format!("http://{target}/"), &[]).await;
        assert_eq!(got.status, "403", "{name} in absolute form: {}", got.body);
    }
    assert_eq!(
        e.https.accepted(),
        0,
        "no connection was attempted to any refused address"
    );
    let denied = audit_rows(&e.app, &run_id, "egress.denied", cases.len() * 2).await;
    for (name, reason) in cases {
        let row = denied
            .iter()
            .find(|r| {
                r["resource"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("net:{name}:"))
            })
            .unwrap();
        assert_eq!(row["reason"], reason, "{row}");
        assert!(
            row["detail"].as_str().unwrap().contains("refused="),
            "{row}"
        );
    }
    assert!(audit_rows(&e.app, &run_id, "egress.allowed", 0)
        .await
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebinding_name_is_checked_per_connection_and_connected_as_checked() {
    let e = env().await;
    let (_, _, token) = e.app.run_for("alice").await;
    e.dns.set(
        "rebind.test",
        vec![vec!["127.0.0.1"], vec!["169.254.169.254"]],
    );
    let url = format!("https://rebind.test:{}/first", e.https.port());
    let got = curl(&e, &token, &url, &[]).await;
    assert_eq!((got.code, got.status.as_str()), (0, "200"), "{}", got.body);
    let got = curl(&e, &token, &url, &[]).await;
    assert_eq!(
        got.connect, "403",
        "the second answer is a metadata address: {}",
        got.body
    );
    assert_eq!(e.https.accepted(), 1, "only the first, checked, connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tls_server_name_must_be_the_destination_decided() {
    let e = env().await;
    let (_, run_id, token) = e.app.run_for("alice").await;
    tessera_broker::server::install_crypto_provider();
    let ca = {
        let mut roots = rustls::RootCertStore::empty();
        let pem = std::fs::read(&e.ca_file).unwrap();
        for c in rustls_pemfile_certs(&pem) {
            roots.add(c).unwrap();
        }
        Arc::new(
            rustls::ClientConfig::builder()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    };
    // CONNECT allowed.test, then greet other.test (same address, same certificate).
    for (sni, reason) in [
        ("other.test", "sni_mismatch"),
        ("127.0.0.1", "sni_mismatch"),
    ] {
        let mut s = TcpStream::connect(e.gateway).await.unwrap();
        let target = format!("allowed.test:{}", e.https.port());
        s.write_all(connect_req(&target, &token).as_bytes())
            .await
            .unwrap();
        let mut head = [0u8; 256];
        let n = s.read(&mut head).await.unwrap();
        assert!(String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 200"));
        let name = rustls::pki_types::ServerName::try_from(sni.to_owned()).unwrap();
        let tls = tokio_rustls::TlsConnector::from(ca.clone())
            .connect(name, s)
            .await;
        assert!(tls.is_err(), "{sni}: the tunnel must be closed");
        let rows = audit_rows(&e.app, &run_id, "egress.denied", 1).await;
        assert!(rows.iter().any(|r| r["reason"] == reason));
    }
    // Not TLS at all through a CONNECT tunnel.
    let mut s = TcpStream::connect(e.gateway).await.unwrap();
    let target = format!("allowed.test:{}", e.https.port());
    s.write_all(connect_req(&target, &token).as_bytes())
        .await
        .unwrap();
    let mut head = [0u8; 256];
    let _ = s.read(&mut head).await.unwrap();
    s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n").await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut rest)).await;
    assert!(rest.is_empty());
    let rows = audit_rows(&e.app, &run_id, "egress.denied", 3).await;
    assert!(rows.iter().any(|r| r["reason"] == "not_tls"));
    assert_eq!(e.https.accepted(), 0, "nothing reached the upstream");
    // The right name works on the same destination.
    let got = curl(
        &e,
        &token,
        &format!("https://allowed.test:{}/ok", e.https.port()),
        &[],
    )
    .await;
    assert_eq!(got.status, "200");
}

fn rustls_pemfile_certs(pem: &[u8]) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .map(|c| c.unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn byte_and_duration_limits_cut_the_connection() {
    let e = env_with(
        None,
        "max_bytes_down_per_run = 65536\nmax_connection_duration = \"1s\"",
    )
    .await;
    let (_, run_id, token) = e.app.run_for("alice").await;
    let got = curl(
        &e,
        &token,
        &format!("https://allowed.test:{}/big", e.https.port()),
        &[],
    )
    .await;
    assert_ne!(got.code, 0, "1 MiB over a 64 KiB allowance is cut");
    assert!(got.body.len() < 128 * 1024);
    let rows = audit_rows(&e.app, &run_id, "egress.closed", 1).await;
    assert_eq!(rows[0]["reason"], "byte_limit", "{}", rows[0]);
    // The allowance is the run's: a new connection is refused outright.
    let (status, body) = raw(
        e.gateway,
        &connect_req(&format!("allowed.test:{}", e.https.port()), &token),
    )
    .await;
    assert_eq!((status, code(&body).as_str()), (429, "limit_reached"));

    let (_, run2, token2) = e.app.run_for("alice").await;
    let started = std::time::Instant::now();
    let got = curl(
        &e,
        &token2,
        &format!("http://allowed.test:{}/slow", e.http.port()),
        &[],
    )
    .await;
    assert_ne!(got.code, 0, "a 5 s response over a 1 s connection is cut");
    assert!(started.elapsed() < std::time::Duration::from_secs(4));
    let rows = audit_rows(&e.app, &run2, "egress.closed", 1).await;
    assert_eq!(rows[0]["reason"], "duration_limit", "{}", rows[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_authentication_is_the_run_token() {
    let e = env().await;
    let target = format!("allowed.test:{}", e.https.port());
    let (status, body) = raw(
        e.gateway,
        &format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert_eq!((status, code(&body).as_str()), (407, "proxy_auth_required"));
    for bad in ["tsr_run_forged", "not-a-token", ""] {
        let (status, _) = raw(e.gateway, &connect_req(&target, bad)).await;
        assert_eq!(status, 407, "{bad:?}");
    }
    // An ended run's token opens nothing.
    let (key, run_id, token) = e.app.run_for("alice").await;
    e.app.end_run(&key, &run_id).await;
    let (status, body) = raw(e.gateway, &connect_req(&target, &token)).await;
    assert_eq!((status, code(&body).as_str()), (403, "run_ended"));
    // A Host header naming another virtual host than the request line is refused.
    let (_, _, token) = e.app.run_for("alice").await;
    let (status, body) = raw(
        e.gateway,
        &format!(
            "GET http://allowed.test:{p}/ HTTP/1.1\r\nHost: other.test:{p}\r\nProxy-Authorization: Bearer {token}\r\nConnection: close\r\n\r\n",
            p = e.http.port()
        ),
    )
    .await;
    assert_eq!((status, code(&body).as_str()), (400, "invalid_destination"));
    assert_eq!(e.https.accepted() + e.http.accepted(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_destination_ends_the_run_and_its_database_user_disappears() {
    let fx = PgFixture::new().await;
    let e = env_with(Some(DbBackends::default()), "").await;
    let (key, run_id, token) = e.app.run_for("alice").await;
    let cap = e
        .app
        .capability_ok(&token, "select", &fx.resource("granted"))
        .await;
    let user = e.app.exchange_ok(&cap).await["username"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(fx.role_exists(&user).await);

    // The forbid says @on_deny("end_run").
    let (status, body) = raw(e.gateway, &connect_req("metadata.test:80", &token)).await;
    assert_eq!((status, code(&body).as_str()), (403, "destination_denied"));
    let ended = audit_rows(&e.app, &run_id, "run.ended", 1).await;
    assert_eq!(ended[0]["actor"], "gateway");
    assert_eq!(ended[0]["reason"], "egress_denied");
    // The runtime's receipt says how the run ended.
    let view: Value = e
        .app
        .get(&format!("/v1/runs/{run_id}"), Some(&key))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (view["state"].as_str(), view["end_reason"].as_str()),
        (Some("ended"), Some("egress_denied"))
    );
    tessera_broker::jobs::revocation::run_once(&e.app.state)
        .await
        .unwrap();
    assert!(
        !fx.role_exists(&user).await,
        "the run's database user is gone"
    );
    let resp = e
        .app
        .capability(&token, "select", &fx.resource("granted"))
        .await;
    assert_eq!(resp.status(), reqwest::StatusCode::FORBIDDEN);
    let (status, _) = raw(
        e.gateway,
        &connect_req(&format!("allowed.test:{}", e.https.port()), &token),
    )
    .await;
    assert_eq!(status, 403, "nothing more through the gateway either");
    fx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_run_on_deny_ends_the_run_at_any_refused_destination() {
    let e = env_with(None, "end_run_on_deny = true").await;
    let (_, run_id, token) = e.app.run_for("alice").await;
    // An open connection of the run is cut when it ends.
    let mut open = TcpStream::connect(e.gateway).await.unwrap();
    open.write_all(connect_req(&format!("allowed.test:{}", e.https.port()), &token).as_bytes())
        .await
        .unwrap();
    let mut head = [0u8; 128];
    let _ = open.read(&mut head).await.unwrap();
    let (status, _) = raw(e.gateway, &connect_req("loop.public.test:443", &token)).await;
    assert_eq!(status, 403);
    audit_rows(&e.app, &run_id, "run.ended", 1).await;
    let mut rest = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        open.read_to_end(&mut rest),
    )
    .await;
    assert!(read.is_ok(), "the run's open tunnel was closed");
    let (status, body) = raw(
        e.gateway,
        &connect_req(&format!("allowed.test:{}", e.https.port()), &token),
    )
    .await;
    assert_eq!((status, code(&body).as_str()), (403, "run_ended"));
}

/// A TLS session through a CONNECT tunnel of `token`'s run to allowed.test.
async fn tls_tunnel(e: &Env, token: &str) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile_certs(&std::fs::read(&e.ca_file).unwrap()) {
        roots.add(c).unwrap();
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut s = TcpStream::connect(e.gateway).await.unwrap();
    let target = format!("allowed.test:{}", e.https.port());
    s.write_all(connect_req(&target, token).as_bytes())
        .await
        .unwrap();
    let mut head = [0u8; 256];
    let n = s.read(&mut head).await.unwrap();
    assert!(String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 200"));
    let name = rustls::pki_types::ServerName::try_from("allowed.test").unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, s)
        .await
        .unwrap()
}

/// A run ended by its runtime (not by the gateway) loses its open tunnels too,
/// and a stalled upload cannot hold a connection past its deadline, cut as
/// `duration_limit` (an attacker's review found both; the tunnel assertion and
/// the reason assertion failed before the fix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_connections_end_with_their_run_and_their_deadline() {
    tessera_broker::server::install_crypto_provider();
    let e = env_with(None, "max_connection_duration = \"2s\"").await;
    let (key, run_id, token) = e.app.run_for("alice").await;
    let mut tls = tls_tunnel(&e, &token).await;
    tls.write_all(b"GET /one HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).contains("proxy-authorization-seen") {
        let mut buf = [0u8; 1024];
        let n = tls.read(&mut buf).await.unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&got).contains("hello from upstream /one"));
    assert_eq!(
        e.app.end_run(&key, &run_id).await.status(),
        reqwest::StatusCode::OK
    );
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(
        std::time::Duration::from_millis(1800),
        tls.read_to_end(&mut rest),
    )
    .await;
    assert!(
        closed.is_ok(),
        "the tunnel closes when the run ends, before its deadline"
    );
    let rows = audit_rows(&e.app, &run_id, "egress.closed", 1).await;
    assert_eq!(rows[0]["reason"], "run_ended", "{}", rows[0]);

    // An upload that stops sending is cut at the connection's deadline.
    let (_, run2, token2) = e.app.run_for("alice").await;
    let mut s = TcpStream::connect(e.gateway).await.unwrap();
    s.write_all(
        format!(
            "POST http://allowed.test:{p}/upload HTTP/1.1\r\nHost: allowed.test:{p}\r\n\
             Proxy-Authorization: Bearer {token2}\r\nContent-Length: 1000000\r\n\r\nfirst bytes",
            p = e.http.port()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    let cut =
        tokio::time::timeout(std::time::Duration::from_secs(6), s.read_to_end(&mut out)).await;
    assert!(cut.is_ok(), "the stalled upload is cut");
    let rows = audit_rows(&e.app, &run2, "egress.closed", 1).await;
    assert_eq!(rows[0]["reason"], "duration_limit", "{}", rows[0]);
}

/// A connection that failed to authenticate is closed: made-up tokens cannot
/// hold the gateway's connection slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_authentication_closes_the_connection() {
    let e = env().await;
    let mut s = TcpStream::connect(e.gateway).await.unwrap();
    s.write_all(b"GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nProxy-Authorization: Bearer tsr_run_madeup\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let closed =
        tokio::time::timeout(std::time::Duration::from_secs(3), s.read_to_end(&mut out)).await;
    assert!(closed.is_ok(), "closed after the 407");
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 407"));
}

/// Open tunnels count against `gateway.max_connections` for their whole life
/// (a review found the slot released once the connection was upgraded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tunnels_hold_their_connection_slot() {
    tessera_broker::server::install_crypto_provider();
    let e = env_with(None, "max_connections = 2").await;
    let (_, _, token) = e.app.run_for("alice").await;
    let _one = tls_tunnel(&e, &token).await;
    let _two = tls_tunnel(&e, &token).await;
    let mut third = TcpStream::connect(e.gateway).await.unwrap();
    let _ = third
        .write_all(connect_req(&format!("allowed.test:{}", e.https.port()), &token).as_bytes())
        .await;
    let mut out = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        third.read_to_end(&mut out),
    )
    .await;
    assert!(
        read.is_ok() && out.is_empty(),
        "over the cap: closed unanswered, got {out:?}"
    );
    drop(_one);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let _again = tls_tunnel(&e, &token).await;
}
