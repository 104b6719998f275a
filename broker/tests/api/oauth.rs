//! Tessera as an OAuth authorization server (docs/oauth.md): RFC 8414
//! metadata, the RFC 8693 token exchange decided by the same policy as a
//! capability, RFC 7662 introspection for resource servers, and DPoP (RFC
//! 9449) on capabilities, exchanges, introspection and access tokens — each
//! with the paths that must be refused.

use crate::support::app::{Db, Extra, TestApp};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use reqwest::StatusCode;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};
use sha2::Digest;
use tessera_client::types::{
    AuthorizationServerMetadata, OAuthError, OAuthIntrospection, TokenExchangeResponse,
    GRANT_TYPE_TOKEN_EXCHANGE, RUN_TOKEN_TYPE,
};

const NOTES: &str = "http://127.0.0.1:9/mcp";
const OTHER: &str = "https://other.example/api";
// Characters a form decoding would change: many clients send Basic credentials as they are.
const NOTES_SECRET: &str = "notes+introspection/secret=0123456789abcdef";
const OTHER_SECRET: &str = "other-introspection-secret-0123456789abcdef";

const CONFIG: &str = r#"
[backends.notes]
kind = "oauth-resource"
resource = "http://127.0.0.1:9/mcp"
scopes = ["notes:read", "notes:write"]
max_ttl = "2m"
introspection_secret_env = "NOTES_SECRET"

[backends.other]
kind = "oauth-resource"
resource = "https://other.example/api"
scopes = ["notes:read"]
introspection_secret_env = "OTHER_SECRET"
"#;

const POLICY: &str = r#"
@id("notes-read") @ttl("10m")
permit (principal in Tessera::Group::"analysts", action == Tessera::Action::"notes:read", resource)
when { resource.kind == "oauth-resource" };

@id("notes-write-needs-a-human") @approval("required")
permit (principal == Tessera::User::"dana", action == Tessera::Action::"notes:write", resource)
when { resource.backend == "notes" };

@id("rita-notes") @rate("1/min")
permit (principal == Tessera::User::"rita", action == Tessera::Action::"notes:read", resource)
when { resource.backend == "notes" };
"#;

async fn broker(nonce: bool) -> TestApp {
    let mut config = CONFIG.to_owned();
    if nonce {
        config.push_str("\n[oauth]\ndpop_nonce = true\n");
    }
    TestApp::builder(Db::Sqlite)
        .extra(Extra {
            config,
            policy: POLICY.to_owned(),
            env: vec![
                ("NOTES_SECRET".into(), NOTES_SECRET.into()),
                ("OTHER_SECRET".into(), OTHER_SECRET.into()),
            ],
        })
        .start()
        .await
}

/// A client's DPoP key, signing whatever proof a test needs.
struct Key(EcdsaKeyPair);

impl Key {
    fn new() -> Key {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        Key(
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
                .unwrap(),
        )
    }

    fn xy(&self) -> (String, String) {
        let p = self.0.public_key().as_ref();
        (
            URL_SAFE_NO_PAD.encode(&p[1..33]),
            URL_SAFE_NO_PAD.encode(&p[33..]),
        )
    }

    fn jkt(&self) -> String {
        let (x, y) = self.xy();
        let canon = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
        URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(canon.as_bytes()))
    }

    fn sign(&self, claims: Value) -> String {
        let (x, y) = self.xy();
        let header = json!({"typ": "dpop+jwt", "alg": "ES256", "jwk": {"kty": "EC", "crv": "P-256", "x": x, "y": y}});
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let sig = self.0.sign(&SystemRandom::new(), input.as_bytes()).unwrap();
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }

    /// A proof for `method` `url` now, over `token` if any, with `nonce` if any.
    fn proof(&self, method: &str, url: &str, token: Option<&str>, nonce: Option<&str>) -> String {
        self.proof_at(method, url, token, nonce, now())
    }

    fn proof_at(
        &self,
        method: &str,
        url: &str,
        token: Option<&str>,
        nonce: Option<&str>,
        iat: i64,
    ) -> String {
        let mut c =
            json!({"jti": tessera_broker::ids::new_id(), "htm": method, "htu": url, "iat": iat});
        if let Some(t) = token {
            c["ath"] = URL_SAFE_NO_PAD
                .encode(sha2::Sha256::digest(t.as_bytes()))
                .into();
        }
        if let Some(n) = nonce {
            c["nonce"] = n.into();
        }
        self.sign(c)
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn form(run_token: &str, resource: &str, scope: &str) -> Vec<(&'static str, String)> {
    vec![
        ("grant_type", GRANT_TYPE_TOKEN_EXCHANGE.to_owned()),
        ("subject_token", run_token.to_owned()),
        ("subject_token_type", RUN_TOKEN_TYPE.to_owned()),
        ("resource", resource.to_owned()),
        ("scope", scope.to_owned()),
    ]
}

async fn token_request(
    app: &TestApp,
    params: &[(&str, String)],
    dpop: Option<String>,
) -> reqwest::Response {
    let mut req = app.client.post(app.url("/oauth/token")).form(params);
    if let Some(p) = dpop {
        req = req.header("dpop", p);
    }
    req.send().await.unwrap()
}

/// An RFC 6749 error: the status, the `error`, and Tessera's `code`.
async fn oauth_error(
    resp: reqwest::Response,
    status: StatusCode,
    error: &str,
    code: &str,
) -> OAuthError {
    assert_eq!(resp.status(), status);
    assert_eq!(resp.headers()["cache-control"], "no-store");
    let e: OAuthError = resp.json().await.unwrap();
    assert_eq!((e.error.as_str(), e.code.as_str()), (error, code), "{e:?}");
    assert!(e.request_id.starts_with("req_"));
    e
}

async fn token_ok(
    app: &TestApp,
    run_token: &str,
    resource: &str,
    scope: &str,
) -> TokenExchangeResponse {
    let resp = token_request(app, &form(run_token, resource, scope), None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    resp.json().await.unwrap()
}

/// Verifies an access token's signature against the published JWKS and returns its claims.
async fn verified_claims(app: &TestApp, token: &str) -> Value {
    let jwks: Value = app
        .get("/.well-known/jwks.json", None)
        .await
        .json()
        .await
        .unwrap();
    let parts: Vec<&str> = token.split('.').collect();
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
    assert_eq!(header["typ"], "at+jwt");
    assert_eq!(header["alg"], "EdDSA");
    let key = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kid"] == header["kid"])
        .expect("the token's key is published");
    let x = URL_SAFE_NO_PAD.decode(key["x"].as_str().unwrap()).unwrap();
    ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, &x)
        .verify(
            format!("{}.{}", parts[0], parts[1]).as_bytes(),
            &URL_SAFE_NO_PAD.decode(parts[2]).unwrap(),
        )
        .expect("signed by a published key");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap()
}

async fn introspect(app: &TestApp, client: (&str, &str), token: &str) -> reqwest::Response {
    app.client
        .post(app.url("/oauth/introspect"))
        .basic_auth(client.0, Some(client.1))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap()
}

async fn active(app: &TestApp, client: (&str, &str), token: &str) -> bool {
    let resp = introspect(app, client, token).await;
    assert_eq!(resp.status(), StatusCode::OK);
    match resp.json::<OAuthIntrospection>().await.unwrap() {
        OAuthIntrospection::Active(a) => a.active,
        OAuthIntrospection::Inactive(i) => {
            assert!(!i.active);
            false
        }
    }
}

#[tokio::test]
async fn the_metadata_names_every_endpoint_at_the_issuer() {
    let app = broker(false).await;
    let resp = app
        .get("/.well-known/oauth-authorization-server", None)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let m: AuthorizationServerMetadata = resp.json().await.unwrap();
    let issuer = format!("http://{}", app.addr);
    assert_eq!(m.issuer, issuer);
    assert_eq!(m.token_endpoint, format!("{issuer}/oauth/token"));
    assert_eq!(m.jwks_uri, format!("{issuer}/.well-known/jwks.json"));
    assert_eq!(
        m.introspection_endpoint,
        format!("{issuer}/oauth/introspect")
    );
    assert_eq!(m.grant_types_supported, [GRANT_TYPE_TOKEN_EXCHANGE]);
    assert_eq!(m.dpop_signing_alg_values_supported, ["ES256", "EdDSA"]);
    assert_eq!(m.scopes_supported, ["notes:read", "notes:write"]);
}

#[tokio::test]
async fn a_token_exchange_is_decided_and_audited_as_a_capability() {
    let app = broker(false).await;
    let (key, run_id, run_token) = app.run_for("alice").await;
    let t = token_ok(&app, &run_token, NOTES, "notes:read").await;
    assert_eq!(
        (t.token_type.as_str(), t.scope.as_str()),
        ("Bearer", "notes:read")
    );
    assert_eq!(
        t.issued_token_type,
        "urn:ietf:params:oauth:token-type:access_token"
    );
    assert!(
        (119..=120).contains(&t.expires_in),
        "the backend's max_ttl (2m) under the policy's 10m: {}",
        t.expires_in
    );
    let c = verified_claims(&app, &t.access_token).await;
    assert_eq!(c["iss"], format!("http://{}", app.addr));
    assert_eq!(c["aud"], NOTES);
    assert_eq!(
        (c["sub"].as_str(), c["scope"].as_str()),
        (Some("alice"), Some("notes:read"))
    );
    assert_eq!(c["act"]["sub"], format!("run:{run_id}"));
    assert_eq!(c["run"], run_id);
    assert!(c["client_id"]
        .as_str()
        .unwrap()
        .starts_with("tessera-runtime:"));
    assert!(c.get("cnf").is_none());
    let issued = app.audit("event=capability.issued").await;
    let row = issued
        .iter()
        .find(|r| r["capability_id"] == c["jti"])
        .expect("audited");
    assert_eq!(row["resource"], format!("notes:{NOTES}"));
    assert!(
        row["detail"]
            .as_str()
            .unwrap()
            .contains("form=access_token"),
        "{row}"
    );

    // Denied by policy: RFC 6749 invalid_scope, Tessera's code, audited, nothing issued.
    let before = app.count("capabilities").await;
    let resp = token_request(&app, &form(&run_token, NOTES, "notes:write"), None).await;
    oauth_error(
        resp,
        StatusCode::BAD_REQUEST,
        "invalid_scope",
        "capability_denied",
    )
    .await;
    assert_eq!(app.count("capabilities").await, before);
    assert!(!app.audit("event=capability.denied").await.is_empty());

    // Not a registered resource, or another spelling of one.
    for resource in [
        "http://127.0.0.1:9/mcp/",
        "http://127.0.0.1:9/MCP",
        "http://127.0.0.1:09/mcp",
        "https://evil.example/mcp",
    ] {
        let resp = token_request(&app, &form(&run_token, resource, "notes:read"), None).await;
        oauth_error(
            resp,
            StatusCode::BAD_REQUEST,
            "invalid_target",
            "invalid_resource",
        )
        .await;
    }
    // A scope the resource does not offer; two scopes at once.
    let resp = token_request(&app, &form(&run_token, OTHER, "notes:write"), None).await;
    oauth_error(
        resp,
        StatusCode::BAD_REQUEST,
        "invalid_scope",
        "invalid_action",
    )
    .await;
    let resp = token_request(
        &app,
        &form(&run_token, NOTES, "notes:read notes:write"),
        None,
    )
    .await;
    oauth_error(
        resp,
        StatusCode::BAD_REQUEST,
        "invalid_scope",
        "invalid_action",
    )
    .await;
    // Another grant type; another subject token type; a parameter twice; JSON.
    let mut p = form(&run_token, NOTES, "notes:read");
    p[0].1 = "client_credentials".into();
    oauth_error(
        token_request(&app, &p, None).await,
        StatusCode::BAD_REQUEST,
        "unsupported_grant_type",
        "invalid_request",
    )
    .await;
    let mut p = form(&run_token, NOTES, "notes:read");
    p[2].1 = "urn:ietf:params:oauth:token-type:access_token".into();
    oauth_error(
        token_request(&app, &p, None).await,
        StatusCode::BAD_REQUEST,
        "invalid_request",
        "invalid_request",
    )
    .await;
    let mut p = form(&run_token, NOTES, "notes:read");
    p.push(("scope", "notes:write".into()));
    oauth_error(
        token_request(&app, &p, None).await,
        StatusCode::BAD_REQUEST,
        "invalid_request",
        "invalid_request",
    )
    .await;
    let resp = app
        .post(
            "/oauth/token",
            None,
            json!({"grant_type": GRANT_TYPE_TOKEN_EXCHANGE}),
        )
        .await;
    oauth_error(
        resp,
        StatusCode::BAD_REQUEST,
        "invalid_request",
        "unsupported_media_type",
    )
    .await;
    // A capability for a protected resource is never issued: only tokens, here.
    let resp = app
        .capability(&run_token, "notes:read", &format!("notes:{NOTES}"))
        .await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"]["code"],
        "invalid_resource"
    );
    // A parameter without a value is as if omitted (RFC 6749 §3.1).
    let mut p = form(&run_token, NOTES, "notes:read");
    p.push(("audience", String::new()));
    assert_eq!(token_request(&app, &p, None).await.status(), StatusCode::OK);
    // A subject token that is not a run's.
    let resp = token_request(&app, &form("tsr_run_forged", NOTES, "notes:read"), None).await;
    oauth_error(
        resp,
        StatusCode::BAD_REQUEST,
        "invalid_grant",
        "unauthenticated",
    )
    .await;

    // The run ends: no new token, and the one issued is dead at introspection.
    assert!(active(&app, ("notes", NOTES_SECRET), &t.access_token).await);
    assert_eq!(app.end_run(&key, &run_id).await.status(), StatusCode::OK);
    assert!(!active(&app, ("notes", NOTES_SECRET), &t.access_token).await);
    let resp = token_request(&app, &form(&run_token, NOTES, "notes:read"), None).await;
    oauth_error(resp, StatusCode::BAD_REQUEST, "invalid_grant", "run_ended").await;
}

#[tokio::test]
async fn approval_and_rate_limits_apply_to_tokens() {
    let app = broker(false).await;
    let (_, _, dana) = app.run_for("dana").await;
    let resp = token_request(&app, &form(&dana, NOTES, "notes:write"), None).await;
    let e = oauth_error(
        resp,
        StatusCode::BAD_REQUEST,
        "authorization_pending",
        "approval_pending",
    )
    .await;
    let id = e.approval_id.expect("the approval to wait for");
    // Redeeming it before anyone approved is refused, and issues nothing.
    let mut p = form(&dana, NOTES, "notes:write");
    p.push(("approval_id", id));
    let resp = token_request(&app, &p, None).await;
    oauth_error(
        resp,
        StatusCode::BAD_REQUEST,
        "invalid_scope",
        "approval_pending",
    )
    .await;

    let (_, _, rita) = app.run_for("rita").await;
    token_ok(&app, &rita, NOTES, "notes:read").await;
    let resp = token_request(&app, &form(&rita, NOTES, "notes:read"), None).await;
    assert!(resp.headers().contains_key("retry-after"));
    oauth_error(
        resp,
        StatusCode::TOO_MANY_REQUESTS,
        "slow_down",
        "rate_limited",
    )
    .await;
}

#[tokio::test]
async fn introspection_answers_only_the_resource_server_of_the_token() {
    let app = broker(false).await;
    let (_, _, run_token) = app.run_for("alice").await;
    let notes = token_ok(&app, &run_token, NOTES, "notes:read")
        .await
        .access_token;
    let other = token_ok(&app, &run_token, OTHER, "notes:read")
        .await
        .access_token;
    assert!(active(&app, ("notes", NOTES_SECRET), &notes).await);
    assert!(
        !active(&app, ("notes", NOTES_SECRET), &other).await,
        "another resource's token"
    );
    assert!(active(&app, ("other", OTHER_SECRET), &other).await);
    assert!(!active(&app, ("other", OTHER_SECRET), &notes).await);
    // A capability is not an access token, even with a valid signature.
    let cap = app
        .capability_ok(&run_token, "read", "svc-reports:reports/q1")
        .await;
    assert!(
        !active(
            &app,
            ("notes", NOTES_SECRET),
            cap["token"].as_str().unwrap()
        )
        .await
    );
    // Re-signed claims, garbage.
    let mut parts: Vec<String> = notes.split('.').map(str::to_owned).collect();
    let mut claims: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(&parts[1]).unwrap()).unwrap();
    claims["exp"] = json!(claims["exp"].as_i64().unwrap() + 3600);
    parts[1] = URL_SAFE_NO_PAD.encode(claims.to_string());
    assert!(!active(&app, ("notes", NOTES_SECRET), &parts.join(".")).await);
    assert!(!active(&app, ("notes", NOTES_SECRET), "garbage").await);
    // Credentials: wrong secret, another backend's secret, a backend that is not a resource, none.
    for (id, secret) in [
        ("notes", OTHER_SECRET),
        ("notes", "x"),
        ("svc-reports", NOTES_SECRET),
    ] {
        let resp = introspect(&app, (id, secret), &notes).await;
        assert_eq!(
            resp.headers()["www-authenticate"],
            "Basic realm=\"tessera\""
        );
        oauth_error(
            resp,
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "unauthenticated",
        )
        .await;
    }
    let resp = app
        .client
        .post(app.url("/oauth/introspect"))
        .form(&[("token", notes.as_str())])
        .send()
        .await
        .unwrap();
    oauth_error(
        resp,
        StatusCode::UNAUTHORIZED,
        "invalid_client",
        "unauthenticated",
    )
    .await;
    // client_secret_post works; both methods at once do not.
    let resp = app
        .client
        .post(app.url("/oauth/introspect"))
        .form(&[
            ("token", notes.as_str()),
            ("client_id", "notes"),
            ("client_secret", NOTES_SECRET),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.json::<Value>().await.unwrap()["active"], true);
    let resp = app
        .client
        .post(app.url("/oauth/introspect"))
        .basic_auth("notes", Some(NOTES_SECRET))
        .form(&[
            ("token", notes.as_str()),
            ("client_id", "notes"),
            ("client_secret", NOTES_SECRET),
        ])
        .send()
        .await
        .unwrap();
    oauth_error(
        resp,
        StatusCode::BAD_REQUEST,
        "invalid_request",
        "invalid_request",
    )
    .await;
}

#[tokio::test]
async fn a_dpop_bound_capability_needs_its_key_at_exchange_and_introspection() {
    let app = broker(false).await;
    let (key, _, run_token) = app.run_for("alice").await;
    let k = Key::new();
    let cap_url = app.url("/v1/capabilities");
    let resp = app
        .client
        .post(&cap_url)
        .bearer_auth(&run_token)
        .header("dpop", k.proof("POST", &cap_url, None, None))
        .json(&json!({"action": "read", "resource": "svc-reports:reports/q1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let cap: Value = resp.json().await.unwrap();
    let token = cap["token"].as_str().unwrap().to_owned();
    let claims: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(token.split('.').nth(1).unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["cnf"]["jkt"], k.jkt());

    let ex_url = app.url("/v1/exchange");
    let exchange = |proof: Option<String>| {
        let mut req = app
            .client
            .post(app.url("/v1/exchange"))
            .json(&json!({"capability": token}));
        if let Some(p) = proof {
            req = req.header("dpop", p);
        }
        req.send()
    };
    let refused = |resp: reqwest::Response| async move {
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        assert!(resp.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("DPoP error=\"invalid_dpop_proof\""));
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["code"], "invalid_dpop_proof", "{v}");
    };
    // Without a proof; by another key; for another method or URL; stale; future;
    // over another token; with no ath.
    refused(exchange(None).await.unwrap()).await;
    refused(
        exchange(Some(Key::new().proof("POST", &ex_url, Some(&token), None)))
            .await
            .unwrap(),
    )
    .await;
    refused(
        exchange(Some(k.proof("GET", &ex_url, Some(&token), None)))
            .await
            .unwrap(),
    )
    .await;
    refused(
        exchange(Some(k.proof(
            "POST",
            &app.url("/v1/introspect"),
            Some(&token),
            None,
        )))
        .await
        .unwrap(),
    )
    .await;
    refused(
        exchange(Some(k.proof_at(
            "POST",
            &ex_url,
            Some(&token),
            None,
            now() - 120,
        )))
        .await
        .unwrap(),
    )
    .await;
    refused(
        exchange(Some(k.proof_at(
            "POST",
            &ex_url,
            Some(&token),
            None,
            now() + 60,
        )))
        .await
        .unwrap(),
    )
    .await;
    refused(
        exchange(Some(k.proof("POST", &ex_url, Some("another token"), None)))
            .await
            .unwrap(),
    )
    .await;
    refused(
        exchange(Some(k.proof("POST", &ex_url, None, None)))
            .await
            .unwrap(),
    )
    .await;
    let refusals = app.audit("event=exchange.refused").await;
    assert!(
        refusals.iter().any(|r| r["reason"] == "invalid_dpop_proof"),
        "audited"
    );
    // No use was taken by any of them: the capability still has its 3.
    let good = k.proof("POST", &ex_url, Some(&token), None);
    let resp = exchange(Some(good.clone())).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.json::<Value>().await.unwrap()["uses_left"], 2);
    // The same proof again: a replay.
    refused(exchange(Some(good)).await.unwrap()).await;

    // Introspection shows a bound capability only with its key's proof.
    let in_url = app.url("/v1/introspect");
    let look = |proof: Option<String>| {
        let mut req = app
            .client
            .post(app.url("/v1/introspect"))
            .bearer_auth(&key)
            .json(&json!({"token": token}));
        if let Some(p) = proof {
            req = req.header("dpop", p);
        }
        req.send()
    };
    let v: Value = look(None).await.unwrap().json().await.unwrap();
    assert_eq!(v, json!({"active": false}));
    let v: Value = look(Some(Key::new().proof("POST", &in_url, Some(&token), None)))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v, json!({"active": false}));
    let v: Value = look(Some(k.proof("POST", &in_url, Some(&token), None)))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["active"], true);
    assert_eq!(v["cnf"]["jkt"], k.jkt());

    // A malformed proof at issuance is a 400, and nothing is issued.
    let before = app.count("capabilities").await;
    let resp = app
        .client
        .post(&cap_url)
        .bearer_auth(&run_token)
        .header("dpop", "not.a.proof")
        .json(&json!({"action": "read", "resource": "svc-reports:reports/q1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"]["code"],
        "invalid_dpop_proof"
    );
    assert_eq!(app.count("capabilities").await, before);
    let denied = app.audit("event=capability.denied").await;
    assert!(
        denied.iter().any(|r| r["reason"] == "invalid_dpop_proof"),
        "audited"
    );
}

#[tokio::test]
async fn access_tokens_bind_to_dpop_keys_with_the_brokers_nonce() {
    let app = broker(true).await;
    let (_, _, run_token) = app.run_for("alice").await;
    let k = Key::new();
    let url = app.url("/oauth/token");
    // Without the broker's nonce: use_dpop_nonce, with one to use.
    let resp = token_request(
        &app,
        &form(&run_token, NOTES, "notes:read"),
        Some(k.proof("POST", &url, None, None)),
    )
    .await;
    let nonce = resp.headers()["dpop-nonce"].to_str().unwrap().to_owned();
    oauth_error(
        resp,
        StatusCode::BAD_REQUEST,
        "use_dpop_nonce",
        "use_dpop_nonce",
    )
    .await;
    let resp = token_request(
        &app,
        &form(&run_token, NOTES, "notes:read"),
        Some(k.proof("POST", &url, None, Some("made-up"))),
    )
    .await;
    oauth_error(
        resp,
        StatusCode::BAD_REQUEST,
        "use_dpop_nonce",
        "use_dpop_nonce",
    )
    .await;
    let resp = token_request(
        &app,
        &form(&run_token, NOTES, "notes:read"),
        Some(k.proof("POST", &url, None, Some(&nonce))),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        resp.headers().contains_key("dpop-nonce"),
        "a fresh nonce with every answer"
    );
    let t: TokenExchangeResponse = resp.json().await.unwrap();
    assert_eq!(t.token_type, "DPoP");
    let c = verified_claims(&app, &t.access_token).await;
    assert_eq!(c["cnf"]["jkt"], k.jkt());
    let resp = introspect(&app, ("notes", NOTES_SECRET), &t.access_token).await;
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        (v["token_type"].as_str(), v["cnf"]["jkt"].as_str()),
        (Some("DPoP"), Some(k.jkt().as_str()))
    );
    // A proof with a private key in it, or for the wrong URL, is refused.
    let resp = token_request(
        &app,
        &form(&run_token, NOTES, "notes:read"),
        Some(k.proof("POST", &app.url("/oauth/tokens"), None, Some(&nonce))),
    )
    .await;
    oauth_error(
        resp,
        StatusCode::BAD_REQUEST,
        "invalid_dpop_proof",
        "invalid_dpop_proof",
    )
    .await;
}

#[tokio::test]
async fn the_rust_client_binds_and_proves_without_being_asked_twice() {
    let app = broker(true).await;
    let (_, _, run_token) = app.run_for("alice").await;
    let client = tessera_client::Client::builder()
        .address(format!("http://{}", app.addr))
        .run_token(run_token.clone().into())
        .dpop(true)
        .build()
        .unwrap();
    // The first request meets use_dpop_nonce and is retried with the nonce.
    let cap = client
        .capability("read", "svc-reports:reports/q1")
        .await
        .unwrap();
    let claims: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(cap.token().split('.').nth(1).unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["cnf"]["jkt"], client.dpop_thumbprint().unwrap());
    client.exchange(&cap).await.unwrap();
    // The same capability elsewhere, without the key, is refused.
    let resp = app.exchange(cap.token()).await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let at = client.access_token(NOTES, "notes:read").await.unwrap();
    assert_eq!(at.token_type, "DPoP");
    assert!(!format!("{at:?}").contains(at.token()));
    let proof = client
        .dpop_proof("GET", NOTES, &at, Some("rs-nonce"))
        .unwrap();
    let claims: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(proof.split('.').nth(1).unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (claims["htu"].as_str(), claims["nonce"].as_str()),
        (Some(NOTES), Some("rs-nonce")),
        "the resource server's nonce, not the broker's"
    );
    assert_eq!(
        claims["ath"],
        URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(at.token().as_bytes()))
    );
    let err = client.access_token(NOTES, "notes:write").await.unwrap_err();
    assert_eq!(err.code(), Some("capability_denied"));
    assert!(err.to_string().contains("request req_"), "{err}");
}
