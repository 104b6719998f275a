//! The client library (`tessera-client`) against the real broker on port 0: every
//! error variant comes from a real response; 503s are retried until the broker
//! recovers; credentials are refreshed before they expire; nothing secret shows in
//! `Debug`.

use crate::support::app::{Db, TestApp};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tessera_client::{Client, Error, RetryPolicy};
use tokio::net::{TcpListener, TcpStream};

fn client(app: &TestApp, run_token: &str, retry: RetryPolicy) -> Client {
    Client::builder()
        .address(app.url(""))
        .run_token(secrecy::SecretString::from(run_token.to_owned()))
        .retry(retry)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_variant_comes_from_a_real_response() {
    let app = TestApp::spawn(Db::Sqlite).await;
    let (key, run_id, token) = app.run_for("alice").await;
    let c = client(&app, &token, RetryPolicy::none());

    let cap = c
        .capability("read", "svc-reports:reports/q1")
        .await
        .unwrap();
    assert_eq!(cap.uses, 3);
    let ex = c.exchange(&cap).await.unwrap();
    assert_eq!(ex.kind, "token");
    assert!(ex.field("token").is_some());
    for shown in [format!("{cap:?}"), format!("{ex:?}"), format!("{c:?}")] {
        assert!(!shown.contains(cap.token()), "{shown}");
        assert!(!shown.contains(&token), "{shown}");
        assert!(!shown.contains(ex.field("token").unwrap().as_str().unwrap()));
    }

    match c.capability("read", "svc-reports:secret").await {
        Err(Error::Denied {
            code, request_id, ..
        }) => {
            assert_eq!(code, "capability_denied");
            assert!(request_id.starts_with("req_"));
        }
        other => panic!("{other:?}"),
    }
    match c.capability("write", "svc-nope:x").await {
        Err(Error::Rejected { code, .. }) => assert_eq!(code, "unknown_backend"),
        other => panic!("{other:?}"),
    }
    assert!(c.revoke(&cap).await.unwrap());
    assert!(!c.revoke(&cap).await.unwrap(), "already revoked");
    match c.exchange(&cap).await {
        Err(Error::Expired { code, .. }) => assert_eq!(code, "capability_revoked"),
        other => panic!("{other:?}"),
    }

    // approval_required: bob's invoke permit needs a human.
    let (_k, _r, bob) = app.run_for("bob").await;
    let cb = client(&app, &bob, RetryPolicy::none());
    assert!(matches!(
        cb.capability("invoke", "svc-reports:deploy").await,
        Err(Error::ApprovalRequired { .. })
    ));

    // rate_limited: rita may have 3 per minute.
    let (_k, _r, rita) = app.run_for("rita").await;
    let cr = client(&app, &rita, RetryPolicy::none());
    for i in 0..3 {
        cr.capability("read", &format!("svc-reports:r/{i}"))
            .await
            .unwrap();
    }
    match cr.capability("read", "svc-reports:r/4").await {
        Err(Error::RateLimited { retry_after, .. }) => {
            assert!(retry_after >= Duration::from_secs(1) && retry_after <= Duration::from_secs(60))
        }
        other => panic!("{other:?}"),
    }

    // Expiry: a short capability, then the clock moves past it.
    let short = c
        .capability_for("read", "svc-reports:reports/q2", Some("1m"))
        .await
        .unwrap();
    app.state.clock.advance(Duration::from_secs(61));
    match c.exchange(&short).await {
        Err(Error::Expired { code, .. }) => assert_eq!(code, "token_expired"),
        other => panic!("{other:?}"),
    }

    // The run ends: everything is over for it.
    app.end_run(&key, &run_id).await;
    match c.capability("read", "svc-reports:reports/q3").await {
        Err(Error::Expired { code, .. }) => assert_eq!(code, "run_ended"),
        other => panic!("{other:?}"),
    }

    // A token the broker does not know.
    let bogus = client(
        &app,
        &format!("tsr_run_{}", "Q".repeat(43)),
        RetryPolicy::none(),
    );
    assert!(matches!(
        bogus.capability("read", "svc-reports:x").await,
        Err(Error::Unauthenticated { .. })
    ));

    // Nobody listening: unavailable, after the retries allowed.
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nowhere = Client::builder()
        .address(format!("http://127.0.0.1:{port}"))
        .run_token(secrecy::SecretString::from(token.clone()))
        .retry(RetryPolicy {
            max_retries: 2,
            base: Duration::from_millis(10),
            ..Default::default()
        })
        .build()
        .unwrap();
    assert!(matches!(
        nowhere.capability("read", "svc-reports:x").await,
        Err(Error::Unavailable { code: None, .. })
    ));
}

/// A TCP proxy to PostgreSQL that can be taken down (connections dropped at once)
/// and brought back.
struct Switch {
    port: u16,
    up: Arc<AtomicBool>,
}

impl Switch {
    async fn start() -> Switch {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let flag = up.clone();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let flag = flag.clone();
                tokio::spawn(async move {
                    if !flag.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Ok(mut outbound) = TcpStream::connect("127.0.0.1:5432").await {
                        // Forward until the switch goes down, then cut the connection.
                        let copy = tokio::io::copy_bidirectional(&mut inbound, &mut outbound);
                        let watch = async {
                            while flag.load(Ordering::SeqCst) {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                        };
                        tokio::select! { _ = copy => {}, _ = watch => {} }
                    }
                });
            }
        });
        Switch { port, up }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_is_retried_until_the_broker_recovers() {
    let switch = Switch::start().await;
    let server = crate::support::app::pg_url()
        .replace("127.0.0.1:5432", &format!("127.0.0.1:{}", switch.port));
    let app = TestApp::builder(Db::Postgres)
        .pg_server(server)
        .start()
        .await;
    let (_k, _r, token) = app.run_for("alice").await;

    // Store down: without retries the client reports the broker's 503.
    switch.up.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let once = client(&app, &token, RetryPolicy::none());
    match once.capability("read", "svc-reports:reports/q1").await {
        Err(Error::Unavailable { code, .. }) => {
            assert_eq!(code.as_deref(), Some("store_unavailable"))
        }
        other => panic!("{other:?}"),
    }

    // With retries, the same request succeeds once the store is back.
    let patient = client(
        &app,
        &token,
        RetryPolicy {
            max_retries: 20,
            base: Duration::from_millis(100),
            max_backoff: Duration::from_millis(400),
            budget: Duration::from_secs(20),
        },
    );
    let up = switch.up.clone();
    let heal = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(800)).await;
        up.store(true, Ordering::SeqCst);
    });
    let cap = patient
        .capability("read", "svc-reports:reports/q1")
        .await
        .expect("succeeds after the store recovers");
    heal.await.unwrap();
    assert_eq!(cap.uses, 3);
    // Decisions are not retried: a denial comes back at once.
    let started = std::time::Instant::now();
    assert!(matches!(
        patient.capability("read", "svc-reports:secret").await,
        Err(Error::Denied { .. })
    ));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_refreshed_before_they_expire() {
    let app = TestApp::spawn(Db::Sqlite).await;
    let (_k, _r, token) = app.run_for("ursula").await;
    let c = client(&app, &token, RetryPolicy::none());
    // A clock the test moves: the broker's and the refresher's, in step.
    let broker_clock = app.state.clock.clone();
    let now: tessera_client::refresh::Now = Arc::new(move || {
        SystemTime::UNIX_EPOCH + Duration::from_millis(broker_clock.now_ms() as u64)
    });
    let fetch_client = c.clone();
    let fresh = tessera_client::refresh::Refreshing::new(Duration::from_secs(60), move || {
        let c = fetch_client.clone();
        async move {
            let cap = c
                .capability_for("read", "svc-reports:r/1", Some("5m"))
                .await?;
            let ex = c.exchange(&cap).await?;
            let expires = ex.expires().expect("expiry");
            Ok((ex.lease_id.clone(), expires))
        }
    })
    .with_clock(now);

    let first = fresh.get().await.unwrap();
    assert_eq!(fresh.get().await.unwrap(), first, "reused while fresh");
    // 5 min lifetime: refreshed 60 s before expiry, not earlier.
    app.state.clock.advance(Duration::from_secs(238));
    assert_eq!(fresh.get().await.unwrap(), first);
    app.state.clock.advance(Duration::from_secs(3));
    let second = fresh.get().await.unwrap();
    assert_ne!(second, first, "a new lease before the old one expired");
}

/// A broker that answers every request with `status` and Tessera error `code`,
/// counting the requests it gets.
async fn fixed_answer(
    status: u16,
    code: &'static str,
) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut got = Vec::new();
                // Read the head and the declared body, then answer and close.
                loop {
                    let Ok(n) = conn.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got);
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if got.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                seen.fetch_add(1, Ordering::SeqCst);
                let body = format!(
                    r#"{{"error":{{"code":"{code}","message":"m","request_id":"req_x"}}}}"#
                );
                let resp = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(resp.as_bytes()).await;
            });
        }
    });
    (format!("http://{addr}"), count)
}

/// A refusal that may have followed a request that took effect (a 503
/// `request_timeout`), or that says the request failed for good (500, 502), is
/// never sent again: a capability or an exchange could be issued twice. Only
/// what certainly issued nothing and may pass (`store_unavailable`,
/// `backend_throttled`, 429, no answer) is retried.
#[tokio::test]
async fn only_what_issued_nothing_is_retried() {
    let patient = RetryPolicy {
        max_retries: 3,
        base: Duration::from_millis(10),
        max_backoff: Duration::from_millis(20),
        budget: Duration::from_secs(5),
    };
    for (status, code, tries) in [
        (503, "request_timeout", 1),
        (500, "internal", 1),
        (502, "backend_refused", 1),
        (503, "backend_unsafe_defaults", 1),
        (503, "store_unavailable", 4),
        (503, "backend_throttled", 4),
    ] {
        let (addr, count) = fixed_answer(status, code).await;
        let c = Client::builder()
            .address(addr)
            .run_token(secrecy::SecretString::from(format!(
                "tsr_run_{}",
                "a".repeat(43)
            )))
            .retry(patient)
            .build()
            .unwrap();
        let err = c
            .capability("read", "svc-reports:reports/q1")
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some(code), "{err}");
        assert_eq!(count.load(Ordering::SeqCst), tries, "{status} {code}");
    }
}
