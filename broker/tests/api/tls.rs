//! TLS termination and mTLS for runtimes, with certificates made on the fly.

use crate::support::app::{assert_error, TempDir};
use crate::support::pki::{pki, Pki};
use reqwest::StatusCode;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use tessera_broker::boot::{Broker, Jobs};
use tessera_broker::config::{Config, Overrides};
use tessera_broker::secret::AdminToken;

fn client(pki: &Pki, addr: SocketAddr, identity: Option<&(String, String)>) -> reqwest::Client {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(pki.ca_pem.as_bytes()).unwrap())
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
    };
    reqwest::Client::builder()
        .use_preconfigured_tls(config)
        .resolve("tessera.test", addr)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_mtls_for_runtimes() {
    tessera_broker::server::install_crypto_provider();
    let pki = pki();
    let dir = TempDir::new();
    let write = |name: &str, text: &str| {
        let p = dir.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let toml = format!(
        "[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\nclient_ca_file = \"{}\"\n\n\
         [http]\nallowed_hosts = [\"tessera.test\"]\n\n{}",
        write("server.pem", &pki.server.0),
        write("server.key", &pki.server.1),
        write("ca.pem", &pki.ca_pem),
        crate::support::app::TEST_CONFIG
    );
    let store = format!("sqlite://{}", dir.0.join("t.db").display());
    let env = move |k: &str| (k == "TESSERA_STORE_URL").then(|| store.clone());
    crate::support::app::write_policy_dir(&dir.0.join("policy"));
    let overrides = Overrides {
        dev: true,
        data_dir: Some(dir.0.clone()),
        policy_dir: Some(dir.0.join("policy")),
        ..Default::default()
    };
    let config = Config::from_toml(&toml, &overrides, &env).unwrap();
    // The dev broker's admin token where it reads it; its KEK it makes.
    let admin = AdminToken::generate();
    tessera_broker::private_fs::write_new(&dir.0.join("admin.token"), admin.expose_secret())
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let broker = Broker::build_on(config, listener).await.unwrap();
    tokio::spawn(broker.run_until_stopped(Jobs::ReplicaSync, std::future::pending()));
    let url = |p: &str| format!("https://tessera.test:{}{p}", addr.port());

    // Plain HTTP to the TLS port gets nothing.
    assert!(reqwest::get(format!("http://{addr}/healthz"))
        .await
        .is_err());

    let anonymous = client(&pki, addr, None);
    let runtime = client(&pki, addr, Some(&pki.client));
    assert_eq!(
        anonymous
            .get(url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    let created: Value = anonymous
        .post(url("/v1/admin/runtimes"))
        .bearer_auth(admin.expose_secret())
        .json(&json!({ "name": "rt" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let key = created["key"].as_str().unwrap();
    let run_body = json!({ "user": "alice", "task": { "id": "t", "kind": "summarize" } });

    // A runtime key without a client certificate is refused.
    let resp = anonymous
        .post(url("/v1/runs"))
        .bearer_auth(key)
        .json(&run_body)
        .send()
        .await
        .unwrap();
    assert_error(
        resp,
        StatusCode::UNAUTHORIZED,
        "client_certificate_required",
    )
    .await;
    // A certificate from another CA does not even complete the handshake.
    let rogue = client(&pki, addr, Some(&pki.rogue));
    assert!(rogue
        .post(url("/v1/runs"))
        .bearer_auth(key)
        .json(&run_body)
        .send()
        .await
        .is_err());
    // With the runtime's certificate it works.
    let resp = runtime
        .post(url("/v1/runs"))
        .bearer_auth(key)
        .json(&run_body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let run: Value = resp.json().await.unwrap();
    // The tool in the sandbox has no certificate and needs none.
    let resp = anonymous
        .post(url("/v1/capabilities"))
        .bearer_auth(run["run_token"].as_str().unwrap())
        .json(&json!({ "action": "read", "resource": "svc-reports:reports/q1" }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);

    // Pinned runtime: only its own certificate carries its key, not any from the CA.
    let pem = CertificateDer::from_pem_slice(pki.client.0.as_bytes()).unwrap();
    let pin = tessera_broker::ids::sha256_hex(pem.as_ref());
    let pinned: Value = anonymous
        .post(url("/v1/admin/runtimes"))
        .bearer_auth(admin.expose_secret())
        .json(&json!({ "name": "pinned", "client_cert_sha256": pin }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pinned_key = pinned["key"].as_str().unwrap();
    let other = client(&pki, addr, Some(&pki.other_client));
    let resp = other
        .post(url("/v1/runs"))
        .bearer_auth(pinned_key)
        .json(&run_body)
        .send()
        .await
        .unwrap();
    assert_error(
        resp,
        StatusCode::UNAUTHORIZED,
        "client_certificate_mismatch",
    )
    .await;
    let resp = runtime
        .post(url("/v1/runs"))
        .bearer_auth(pinned_key)
        .json(&run_body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    // The unpinned runtime still works from any CA-issued certificate.
    let resp = other
        .post(url("/v1/runs"))
        .bearer_auth(key)
        .json(&run_body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
}

/// An early refusal over HTTP/2 (before the handler reads the request body)
/// reaches the client as the JSON error, not as a stream reset: with curl
/// (nghttp2) and with the Rust client, bodies small and larger than the
/// stream's initial flow-control window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_refusals_over_http2_arrive_as_json() {
    use crate::support::app::{Db, Extra, TestApp};
    tessera_broker::server::install_crypto_provider();
    let pki = pki();
    let dir = TempDir::new();
    let write = |name: &str, text: &str| {
        let p = dir.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let ca = write("ca.pem", &pki.ca_pem);
    let config = format!(
        "[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\nclient_ca_file = \"{ca}\"\n\n\
         [http]\nallowed_hosts = [\"tessera.test\", \"localhost\"]\n",
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
    let port = broker.addr.port();
    let url = |p: &str| format!("https://tessera.test:{port}{p}");
    let key = {
        let c = client(&pki, broker.addr, None);
        let v: Value = c
            .post(url("/v1/admin/runtimes"))
            .bearer_auth(&app.admin_token)
            .json(&json!({ "name": "rt" }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["key"].as_str().unwrap().to_owned()
    };
    for size in [200usize, 50_000] {
        let filler = "x".repeat(size);
        let body = json!({ "user": "alice", "task": { "id": "t", "kind": "summarize", "attributes": { "pad": filler } } });
        let body_file = dir.0.join("body.json");
        std::fs::write(&body_file, body.to_string()).unwrap();
        for (path, bearer, code) in [
            ("/v1/runs", key.as_str(), "client_certificate_required"),
            ("/v1/capabilities", "tsr_run_garbage", "unauthenticated"),
        ] {
            let out = std::process::Command::new("curl")
                // What is under test is HTTP/2 framing, not trust: curl's
                // OpenSSL is not given the test CA's chain rules (-k).
                .args(["-sS", "-k", "--http2", "--resolve"])
                .arg(format!("tessera.test:{port}:127.0.0.1"))
                .args(["-H", "content-type: application/json", "-H"])
                .arg(format!("authorization: Bearer {bearer}"))
                .arg("--data-binary")
                .arg(format!("@{}", body_file.display()))
                .args(["-w", "\n%{http_version} %{http_code}"])
                .arg(url(path))
                .output()
                .expect("curl");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "curl {path} ({size} B body): {}\n{stdout}",
                String::from_utf8_lossy(&out.stderr)
            );
            let (json_text, tail) = stdout.rsplit_once('\n').unwrap();
            assert_eq!(tail, "2 401", "{stdout}");
            let v: Value = serde_json::from_str(json_text).unwrap();
            assert_eq!(v["error"]["code"], code, "{v}");
        }
    }
    // A request the handler reads is served as before.
    {
        let body_file = dir.0.join("ok.json");
        std::fs::write(
            &body_file,
            json!({ "user": "alice", "task": { "id": "t", "kind": "summarize" } }).to_string(),
        )
        .unwrap();
        let out = std::process::Command::new("curl")
            .args(["-sS", "-k", "--http2", "--resolve"])
            .arg(format!("tessera.test:{port}:127.0.0.1"))
            .arg("--cert")
            .arg(write("client.pem", &pki.client.0))
            .arg("--key")
            .arg(write("client.key", &pki.client.1))
            .args(["-H", "content-type: application/json", "-H"])
            .arg(format!("authorization: Bearer {key}"))
            .arg("--data-binary")
            .arg(format!("@{}", body_file.display()))
            .args(["-w", "\n%{http_version} %{http_code}"])
            .arg(url("/v1/runs"))
            .output()
            .expect("curl");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.ends_with("2 201"), "{stdout}");
    }
    // The Rust client negotiates HTTP/2 over TLS and gets the refusal as its
    // error, with its code (not a stream reset).
    let rust = tessera_client::Client::builder()
        .address(format!("https://localhost:{port}"))
        .ca_pem(pki.ca_pem.clone())
        .run_token(secrecy::SecretString::from("tsr_run_garbage".to_owned()))
        .build()
        .unwrap();
    match rust.capability("read", "svc-reports:reports/q1").await {
        Err(tessera_client::Error::Unauthenticated { code, .. }) => {
            assert_eq!(code, "unauthenticated")
        }
        other => panic!("expected 401 unauthenticated, got {other:?}"),
    }
    let log = std::fs::read_to_string(&broker.log).unwrap();
    assert!(
        log.lines().any(|l| l.contains("version=HTTP/2.0")
            && l.contains("/v1/capabilities")
            && l.contains("request refused")),
        "the Rust client's request was not HTTP/2:\n{log}"
    );
}
