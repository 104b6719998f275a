//! Credential injection at the gateway against real servers on loopback: HTTPS
//! APIs with their own CA (trusted by the gateway as its "system roots" through
//! `gateway.upstream_roots`), moto behind TLS for SigV4, a DNS server the test
//! controls, and curl, Python `requests` and `tessera exec` as the tools. The
//! upstreams report what they received without repeating any credential (the
//! SHA-256 of `Authorization`), so the tools' output can be searched for it.

use crate::support::app::{Db, Extra, TestApp};
use crate::support::dns::Dns;
use crate::support::egress::{approve, audit_rows, code};
use crate::support::moto::{moto, EXTERNAL_ID, ROLE};
use crate::support::upstream::{tls_front, TestCa, Upstream};
use serde_json::{json, Value};
use sha2::Digest;
use std::net::SocketAddr;
use std::path::PathBuf;

const POLICY: &str = r#"
@id("inject-hosts")
@allow_addresses("127.0.0.0/8")
permit (principal == Tessera::User::"alice", action == Tessera::Action::"connect", resource)
when { resource.kind == "net" &&
  (resource.path like "*.inject.test:*" || resource.path like "allowed.test:*") };

@id("api-acme")
permit (principal == Tessera::User::"alice", action in [Tessera::Action::"GET", Tessera::Action::"POST"], resource)
when { resource.backend == "api" && resource.path like "/api/repos/acme/*" };

@id("api-acme-secret")
forbid (principal, action, resource)
when { resource.backend == "api" && resource.path like "/api/repos/acme/secret*" };

@id("api-only-json")
forbid (principal, action == Tessera::Action::"POST", resource)
when { resource.backend == "api" && context has arguments &&
  !(context.arguments.headers.contains("content-type=application/json")) };

@id("api-gated-issues")
@approval("group:release")
permit (principal == Tessera::User::"alice", action == Tessera::Action::"POST", resource)
when { resource.backend == "api" && resource.path like "/api/repos/gated/*" };

@id("api2-read")
permit (principal == Tessera::User::"alice", action == Tessera::Action::"GET", resource)
when { resource.backend == "api2" && context has arguments && context.arguments.host == "api2.inject.test" };

@id("s3-reports")
permit (principal == Tessera::User::"alice", action in [Tessera::Action::"GET", Tessera::Action::"PUT"], resource)
when { resource.backend == "s3" && resource.path like "/tessera-reports/reports/*" };
"#;

struct Env {
    app: TestApp,
    _dns: Dns,
    gateway: SocketAddr,
    api: Upstream,
    api2: Upstream,
    plain: Upstream,
    tls: Upstream,
    secret: String,
    test_ca: PathBuf,
    dir: crate::support::app::TempDir,
    _moto_front: Option<tokio::task::JoinHandle<()>>,
    s3_port: u16,
}

/// The injection environment; `gateway` is more of the `[gateway]` table.
async fn env_with(gateway: &str) -> Env {
    let dns = Dns::start().await;
    let ca = TestCa::new();
    let dir = crate::support::app::TempDir::new();
    let test_ca = dir.0.join("test-ca.pem");
    std::fs::write(&test_ca, &ca.pem).unwrap();
    let api = Upstream::https(&ca, &["api.inject.test"]).await;
    let api2 = Upstream::https(&ca, &["api2.inject.test"]).await;
    let tls = Upstream::https(&ca, &["allowed.test"]).await;
    let plain = Upstream::http().await;
    let m = moto();
    let moto_addr: SocketAddr = m
        .endpoint
        .trim_start_matches("http://")
        .parse()
        .expect("moto on IP:PORT");
    let (s3_port, front) = tls_front(&ca, &["s3.inject.test"], moto_addr).await;
    for name in [
        "api.inject.test",
        "api2.inject.test",
        "s3.inject.test",
        "allowed.test",
    ] {
        dns.set(name, vec![vec!["127.0.0.1"]]);
    }
    let secret = format!(
        "sk-inject-{}",
        tessera_broker::ids::new_id().replace('-', "")
    );
    let config = format!(
        r#"
[backends.net]
kind = "net"

[backends.api]
kind = "http"
hosts = ["api.inject.test:{api}"]
requests = ["GET /api/repos/*", "POST /api/repos/*/issues", "DELETE /api/repos/*"]
secret_env = "TEST_API_SECRET"
placeholder_env = "API_TOKEN"
policy_headers = ["content-type"]

[backends.api2]
kind = "http"
hosts = ["api2.inject.test:{api2}"]
requests = ["* /api/*"]
auth = "token"
token_backend = "svc"

[backends.svc]
kind = "token"
audience = "https://svc.internal"

[backends.aws-main]
kind = "aws-sts"
role_arn = "arn:aws:iam::{account}:role/{ROLE}"
region = "us-east-1"
endpoint_url = "{endpoint}"
external_id = "{EXTERNAL_ID}"

[backends.s3]
kind = "http"
hosts = ["s3.inject.test:{s3_port}"]
requests = ["GET /tessera-reports/*", "PUT /tessera-reports/*"]
auth = "sigv4"
aws_backend = "aws-main"
aws_service = "s3"

[gateway]
listen = "127.0.0.1:0"
nameservers = ["{dns}"]
upstream_roots = "{roots}"
{gateway}
"#,
        api = api.port(),
        api2 = api2.port(),
        account = crate::support::moto::ACCOUNT,
        endpoint = m.endpoint,
        dns = dns.addr,
        roots = test_ca.display(),
    );
    let mut env = crate::support::aws::broker_env();
    env.push(("TEST_API_SECRET".into(), secret.clone()));
    let app = TestApp::builder(Db::Sqlite)
        .extra(Extra {
            config,
            policy: POLICY.to_owned(),
            env,
        })
        .start()
        .await;
    let gateway = app.gateway.expect("[gateway]");
    Env {
        app,
        _dns: dns,
        gateway,
        api,
        api2,
        plain,
        tls,
        secret,
        test_ca,
        dir,
        _moto_front: Some(front),
        s3_port,
    }
}

async fn env() -> Env {
    env_with("").await
}

impl Env {
    /// The run's CA (written to a file) and placeholders.
    async fn session(&self, token: &str) -> (PathBuf, Value) {
        let resp = self
            .app
            .post("/v1/gateway/session", Some(token), json!({}))
            .await;
        let status = resp.status();
        let v: Value = resp.json().await.unwrap();
        assert_eq!(status, 200, "{v}");
        let path = self
            .dir
            .0
            .join(format!("run-ca-{}.pem", tessera_broker::ids::new_id()));
        std::fs::write(&path, v["ca_pem"].as_str().unwrap()).unwrap();
        (path, v)
    }

    fn auth_hash(&self) -> String {
        let expected = format!("Bearer {}", self.secret);
        tessera_broker::ids::hex(&sha2::Sha256::digest(expected.as_bytes()))
    }
}

fn placeholder(session: &Value, backend: &str) -> String {
    session["placeholders"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["backend"] == backend)
        .unwrap()["value"]
        .as_str()
        .unwrap()
        .to_owned()
}

struct Curl {
    code: i32,
    status: String,
    body: String,
}

async fn curl(e: &Env, token: &str, ca: &std::path::Path, url: &str, extra: &[&str]) -> Curl {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--max-time", "20", "--noproxy", ""])
        .args(["--proxy", &format!("http://{}", e.gateway)])
        .args([
            "--proxy-header",
            &format!("Proxy-Authorization: Bearer {token}"),
        ])
        .args(["--cacert", ca.to_str().unwrap()])
        .args(["-w", "\n%{http_code}"])
        .args(extra)
        .arg(url)
        .output()
        .await
        .expect("curl runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    Curl {
        code: out.status.code().unwrap_or(-1),
        status: status.to_owned(),
        body: format!("{body}{}", String::from_utf8_lossy(&out.stderr)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_gets_the_rules_credential_and_never_the_tools() {
    let e = env().await;
    let (_, run_id, token) = e.app.run_for("alice").await;
    let (ca, session) = e.session(&token).await;
    assert_eq!(
        session["hosts"],
        json!(["api.inject.test", "api2.inject.test", "s3.inject.test"])
    );
    let ph = placeholder(&session, "api");
    assert!(ph.starts_with("tsr_ph_"), "{ph}");

    // curl: its own Authorization and the placeholder in another header are
    // both taken off; the API sees the rule's bearer secret.
    let url = format!(
        "https://api.inject.test:{}/api/repos/acme/site?token=abc",
        e.api.port()
    );
    let got = curl(
        &e,
        &token,
        &ca,
        &url,
        &[
            "-H",
            "Authorization: Bearer tool-own-key",
            "-H",
            &format!("X-Api-Key: {ph}"),
        ],
    )
    .await;
    assert_eq!((got.code, got.status.as_str()), (0, "200"), "{}", got.body);
    assert!(
        got.body
            .contains("method=GET path=/api/repos/acme/site?token=abc"),
        "{}",
        got.body
    );
    assert!(
        got.body.contains(&format!("auth_sha256={}", e.auth_hash())),
        "{}",
        got.body
    );
    assert!(
        !got.body.contains("x-api-key"),
        "the placeholder's header is stripped: {}",
        got.body
    );
    assert!(!got.body.contains("proxy-authorization"), "{}", got.body);
    assert!(
        !got.body.contains("cookie") && !got.body.contains("x-forwarded"),
        "{}",
        got.body
    );
    assert!(
        !got.body.to_ascii_lowercase().contains("set-cookie"),
        "a session opened on the injected key never reaches the tool: {}",
        got.body
    );

    // Python requests with the placeholder where the SDK wants its key.
    let script = format!(
        "import requests\n\
         r = requests.post('https://api.inject.test:{port}/api/repos/acme/site/issues', json={{'title': 'x'}},\n\
             headers={{'Authorization': 'Bearer {ph}'}}, proxies={{'https': 'http://run:{token}@{gw}'}}, verify='{ca}', timeout=20)\n\
         print(r.status_code, r.text)\n",
        port = e.api.port(),
        gw = e.gateway,
        ca = ca.display(),
    );
    let out = tokio::process::Command::new(crate::support::moto::python())
        .args(["-c", &script])
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.starts_with("200 method=POST path=/api/repos/acme/site/issues"),
        "{text}"
    );
    assert!(
        text.contains(&format!("auth_sha256={}", e.auth_hash())),
        "{text}"
    );

    // The token rule: a JWT minted for this one request, for the backend's audience.
    let got = curl(
        &e,
        &token,
        &ca,
        &format!("https://api2.inject.test:{}/api/v1/x", e.api2.port()),
        &[],
    )
    .await;
    assert_eq!(got.status, "200", "{}", got.body);
    let claims = got
        .body
        .split("jwt_claims=")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    use base64::Engine as _;
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(claims)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["aud"], "https://svc.internal");
    assert_eq!(claims["scope"], "GET");
    assert_eq!(claims["resource"], "/api/v1/x");
    assert_eq!(claims["sub"], "alice");
    assert_eq!(claims["act"]["sub"], format!("run:{run_id}"));
    assert!(claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap() <= 60);

    // Every request recorded: method, rule, path, query redacted, status, bytes.
    let requests = audit_rows(&e.app, &run_id, "egress.request", 3).await;
    let first = requests
        .iter()
        .find(|r| r["resource"] == "api:/api/repos/acme/site" && r["action"] == "GET")
        .expect("the GET's row");
    let detail = first["detail"].as_str().unwrap();
    assert!(
        detail.contains("rule=api") && detail.contains("query=redacted"),
        "{detail}"
    );
    assert!(!detail.contains("abc"), "{detail}");
    let responses = audit_rows(&e.app, &run_id, "egress.response", 3).await;
    assert!(
        responses.iter().all(|r| r["reason"] == "200"),
        "{responses:?}"
    );
    assert!(responses
        .iter()
        .all(|r| r["detail"].as_str().unwrap().contains("bytes_down=")));

    // The credential is nowhere: not in the audit, not in the tools' output.
    let everything = e.app.audit(&format!("run={run_id}&limit=1000")).await;
    let dump = serde_json::to_string(&everything).unwrap();
    assert!(!dump.contains(&e.secret));
    assert!(!text.contains(&e.secret) && !got.body.contains(&e.secret));
}

/// `@approval` on an injected request means what it means at
/// `/v1/capabilities`: Python `requests` gets `403 approval_pending` with
/// `Tessera-Approval-Id`, nothing reaches the API, and approvers see the method,
/// host, path, the query (by hash: the rule keeps it out of records), the
/// headers policy reads and the body's SHA-256 (and its text); once approved, the
/// identical request (here from curl) passes exactly once; a second retry
/// and a changed body each ask anew. (Written first against the gateway that
/// refused gated requests as `request_denied`; it failed there.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_request_is_approved_for_its_exact_body_and_passes_once() {
    let e = env().await;
    let (_, run_id, token) = e.app.run_for("alice").await;
    let (ca, _) = e.session(&token).await;
    let url = format!(
        "https://api.inject.test:{}/api/repos/gated/issues?label=release",
        e.api.port()
    );
    let body = r#"{"title": "ship 4f2a9c1"}"#;
    let script = format!(
        "import requests\n\
         r = requests.post('{url}', data={body:?}, headers={{'Content-Type': 'application/json'}},\n\
             proxies={{'https': 'http://run:{token}@{gw}'}}, verify='{ca}', timeout=20)\n\
         print(r.status_code, r.headers.get('Tessera-Approval-Id'), r.json()['error']['code'])\n",
        gw = e.gateway,
        ca = ca.display(),
    );
    let out = tokio::process::Command::new(crate::support::moto::python())
        .args(["-c", &script])
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut words = text.split_whitespace();
    assert_eq!(words.next(), Some("403"), "{text}");
    let first = words.next().unwrap().to_owned();
    assert_eq!(words.next(), Some("approval_pending"), "{text}");
    assert!(
        !e.api.seen().iter().any(|r| r.contains("/gated/")),
        "nothing reaches the API before the approval: {:?}",
        e.api.seen()
    );

    let seen: Value = e
        .app
        .get(&format!("/v1/approvals/{first}"), Some(&token))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(seen["status"], "pending", "{seen}");
    assert_eq!(
        (seen["action"].as_str(), seen["resource"].as_str()),
        (Some("POST"), Some("api:/api/repos/gated/issues"))
    );
    let args = &seen["arguments"];
    assert_eq!(args["method"], "POST", "{seen}");
    assert_eq!(
        args["host"],
        format!("api.inject.test:{}", e.api.port()),
        "{seen}"
    );
    assert_eq!(args["path"], "/api/repos/gated/issues", "{seen}");
    // The rule keeps queries out of records (log_query = false): bound by hash.
    assert_eq!(args["query"], "redacted", "{seen}");
    assert_eq!(
        args["query_sha256"],
        tessera_broker::ids::sha256_hex(b"label=release"),
        "{seen}"
    );
    assert_eq!(
        args["headers"],
        json!(["content-type=application/json"]),
        "{seen}"
    );
    assert_eq!(
        args["body_sha256"],
        tessera_broker::ids::sha256_hex(body.as_bytes()),
        "{seen}"
    );
    assert_eq!(args["body"], body, "{seen}");

    approve(&e.app, "dana", &first).await;

    let post = |data: &'static str| {
        let (e, token, ca, url) = (&e, token.clone(), ca.clone(), url.clone());
        async move {
            let extra = [
                "-X",
                "POST",
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                data,
                "-D",
                "-",
            ];
            curl(e, &token, &ca, &url, &extra).await
        }
    };
    let approval_of = |c: &Curl| {
        c.body.lines().find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("tessera-approval-id")
                .then(|| value.trim().to_owned())
        })
    };
    let passed = post(r#"{"title": "ship 4f2a9c1"}"#).await;
    assert_eq!(passed.status, "200", "{}", passed.body);
    assert!(
        passed
            .body
            .contains("method=POST path=/api/repos/gated/issues?label=release"),
        "{}",
        passed.body
    );
    assert!(
        passed
            .body
            .contains(&format!("auth_sha256={}", e.auth_hash())),
        "{}",
        passed.body
    );
    let again = post(r#"{"title": "ship 4f2a9c1"}"#).await;
    assert_eq!(again.status, "403", "{}", again.body);
    assert!(again.body.contains("approval_pending"), "{}", again.body);
    let second = approval_of(&again).expect("a new approval");
    assert_ne!(second, first, "an approval lets one request through");
    let changed = post(r#"{"title": "ship 0000000"}"#).await;
    assert_eq!(changed.status, "403", "{}", changed.body);
    let third = approval_of(&changed).expect("a new approval");
    assert!(
        third != first && third != second,
        "another body is another request"
    );
    assert_eq!(
        e.api
            .seen()
            .iter()
            .filter(|r| r.contains("/gated/"))
            .count(),
        1,
        "{:?}",
        e.api.seen()
    );

    let requests = audit_rows(&e.app, &run_id, "egress.request", 1).await;
    let gated: Vec<&Value> = requests
        .iter()
        .filter(|r| r["resource"] == "api:/api/repos/gated/issues")
        .collect();
    assert_eq!(gated.len(), 1, "{requests:?}");
    assert!(
        gated[0]["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("approval={first}")),
        "{gated:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_outside_the_rule_or_policy_are_refused_before_anything_is_sent() {
    let e = env().await;
    let (_, run_id, token) = e.app.run_for("alice").await;
    let (ca, _) = e.session(&token).await;
    let base = format!("https://api.inject.test:{}", e.api.port());
    let cases: [(&str, &str, &[&str], &str, &str); 13] = [
        (
            "a method override",
            "/api/repos/acme/site",
            &["-H", "X-HTTP-Method-Override: DELETE"],
            "400",
            "invalid_destination",
        ),
        (
            "a ; in the query",
            "/api/repos/acme/site?a=1;visibility=public",
            &[],
            "400",
            "invalid_destination",
        ),
        (
            "a parameter twice",
            "/api/repos/acme/site?state=open&state=closed",
            &[],
            "400",
            "invalid_destination",
        ),
        (
            "a double encoding",
            "/api/repos/acme/%2573ecret",
            &[],
            "400",
            "invalid_destination",
        ),
        (
            "_method in the query",
            "/api/repos/acme/site?_method=DELETE",
            &[],
            "400",
            "invalid_destination",
        ),
        (
            "policy does not permit DELETE",
            "/api/repos/acme/site",
            &["-X", "DELETE"],
            "403",
            "request_denied",
        ),
        (
            "the rule does not cover PUT",
            "/api/repos/acme/site",
            &["-X", "PUT"],
            "403",
            "request_denied",
        ),
        (
            "another owner",
            "/api/repos/other/site",
            &[],
            "403",
            "request_denied",
        ),
        (
            "a forbid, spelt with an escape",
            "/api/repos/acme/%73ecret",
            &[],
            "403",
            "request_denied",
        ),
        (
            "a forbid, with a trailing slash",
            "/api/repos/acme/secret/",
            &[],
            "403",
            "request_denied",
        ),
        (
            "a dot segment",
            "/api/repos/acme/../other/site",
            &["--path-as-is"],
            "400",
            "invalid_destination",
        ),
        (
            "a path parameter",
            "/api/repos/acme/site;x=1",
            &[],
            "400",
            "invalid_destination",
        ),
        (
            "an escaped slash",
            "/api/repos/acme%2Fother",
            &[],
            "400",
            "invalid_destination",
        ),
    ];
    for (why, path, extra, status, want) in cases {
        let got = curl(&e, &token, &ca, &format!("{base}{path}"), extra).await;
        assert_eq!(got.status, status, "{why}: {}", got.body);
        let body = got.body.trim();
        assert_eq!(code(body), want, "{why}: {body}");
    }
    // A header policy reads: POST without JSON is forbidden.
    let got = curl(
        &e,
        &token,
        &ca,
        &format!("{base}/api/repos/acme/site/issues"),
        &[
            "-X",
            "POST",
            "-H",
            "Content-Type: text/plain",
            "--data",
            "x",
        ],
    )
    .await;
    assert_eq!(got.status, "403", "{}", got.body);
    assert!(
        e.api.seen().is_empty(),
        "nothing refused reached the API: {:?}",
        e.api.seen()
    );
    let denied = audit_rows(&e.app, &run_id, "egress.denied", 6).await;
    let reasons: Vec<&str> = denied.iter().filter_map(|r| r["reason"].as_str()).collect();
    assert!(reasons.contains(&"not_covered"), "{reasons:?}");
    assert!(
        reasons.contains(&"invalid_request"),
        "a request refused as invalid is audited too: {reasons:?}"
    );
    assert!(
        denied
            .iter()
            .any(|r| r["resource"] == "api:/api/repos/acme/secret"),
        "{denied:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_anywhere_else_is_refused_and_audited() {
    let e = env_with("end_run_on_placeholder_misuse = false").await;
    let (_, run_id, token) = e.app.run_for("alice").await;
    let (ca, session) = e.session(&token).await;
    let ph = placeholder(&session, "api");

    // In clear, to a destination without a rule.
    let out = tokio::process::Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "20",
            "--noproxy",
            "",
            "-w",
            "\n%{http_code}",
        ])
        .args(["--proxy", &format!("http://run:{token}@{}", e.gateway)])
        .args(["-H", &format!("Authorization: Bearer {ph}")])
        .arg(format!("http://allowed.test:{}/x", e.plain.port()))
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.ends_with("\n403"), "{text}");
    assert_eq!(code(text.lines().next().unwrap()), "placeholder_refused");
    assert_eq!(e.plain.accepted(), 0, "nothing was connected");

    // To another rule's API, and a placeholder of no run at all.
    let escaped = ph.replacen("tsr_ph_", "tsr%5Fph_", 1);
    let got = curl(
        &e,
        &token,
        &ca,
        &format!(
            "https://api2.inject.test:{}/api/x?k={escaped}",
            e.api2.port()
        ),
        &[],
    )
    .await;
    assert_eq!(
        code(got.body.trim()),
        "placeholder_refused",
        "escaped in the query: {}",
        got.body
    );
    for (header, why) in [
        (format!("Authorization: Bearer {ph}"), "another rule's API"),
        (
            "X-Key: tsr_ph_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".to_owned(),
            "an unknown placeholder",
        ),
    ] {
        let got = curl(
            &e,
            &token,
            &ca,
            &format!("https://api2.inject.test:{}/api/x", e.api2.port()),
            &["-H", &header],
        )
        .await;
        assert_eq!(got.status, "403", "{why}: {}", got.body);
        assert_eq!(code(got.body.trim()), "placeholder_refused", "{why}");
    }
    assert!(e.api2.seen().is_empty());
    let denied = audit_rows(&e.app, &run_id, "egress.denied", 4).await;
    assert_eq!(
        denied
            .iter()
            .filter(|r| r["reason"] == "placeholder_misuse")
            .count(),
        4,
        "{denied:?}"
    );
    assert!(
        !serde_json::to_string(&denied).unwrap().contains(&ph),
        "the placeholder is not audited"
    );

    // Another run's placeholder is this run's misuse, and can end it.
    let e = env_with("end_run_on_placeholder_misuse = true").await;
    let (_, run_a, token_a) = e.app.run_for("alice").await;
    let (_, session_a) = e.session(&token_a).await;
    let (_, run_b, token_b) = e.app.run_for("alice").await;
    let (ca_b, _) = e.session(&token_b).await;
    let stolen = placeholder(&session_a, "api");
    let got = curl(
        &e,
        &token_b,
        &ca_b,
        &format!("https://api.inject.test:{}/api/repos/acme/x", e.api.port()),
        &["-H", &format!("Authorization: Bearer {stolen}")],
    )
    .await;
    assert_eq!(code(got.body.trim()), "placeholder_refused");
    let admin = e.app.admin_token.clone();
    let view: Value = e
        .app
        .get(&format!("/v1/runs/{run_b}"), Some(&admin))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(view["state"], "ended", "{view}");
    assert_eq!(view["end_reason"], "egress_denied");
    let view: Value = e
        .app
        .get(&format!("/v1/runs/{run_a}"), Some(&admin))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(view["state"], "active", "the owner's run is untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_ca_is_for_rule_hosts_only_and_dies_with_the_run() {
    let e = env().await;
    let (key, run_id, token) = e.app.run_for("alice").await;
    let (ca, _) = e.session(&token).await;

    // A host without a rule is tunnelled untouched: the tool sees the real
    // server's certificate, which the run's CA does not vouch for.
    let url = format!("https://allowed.test:{}/x", e.tls.port());
    let got = curl(&e, &token, &ca, &url, &[]).await;
    assert_eq!(
        got.code, 60,
        "the run's CA cannot verify a host it has no rule for: {}",
        got.body
    );
    let got = curl(&e, &token, &e.test_ca, &url, &[]).await;
    assert_eq!(got.status, "200", "{}", got.body);
    // And an injected host is not the real server to a tool that trusts only
    // the real CA: interception is visible, never silent.
    let api = format!("https://api.inject.test:{}/api/repos/acme/x", e.api.port());
    let got = curl(&e, &token, &e.test_ca, &api, &[]).await;
    assert_eq!(got.code, 60, "{}", got.body);

    // A connection open when the run ends is cut; the CA and the session are dead.
    let script = format!(
        "import requests, time, sys\n\
         s = requests.Session()\n\
         s.proxies = {{'https': 'http://run:{token}@{gw}'}}\n\
         print(s.get('{api}', verify='{ca}', timeout=10).status_code, flush=True)\n\
         sys.stdin.readline()\n\
         try:\n    r = s.get('{api}', verify='{ca}', timeout=10); print(r.status_code, r.text)\n\
         except Exception as e:\n    print('failed', type(e).__name__)\n",
        gw = e.gateway,
        ca = ca.display(),
    );
    let mut child = tokio::process::Command::new(crate::support::moto::python())
        .args(["-c", &script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    stdout.read_line(&mut line).await.unwrap();
    assert_eq!(line.trim(), "200");
    assert_eq!(e.app.end_run(&key, &run_id).await.status(), 200);
    let resp = e
        .app
        .post("/v1/gateway/session", Some(&token), json!({}))
        .await;
    assert_eq!(resp.status(), 403, "no session for an ended run");
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    child.stdin.take().unwrap().write_all(b"\n").await.unwrap();
    let mut rest = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut stdout, &mut rest)
        .await
        .unwrap();
    assert!(
        rest.starts_with("failed")
            || rest.contains("run_ended")
            || rest.contains("proxy_auth_required"),
        "after the run ended: {rest}"
    );
    assert_eq!(
        e.api.seen().len(),
        1,
        "only the request before the end reached the API"
    );
    let got = curl(&e, &token, &ca, &api, &[]).await;
    assert_ne!(got.status, "200", "{}", got.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigv4_rule_signs_s3_requests_that_moto_accepts() {
    let e = env().await;
    let (_, run_id, token) = e.app.run_for("alice").await;
    let (ca, _) = e.session(&token).await;
    let base = format!("https://s3.inject.test:{}", e.s3_port);

    // Unsigned, straight to S3: refused.
    let out = tokio::process::Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "20",
            "--noproxy",
            "*",
            "-w",
            "\n%{http_code}",
        ])
        .args([
            "--resolve",
            &format!("s3.inject.test:{}:127.0.0.1", e.s3_port),
        ])
        .args(["--cacert", e.test_ca.to_str().unwrap()])
        .arg(format!("{base}/tessera-reports/reports/2026/q1.csv"))
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.ends_with("\n403"), "moto checks signatures: {text}");

    // Through the gateway, with no AWS key at all: signed there.
    let got = curl(
        &e,
        &token,
        &ca,
        &format!("{base}/tessera-reports/reports/2026/q1.csv"),
        &[],
    )
    .await;
    assert_eq!(got.status, "200", "{}", got.body);
    assert!(got.body.starts_with("quarter,revenue"), "{}", got.body);
    let got = curl(
        &e,
        &token,
        &ca,
        &format!("{base}/tessera-reports/reports/2026/new.csv"),
        // (not curl's default form type, which moto's server reads as a form)
        &[
            "-X",
            "PUT",
            "--data-binary",
            "a,b\n1,2\n",
            "-H",
            "Content-Type: text/csv",
            "-H",
            "X-Amz-Security-Token: forged",
            "-H",
            "X-Amz-Meta-Owner: alice",
        ],
    )
    .await;
    assert_eq!(got.status, "200", "{}", got.body);
    let got = curl(
        &e,
        &token,
        &ca,
        &format!("{base}/tessera-reports/reports/2026/new.csv"),
        &[],
    )
    .await;
    assert_eq!(
        (got.status.as_str(), got.body.as_str()),
        ("200", "a,b\n1,2\n")
    );
    // The tool's own x-amz-* headers are signed with the request, not dropped.
    let got = curl(
        &e,
        &token,
        &ca,
        &format!("{base}/tessera-reports/reports/2026/new.csv"),
        &["-D", "-"],
    )
    .await;
    assert!(
        got.body
            .to_ascii_lowercase()
            .contains("x-amz-meta-owner: alice"),
        "{}",
        got.body
    );
    // A header that changes what the signed request does (here: copy from
    // an object policy never saw) is refused unless policy is shown it.
    for header in [
        "x-amz-copy-source: /tessera-reports/private/x",
        "x-amz-acl: public-read",
    ] {
        let got = curl(
            &e,
            &token,
            &ca,
            &format!("{base}/tessera-reports/reports/2026/copied.csv"),
            &["-X", "PUT", "--data-binary", "", "-H", header],
        )
        .await;
        assert_eq!(
            (got.status.as_str(), code(got.body.trim()).as_str()),
            ("400", "invalid_destination"),
            "{header}: {}",
            got.body
        );
    }
    // A body too large to be read whole and signed is refused before it is read.
    let big = e.dir.0.join("big.bin");
    std::fs::write(&big, vec![b'x'; (16 << 20) + 1]).unwrap();
    let got = curl(
        &e,
        &token,
        &ca,
        &format!("{base}/tessera-reports/reports/2026/big.bin"),
        &[
            "-X",
            "PUT",
            "--data-binary",
            &format!("@{}", big.display()),
            "-H",
            "Content-Type: application/octet-stream",
        ],
    )
    .await;
    assert_eq!(
        (got.status.as_str(), code(got.body.trim()).as_str()),
        ("429", "limit_reached"),
        "{}",
        got.body
    );
    // Outside policy: never signed, never sent.
    let got = curl(
        &e,
        &token,
        &ca,
        &format!("{base}/tessera-reports/private/x"),
        &[],
    )
    .await;
    assert_eq!(got.status, "403", "{}", got.body);
    let rows = audit_rows(&e.app, &run_id, "egress.request", 3).await;
    assert!(rows
        .iter()
        .all(|r| r["detail"].as_str().unwrap().contains("auth=sigv4")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_runs_a_tool_that_calls_the_api_and_holds_no_credential() {
    let e = env().await;
    let (_, run_id, token) = e.app.run_for("alice").await;
    let token_file = e.dir.0.join("run.token");
    std::fs::write(&token_file, &token).unwrap();
    crate::support::app::private(&token_file);
    let root = nix::unistd::Uid::effective().is_root();
    assert!(
        root || std::env::var("CI").is_err(),
        "CI runs this test as root (--user nobody)"
    );
    let digest = tessera_broker::ids::hex(&sha2::Sha256::digest(e.secret.as_bytes()));
    // The tool: searches everything it can read for the secret (by its public
    // prefix, each candidate compared by hash), then calls the API with the
    // placeholder its SDK insists on, and curl does too.
    let script = dir_script(&e.dir.0);
    let url = format!(
        "https://api.inject.test:{}/api/repos/acme/exec",
        e.api.port()
    );
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"));
    cmd.env_clear()
        .env("TESSERA_ADDR", format!("http://{}", e.app.addr))
        .env("TESSERA_RUN_TOKEN_FILE", &token_file)
        .env("PATH", "/usr/bin:/bin")
        .args(["exec", "--egress", &e.gateway.to_string()]);
    if root {
        cmd.args(["--user", "nobody"]);
    }
    cmd.args([
        "--",
        "/usr/bin/python3",
        script.to_str().unwrap(),
        &digest,
        &e.secret.len().to_string(),
        &url,
    ]);
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(text.lines().last().unwrap()).expect(&text);
    assert_eq!(report["hits"], json!([]), "{report}");
    assert!(report["scanned"].as_u64().unwrap() > 10, "{report}");
    assert_eq!(report["requests"]["status"], 200, "{report}");
    assert!(report["requests"]["body"]
        .as_str()
        .unwrap()
        .contains(&format!("auth_sha256={}", e.auth_hash())));
    assert_eq!(report["curl"]["status"], 200, "{report}");
    assert!(report["api_token"].as_str().unwrap().starts_with("tsr_ph_"));
    assert!(!text.contains(&e.secret));
    let rows = audit_rows(&e.app, &run_id, "egress.response", 2).await;
    assert!(rows.iter().all(|r| r["reason"] == "200"), "{rows:?}");
}

/// The tool of the exec test, written where the command's user can read it.
fn dir_script(dir: &std::path::Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.join("tool.py");
    std::fs::write(
        &path,
        r#"
import hashlib, json, os, subprocess, sys
digest, length, url = sys.argv[1], int(sys.argv[2]), sys.argv[3]
prefix = b"sk-inject-"
hits, scanned = [], 0

def scan(name, data):
    global scanned
    scanned += 1
    i = data.find(prefix)
    while i >= 0:
        if hashlib.sha256(data[i:i + length]).hexdigest() == digest:
            hits.append(name)
            return
        i = data.find(prefix, i + 1)

def read(path, limit=4 << 20):
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except Exception:
        return None

scan("environ", b"\0".join(k.encode() + b"=" + v.encode() for k, v in os.environ.items()))
scan("argv", b"\0".join(a.encode() for a in sys.argv))
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for part in ("environ", "cmdline"):
            data = read(f"/proc/{pid}/{part}")
            if data is not None:
                scan(f"/proc/{pid}/{part}", data)
budget = 20000
for root in ["/tmp", os.getcwd(), os.path.expanduser("~"), "/run", "/etc"]:
    for d, _, files in os.walk(root):
        for f in files:
            budget -= 1
            if budget < 0:
                break
            p = os.path.join(d, f)
            if os.path.isfile(p) and not os.path.islink(p):
                data = read(p)
                if data is not None:
                    scan(p, data)

import requests
r = requests.get(url, headers={"Authorization": "Bearer " + os.environ["API_TOKEN"]}, timeout=20)
c = subprocess.run(["curl", "-sS", "--max-time", "20", "-w", "\n%{http_code}", url], capture_output=True, text=True)
body, _, status = c.stdout.rpartition("\n")
print(json.dumps({"hits": hits, "scanned": scanned, "api_token": os.environ["API_TOKEN"],
                  "requests": {"status": r.status_code, "body": r.text},
                  "curl": {"status": int(status or 0), "body": body, "err": c.stderr}}))
"#,
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secret_never_reaches_the_brokers_log() {
    let e = env().await;
    // The real binary on the same store and configuration, logging everything.
    let broker = e.app.process(&[("TESSERA_LOG", "trace")]).await;
    let gateway = broker.gateway_addr().await;
    let (_, _, token) = e.app.run_for("alice").await;
    let (ca, _) = e.session(&token).await;
    let ca_pem = std::fs::read_to_string(&ca).unwrap();
    // The process has its own run CA: ask it for the session.
    let resp = e
        .app
        .client
        .post(format!("http://{}/v1/gateway/session", broker.addr))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    let session: Value = resp.json().await.unwrap();
    assert_ne!(
        session["ca_pem"].as_str().unwrap(),
        ca_pem,
        "one CA per process"
    );
    let process_ca = e.dir.0.join("process-ca.pem");
    std::fs::write(&process_ca, session["ca_pem"].as_str().unwrap()).unwrap();
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--max-time", "20", "--noproxy", ""])
        .args(["--proxy", &format!("http://{gateway}")])
        .args([
            "--proxy-header",
            &format!("Proxy-Authorization: Bearer {token}"),
        ])
        .args(["--cacert", process_ca.to_str().unwrap()])
        .args(["-H", "Authorization: Bearer tool-own"])
        .arg(format!(
            "https://api.inject.test:{}/api/repos/acme/logged?x=1",
            e.api.port()
        ))
        .output()
        .await
        .unwrap();
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(
        body.contains(&format!("auth_sha256={}", e.auth_hash())),
        "{body} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = broker.log_text();
    assert!(log.contains("egress"), "the log is at trace level: {log}");
    assert!(
        !log.contains(&e.secret),
        "the injected secret is in the broker's log"
    );
    assert!(
        !log.contains("tool-own"),
        "the tool's credential is in the broker's log"
    );
}
