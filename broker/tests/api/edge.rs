//! The HTTP edge under hostile connections, on the real binary where the
//! descriptor limit matters: half-sent requests beyond the open-file limit,
//! idle keep-alive, a huge declared body, a foreign `Host`, h2c.

use crate::support::app::{Db, Extra, ProcessBroker, TestApp};
use reqwest::StatusCode;
use rustls::pki_types::pem::PemObject;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Short bounds so the tests do not wait for the production defaults.
const FAST_EDGE: &str = r#"
[http]
header_read_timeout = "2s"
request_timeout = "3s"
idle_timeout = "5s"
"#;

/// Sends `head` and returns whatever the server answers until it closes (or `wait`).
async fn raw(addr: SocketAddr, head: &[u8], wait: Duration) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(head).await.unwrap();
    let mut out = vec![];
    let _ = tokio::time::timeout(wait, s.read_to_end(&mut out)).await;
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Half a request head: what a slow client sends, and then nothing.
const HALF_HEAD: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: x\r\n";

/// Opens `n` connections that each send `first` and then nothing.
async fn half_open(addr: SocketAddr, n: usize, first: &[u8]) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        if let Ok(mut s) = TcpStream::connect(addr).await {
            let _ = s.write_all(first).await;
            held.push(s);
        }
    }
    held
}

/// A well-behaved client's request: its status, or `None` if it got no answer in 2 s.
async fn probe(client: &reqwest::Client, url: &str) -> Option<StatusCode> {
    match tokio::time::timeout(Duration::from_secs(2), client.get(url).send()).await {
        Ok(Ok(r)) => Some(r.status()),
        _ => None,
    }
}

/// How long after `since` a new connection was served (`attempt` returns
/// true); fails the test if none was within 8 s (the 2 s deadline, a margin).
async fn served_again<F, Fut>(since: Instant, broker: &ProcessBroker, mut attempt: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    while since.elapsed() < Duration::from_secs(8) {
        if attempt().await {
            return since.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "no connection served within 8 s of the flood; broker log:\n{}",
        broker.log_text()
    );
}

/// Half-open sockets beyond the open-file limit: a good client keeps getting
/// answers (a quick 503 while every slot is held, 200 once the header timeout
/// has closed the slow ones), and all is well once they go.
async fn survives_half_open_flood(app: &TestApp, url: &str, client: reqwest::Client) {
    let broker = app
        .process_with(&[], &["prlimit", "--nofile=256:256", "--"])
        .await;
    // 256 descriptors, less 128 kept back and the store pool's 8.
    assert!(
        broker.log_text().contains("max_connections=120"),
        "the cap is derived from the 256-descriptor limit:\n{}",
        broker.log_text()
    );
    let url = url.replace("PORT", &broker.addr.port().to_string());
    assert_eq!(probe(&client, &url).await, Some(StatusCode::OK));
    let held = half_open(broker.addr, 400, HALF_HEAD).await;
    let flooded = Instant::now();
    // A client that was already connected keeps working.
    assert_eq!(probe(&client, &url).await, Some(StatusCode::OK));
    // A new connection gets an answer at once, never a hang: 503 while every
    // slot is held (or 200 if one just freed).
    let fresh = || {
        format!(
            "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            broker.addr.port()
        )
    };
    let asked = Instant::now();
    let answer = text(&raw(broker.addr, fresh().as_bytes(), Duration::from_secs(3)).await);
    assert!(
        answer.starts_with("HTTP/1.1 503") || answer.starts_with("HTTP/1.1 200"),
        "a new connection during the flood: {answer:?} after {:?}",
        asked.elapsed()
    );
    if answer.starts_with("HTTP/1.1 503") {
        assert!(answer.contains("too_many_connections"), "{answer}");
        // A well-formed answer: its body is exactly as long as it says.
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(body.len(), len, "{answer:?}");
    }
    // Within the header timeout (2 s) plus a margin the slow ones are cut and
    // new connections are served again.
    let ok_after = served_again(flooded, &broker, || async {
        let answer = text(&raw(broker.addr, fresh().as_bytes(), Duration::from_secs(2)).await);
        answer.starts_with("HTTP/1.1 200")
    })
    .await;
    eprintln!("{url}: 200 again {ok_after:?} after 400 half-open connections");
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..20 {
        assert_eq!(probe(&client, &url).await, Some(StatusCode::OK));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_connections_beyond_the_descriptor_limit_do_not_starve_clients() {
    let app = TestApp::builder(Db::Sqlite)
        .extra(Extra {
            config: FAST_EDGE.to_owned(),
            ..Default::default()
        })
        .start()
        .await;
    survives_half_open_flood(
        &app,
        "http://127.0.0.1:PORT/healthz",
        reqwest::Client::new(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_connections_on_the_tls_listener_do_not_starve_clients() {
    tessera_broker::server::install_crypto_provider();
    let pki = crate::support::pki::pki();
    let dir = crate::support::app::TempDir::new();
    let write = |name: &str, text: &str| {
        let p = dir.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let config = format!(
        "[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n{}\nallowed_hosts = [\"tessera.test\"]\n",
        write("server.pem", &pki.server.0),
        write("server.key", &pki.server.1),
        FAST_EDGE
    );
    let app = TestApp::builder(Db::Sqlite)
        .extra(Extra {
            config,
            ..Default::default()
        })
        .start()
        .await;
    let ca = reqwest::Certificate::from_pem(pki.ca_pem.as_bytes()).unwrap();
    let client = |port: u16| {
        reqwest::Client::builder()
            .add_root_certificate(ca.clone())
            .resolve("tessera.test", SocketAddr::from(([127, 0, 0, 1], port)))
            .build()
            .unwrap()
    };
    let broker = app
        .process_with(&[], &["prlimit", "--nofile=256:256", "--"])
        .await;
    let url = format!("https://tessera.test:{}/healthz", broker.addr.port());
    let c = client(broker.addr.port());
    assert_eq!(probe(&c, &url).await, Some(StatusCode::OK));
    // Half-open at the TLS layer: connected, no ClientHello.
    let held = half_open(broker.addr, 400, b"").await;
    let flooded = Instant::now();
    // The connected client keeps working; a new one is served once the
    // handshake deadline (2 s) has cut the silent connections.
    assert_eq!(probe(&c, &url).await, Some(StatusCode::OK));
    let ok_after = served_again(flooded, &broker, || async {
        probe(&client(broker.addr.port()), &url).await == Some(StatusCode::OK)
    })
    .await;
    eprintln!("TLS: 200 again {ok_after:?} after 400 half-open connections");
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..10 {
        assert_eq!(probe(&c, &url).await, Some(StatusCode::OK));
    }
    // An HTTP/2 connection that completes TLS and its preface, then asks for
    // nothing (only frames that keep bytes moving would follow), is dropped
    // after the header deadline, not held until idle_timeout.
    {
        use tokio::io::AsyncWriteExt;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pki.ca_pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let mut tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        tls.alpn_protocols = vec![b"h2".to_vec()];
        let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls));
        let tcp = TcpStream::connect(broker.addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("tessera.test").unwrap();
        let mut stream = connector.connect(name, tcp).await.unwrap();
        assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        stream
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            .await
            .unwrap();
        let opened = Instant::now();
        let mut sink = vec![];
        let closed =
            tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut sink)).await;
        assert!(closed.is_ok(), "a silent HTTP/2 connection was held");
        // header_read_timeout (2 s) and one tick, well before idle_timeout (5 s).
        assert!(
            opened.elapsed() < Duration::from_millis(4500),
            "{:?}",
            opened.elapsed()
        );
    }
    // A foreign Host over TLS is refused like on the plain listener.
    let h1 = reqwest::Client::builder()
        .add_root_certificate(ca)
        .resolve("tessera.test", broker.addr)
        .http1_only()
        .build()
        .unwrap();
    let resp = h1
        .get(&url)
        .header("host", "attacker.example")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::MISDIRECTED_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_body_above_the_cap_is_413_before_any_byte_is_read() {
    let app = TestApp::spawn(Db::Sqlite).await;
    let head = format!(
        "POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
         Content-Length: 10000000000\r\nExpect: 100-continue\r\n\r\n",
        app.addr.port()
    );
    let answer = text(&raw(app.addr, head.as_bytes(), Duration::from_secs(3)).await);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");
    assert!(answer.contains("\"code\":\"body_too_large\""), "{answer}");
    // The unread body ends the connection (it must not be parsed as a request).
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert_eq!(app.count("runs").await, 0);
    // A Content-Length that is not a number is refused as such.
    let head = format!(
        "POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 12abc\r\n\r\n",
        app.addr.port()
    );
    let answer = text(&raw(app.addr, head.as_bytes(), Duration::from_secs(3)).await);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_broker_answers_only_for_loopback_names() {
    let app = TestApp::spawn(Db::Sqlite).await;
    let port = app.addr.port();
    for host in [
        "attacker.example".to_owned(),
        format!("attacker.example:{port}"),
        "127.0.0.1".to_owned(),
        format!("localhost.attacker.example:{port}"),
    ] {
        for path in [
            "/metrics",
            "/readyz",
            "/.well-known/jwks.json",
            "/v1/openapi.json",
        ] {
            let head = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
            let answer = text(&raw(app.addr, head.as_bytes(), Duration::from_secs(3)).await);
            assert!(
                answer.starts_with("HTTP/1.1 421"),
                "{host} {path}: {answer}"
            );
            assert!(answer.contains("\"code\":\"host_not_allowed\""), "{answer}");
            assert!(!answer.contains("\"keys\""), "{answer}");
        }
    }
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LocalHost:{port}"),
    ] {
        let head = format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let answer = text(&raw(app.addr, head.as_bytes(), Duration::from_secs(3)).await);
        assert!(answer.starts_with("HTTP/1.1 200"), "{host}: {answer}");
    }
    // An absolute-form target names the host too.
    let head = format!(
        "GET http://attacker.example/healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    );
    let answer = text(&raw(app.addr, head.as_bytes(), Duration::from_secs(3)).await);
    assert!(answer.starts_with("HTTP/1.1 421"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_does_not_speak_h2c_and_slow_or_idle_clients_are_cut() {
    let app = TestApp::builder(Db::Sqlite)
        .extra(Extra {
            config: FAST_EDGE.to_owned(),
            ..Default::default()
        })
        .start()
        .await;
    // HTTP/2 prior knowledge on the plain port: no SETTINGS frame comes back.
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    let answer = raw(app.addr, preface, Duration::from_secs(3)).await;
    assert!(
        answer.len() < 9 || answer[3] != 0x04,
        "the plain listener answered HTTP/2: {answer:?}"
    );
    // A half-sent head is cut after header_read_timeout (2 s), not held.
    let started = Instant::now();
    let answer = raw(
        app.addr,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
        Duration::from_secs(10),
    )
    .await;
    let cut = started.elapsed();
    assert!(
        cut < Duration::from_secs(6),
        "held {cut:?}: {}",
        text(&answer)
    );
    // A body that never completes: 503 request_timeout after 3 s, nothing stored.
    let key = app.create_runtime("rt-slow", "*", "*").await;
    let started = Instant::now();
    let head = format!(
        "POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
         Authorization: Bearer {key}\r\nContent-Length: 100\r\n\r\n{{\"user\":",
        app.addr.port()
    );
    let answer = text(&raw(app.addr, head.as_bytes(), Duration::from_secs(10)).await);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(8));
    assert_eq!(app.count("runs").await, 0);
    // A kept-alive connection that goes quiet is closed (idle_timeout 5 s).
    let mut s = TcpStream::connect(app.addr).await.unwrap();
    let head = format!(
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n",
        app.addr.port()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).await.unwrap();
    assert!(text(&buf[..n]).starts_with("HTTP/1.1 200"));
    let quiet = Instant::now();
    let mut rest = vec![];
    let closed = tokio::time::timeout(Duration::from_secs(12), s.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "an idle keep-alive connection stayed open");
    eprintln!("idle keep-alive closed after {:?}", quiet.elapsed());
}
