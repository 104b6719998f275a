//! SIGTERM ends the real binary within `[shutdown] timeout`, on the plain and
//! the TLS listener alike, whatever its clients are doing: a request in
//! flight is answered, a connection that holds half a request head (and
//! keeps trickling bytes to it) is closed, and the process exits cleanly.

use crate::support::app::{Db, Extra, ProcessBroker, TestApp};
use nix::sys::signal::Signal;
use rustls::pki_types::pem::PemObject;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// The deadline these brokers are configured with; the head deadline is far
/// longer, so only the shutdown deadline can end a half-sent head.
const DEADLINE: Duration = Duration::from_secs(3);
const CONFIG: &str = "\n[http]\nheader_read_timeout = \"120s\"\n\n[shutdown]\ntimeout = \"3s\"\n";

/// Sends half a request head, then one more header byte every 200 ms (a
/// slow client the head deadline has not cut yet), until the peer closes.
async fn trickle<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) {
    if s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .await
        .is_err()
    {
        return;
    }
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if s.write_all(b"a").await.is_err() {
            return;
        }
    }
}

/// SIGTERM `broker` while `held` connections hold half-sent heads; asserts a
/// clean exit within the deadline (and a little for the process to go).
async fn stops_within_deadline(mut broker: ProcessBroker, held: Vec<tokio::task::JoinHandle<()>>) {
    tokio::time::sleep(Duration::from_millis(500)).await;
    let asked = Instant::now();
    broker.signal(Signal::SIGTERM);
    let status = broker.exited(DEADLINE + Duration::from_secs(7)).await;
    let took = asked.elapsed();
    eprintln!("SIGTERM to exit: {took:?}");
    for h in held {
        h.abort();
    }
    assert!(status.success(), "{status}:\n{}", broker.log_text());
    assert!(
        took < DEADLINE + Duration::from_millis(1500),
        "SIGTERM to exit took {took:?} with a {DEADLINE:?} deadline:\n{}",
        broker.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_half_sent_heads_on_plain_http_exits_within_the_deadline() {
    let app = TestApp::builder(Db::Sqlite)
        .extra(Extra {
            config: CONFIG.into(),
            ..Default::default()
        })
        .start()
        .await;
    let broker = app.process(&[]).await;
    let mut held = vec![];
    for _ in 0..3 {
        let tcp = TcpStream::connect(broker.addr).await.unwrap();
        held.push(tokio::spawn(trickle(tcp)));
    }
    stops_within_deadline(broker, held).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_half_sent_heads_on_tls_exits_within_the_deadline() {
    tessera_broker::server::install_crypto_provider();
    let pki = crate::support::pki::pki();
    let dir = crate::support::app::TempDir::new();
    let write = |name: &str, text: &str| {
        let p = dir.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let config = format!(
        "[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n{CONFIG}",
        write("server.pem", &pki.server.0),
        write("server.key", &pki.server.1),
    );
    let app = TestApp::builder(Db::Sqlite)
        .extra(Extra {
            config,
            ..Default::default()
        })
        .start()
        .await;
    let broker = app.process(&[]).await;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pki.ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls));
    let mut held = vec![];
    for _ in 0..3 {
        let tcp = TcpStream::connect(broker.addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("tessera.test").unwrap();
        let stream = connector.connect(name, tcp).await.unwrap();
        held.push(tokio::spawn(trickle(stream)));
    }
    // And one that never finishes its handshake.
    let silent = TcpStream::connect(broker.addr).await.unwrap();
    held.push(tokio::spawn(async move {
        let _s = silent;
        std::future::pending::<()>().await
    }));
    stops_within_deadline(broker, held).await;
}

/// A request in flight when SIGTERM arrives is answered; a connection made
/// after it is refused; the process still exits within the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_request_in_flight_finish() {
    let app = TestApp::builder(Db::Sqlite)
        .extra(Extra {
            config: CONFIG.into(),
            ..Default::default()
        })
        .start()
        .await;
    let (_key, _run, token) = app.run_for("alice").await;
    let cap = app
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;
    let broker = app
        .process(&[("TESSERA_FAILPOINTS", "exchange.before_issue=sleep(1500)")])
        .await;
    let addr: SocketAddr = broker.addr;
    let client = reqwest::Client::new();
    let in_flight = tokio::spawn({
        let token = cap["token"].as_str().unwrap().to_owned();
        async move {
            client
                .post(format!("http://{addr}/v1/exchange"))
                .json(&serde_json::json!({ "capability": token }))
                .send()
                .await
        }
    });
    broker
        .logged("failpoint exchange.before_issue", Duration::from_secs(10))
        .await;
    let mut broker = broker;
    let asked = Instant::now();
    broker.signal(Signal::SIGTERM);
    let resp = in_flight
        .await
        .unwrap()
        .expect("the request in flight is answered");
    assert_eq!(
        resp.status(),
        reqwest::StatusCode::OK,
        "{:?}",
        resp.text().await
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "a new connection after SIGTERM is refused"
    );
    let status = broker.exited(DEADLINE + Duration::from_secs(7)).await;
    assert!(status.success(), "{status}");
    assert!(asked.elapsed() < DEADLINE + Duration::from_millis(1500));
    let log = broker.log_text();
    assert!(log.contains("shutting down"), "{log}");
}
