//! Two brokers on one PostgreSQL: the coordination DESIGN §6 relies on — uses,
//! rate limits, run end, key rotation and the audit chain — holds across replicas.

use crate::support::app::{assert_error, Db, TestApp};
use crate::support::audit_chain::verify_audit_chain;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Fires `n` requests alternating between the two replicas; returns the statuses.
async fn alternate(
    a: &TestApp,
    b: &TestApp,
    n: usize,
    path: &str,
    bearer: Option<&str>,
    body: Value,
) -> Vec<StatusCode> {
    let mut tasks = Vec::new();
    for i in 0..n {
        let url = if i % 2 == 0 { a.url(path) } else { b.url(path) };
        let client = a.client.clone();
        let body = body.clone();
        let bearer = bearer.map(str::to_owned);
        tasks.push(tokio::spawn(async move {
            let mut req = client.post(url).json(&body);
            if let Some(t) = bearer {
                req = req.bearer_auth(t);
            }
            req.send().await.unwrap().status()
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

fn count(statuses: &[StatusCode], s: StatusCode) -> usize {
    statuses.iter().filter(|x| **x == s).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_one_postgres() {
    let a = TestApp::spawn(Db::Postgres).await;
    let b = a.replica().await;

    // A run started on A is usable on B at once.
    let (key, run_id, token) = a.run_for("ursula").await;
    let cap = b
        .capability_ok(&token, "read", "svc-reports:reports/q1")
        .await;

    // @uses(50) holds across both replicas under 80 concurrent exchanges.
    let statuses = alternate(
        &a,
        &b,
        80,
        "/v1/exchange",
        None,
        json!({ "capability": cap["token"] }),
    )
    .await;
    assert_eq!(count(&statuses, StatusCode::OK), 50, "{statuses:?}");
    assert_eq!(count(&statuses, StatusCode::FORBIDDEN), 30);

    // @rate(3/min) holds across both replicas.
    let (_k, _r, rita) = a.run_for("rita").await;
    let body = json!({ "action": "read", "resource": "svc-reports:x" });
    let statuses = alternate(&a, &b, 12, "/v1/capabilities", Some(&rita), body).await;
    assert_eq!(count(&statuses, StatusCode::CREATED), 3, "{statuses:?}");
    assert_eq!(count(&statuses, StatusCode::TOO_MANY_REQUESTS), 9);

    // A run ended on B is dead on A, including for tokens A issued.
    let from_a = a
        .capability_ok(&token, "read", "svc-reports:reports/q2")
        .await;
    let end: Value = b.end_run(&key, &run_id).await.json().await.unwrap();
    assert_eq!(end["revoked"]["capabilities"], 2);
    assert_error(
        a.capability(&token, "read", "svc-reports:reports/q3").await,
        StatusCode::FORBIDDEN,
        "run_ended",
    )
    .await;
    assert_error(
        a.exchange(from_a["token"].as_str().unwrap()).await,
        StatusCode::FORBIDDEN,
        "run_ended",
    )
    .await;

    // Both writers appended to one unbroken hash chain.
    let events = verify_audit_chain(&a).await;
    assert!(events.len() > 100, "{} audit rows", events.len());
}

/// Keys refreshed every second and published 3 s before they sign (the
/// least `key_refresh + store.timeout + 1s` allows).
/// Three brokers on one PostgreSQL schema, with `config` added to each.
async fn three_replicas(config: &str) -> (TestApp, TestApp, TestApp) {
    let extra = crate::support::app::Extra {
        config: config.to_owned(),
        ..Default::default()
    };
    let a = TestApp::builder(Db::Postgres).extra(extra).start().await;
    let b = a.replica().await;
    let c = a.replica().await;
    (a, b, c)
}

const FAST_KEYS: &str =
    "[store]\ntimeout = \"1s\"\n[replicas]\nkey_refresh = \"1s\"\nkey_prepublish = \"4s\"\n";

/// A compact JWS with a `kid` no broker has, and a zero signature.
fn forged(i: usize) -> String {
    use base64::Engine;
    let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    let header = format!(r#"{{"alg":"EdDSA","typ":"tsr-cap+jwt","kid":"forged-{i}"}}"#);
    format!(
        "{}.{}.{}",
        b64(header.as_bytes()),
        b64(b"{}"),
        b64(&[0u8; 64])
    )
}

/// Rotations on two of three replicas while all of them issue and verify a
/// stream of capabilities and an attacker sends forged `kid`s as fast as it
/// can: not one genuine token is refused, and the last rotated key signs by
/// the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotations_never_refuse_a_genuine_token_on_any_replica() {
    let (a, b, c) = three_replicas(FAST_KEYS).await;
    let replicas = [&a, &b, &c];
    let (_key, _run, token) = a.run_for("ursula").await;

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut attackers = Vec::new();
    for target in [b.url("/v1/exchange"), c.url("/v1/exchange")] {
        let (client, stop) = (a.client.clone(), stop.clone());
        attackers.push(tokio::spawn(async move {
            let mut sent = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let resp = client
                    .post(&target)
                    .json(&json!({ "capability": forged(sent) }))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
                sent += 1;
            }
            sent
        }));
    }

    let started = std::time::Instant::now();
    let mut rotations: Vec<String> = Vec::new();
    let mut kids_seen = std::collections::BTreeSet::new();
    let mut refused = Vec::new();
    let mut exchanged = 0;
    let mut i = 0usize;
    // Rotate on A at 0.5 s and on B at 2.5 s (inside A's pre-publication),
    // then keep going until B's key has signed for a while everywhere.
    while started.elapsed() < std::time::Duration::from_secs(9) {
        let due = match rotations.len() {
            0 => std::time::Duration::from_millis(500),
            1 => std::time::Duration::from_millis(2500),
            _ => std::time::Duration::MAX,
        };
        if started.elapsed() >= due {
            let on = replicas[rotations.len()];
            let r: Value = on
                .post("/v1/admin/keys/rotate", Some(&a.admin_token), Value::Null)
                .await
                .json()
                .await
                .unwrap();
            rotations.push(r["kid"].as_str().unwrap().to_owned());
        }
        let issuer = replicas[i % 3];
        let cap = issuer
            .capability_ok(&token, "read", "svc-reports:reports/q1")
            .await;
        let cap = cap["token"].as_str().unwrap();
        kids_seen.insert(
            crate::support::tokens::header_of(cap)["kid"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
        let verifier = replicas[(i + 1) % 3];
        let resp = verifier.exchange(cap).await;
        if resp.status() == StatusCode::OK {
            exchanged += 1;
        } else {
            let at = started.elapsed();
            refused.push((at, resp.status(), resp.text().await.unwrap()));
        }
        i += 1;
        // Well under the runs' rate cap (6000/min).
        tokio::time::sleep(std::time::Duration::from_millis(15)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut forged_sent = 0;
    for t in attackers {
        forged_sent += t.await.unwrap();
    }
    assert!(
        refused.is_empty(),
        "{} refused of {}: {refused:?}",
        refused.len(),
        i
    );
    assert!(exchanged > 50, "{exchanged} exchanges");
    assert!(forged_sent > 100, "{forged_sent} forged tokens sent");
    assert_eq!(rotations.len(), 2);
    for kid in &rotations {
        assert!(kids_seen.contains(kid), "{kid} never signed: {kids_seen:?}");
    }
}

/// Policy versions looked for every second.
const FAST_POLICY: &str = "[replicas]\npolicy_sync = \"1s\"\n";

/// Polls `check` every 100 ms until it holds or `limit` passes; returns how long it took.
async fn within<F, Fut>(limit: std::time::Duration, what: &str, mut check: F) -> std::time::Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = std::time::Instant::now();
    loop {
        if check().await {
            return started.elapsed();
        }
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn status(app: &TestApp) -> Value {
    let resp = app.get("/v1/admin/status", Some(&app.admin_token)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let v: Value = resp.json().await.unwrap();
    crate::support::app::wire::<tessera_client::types::BrokerStatus>(&v);
    v
}

/// Every replica reports `version` (and one hash) for itself and the others.
async fn all_report(apps: &[&TestApp], version: i64) -> bool {
    for app in apps {
        let s = status(app).await;
        let replicas = s["replicas"].as_array().unwrap();
        if replicas.len() != apps.len()
            || s["published_policy"]["version"] != version
            || replicas.iter().any(|r| {
                r["policy_version"] != version
                    || r["policy_sha256"] != s["published_policy"]["sha256"]
            })
        {
            return false;
        }
    }
    true
}

/// A reload on one of three replicas publishes a version that every replica
/// enforces within the stated bound (3 × policy_sync + store.timeout), audited
/// once; status shows one version everywhere; a replica started with older
/// files adopts it rather than rolling everyone back; versions written to the
/// store without the KEK (new, or a genuine one renumbered) are refused by all
/// and named; a genuine version a replica cannot compile turns its readiness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_policy_version_for_every_replica() {
    let (a, b, c) = three_replicas(FAST_POLICY).await;
    let bound = std::time::Duration::from_secs(3 + 2);
    let all = [&a, &b, &c];
    // Started with the same files: one version, reported by all three.
    within(bound, "status after start", || all_report(&all, 1)).await;

    let (_k, _r, token) = a.run_for("ursula").await;
    for app in [&a, &b, &c] {
        app.capability_ok(&token, "read", "svc-reports:reports/q1")
            .await;
    }

    // A forbid reaches A's files only; the reload on A publishes it.
    std::fs::write(
        a.policy_dir().join("stop.cedar"),
        "@id(\"stop-ursula\")\nforbid (principal == Tessera::User::\"ursula\", action, resource);\n",
    )
    .unwrap();
    let reloaded: Value = a
        .post("/v1/admin/policy/reload", Some(&a.admin_token), Value::Null)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(reloaded["version"], 2, "{reloaded}");
    assert_error(
        a.capability(&token, "read", "svc-reports:reports/q1").await,
        StatusCode::FORBIDDEN,
        "capability_denied",
    )
    .await;
    for app in [&b, &c] {
        let took = within(bound, "the forbid on another replica", || async {
            app.capability(&token, "read", "svc-reports:reports/q1")
                .await
                .status()
                == StatusCode::FORBIDDEN
        })
        .await;
        eprintln!("old policy stopped issuing on a replica after {took:?}");
    }
    within(bound, "status after the reload", || all_report(&all, 2)).await;
    // A replica started now with the old files (no forbid) enforces the
    // published version, and publishes nothing: no rollback for everyone.
    let d = a.replica().await;
    assert_error(
        d.capability(&token, "read", "svc-reports:reports/q1").await,
        StatusCode::FORBIDDEN,
        "capability_denied",
    )
    .await;
    let all = [&a, &b, &c, &d];
    within(bound, "status with a fourth replica", || {
        all_report(&all, 2)
    })
    .await;
    let published = a.audit("event=policy.reloaded").await;
    let of_v2: Vec<_> = published
        .iter()
        .filter(|e| e["detail"].as_str().unwrap_or("").contains("version=2"))
        .collect();
    assert_eq!(of_v2.len(), 1, "audited once: {published:?}");

    // Someone with the store but not the KEK publishes a permit-all version 3
    // (and a copy of genuine version 1 renumbered 4: its MAC covers the number).
    let files = tessera_broker::policy::files::PolicyFiles::read_dir(&b.policy_dir()).unwrap();
    let sources = serde_json::to_string(&files).unwrap();
    let insert = "INSERT INTO policy_versions (version, sha256, sources, trigger, replica, published_at, mac) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)";
    sqlx::query(&a.state.store.sql(insert))
        .bind(3i64)
        .bind(files.sha256())
        .bind(&sources)
        .bind("admin")
        .bind("intruder")
        .bind(a.state.clock.now())
        .bind("00".repeat(32))
        .execute(a.state.store.pool())
        .await
        .unwrap();
    let v1 = tessera_broker::store::policy_versions::load(&a.state.store, 1)
        .await
        .unwrap()
        .unwrap();
    sqlx::query(&a.state.store.sql(insert))
        .bind(4i64)
        .bind(&v1.sha256)
        .bind(&v1.sources)
        .bind(&v1.trigger)
        .bind(&v1.replica)
        .bind(v1.published_at)
        .bind(&v1.mac)
        .execute(a.state.store.pool())
        .await
        .unwrap();
    // Refused everywhere, named in the status, and no reason to leave rotation.
    within(bound, "the unsealed versions named", || async {
        status(&a).await["unsealed_versions"] == json!([4, 3])
    })
    .await;
    tokio::time::sleep(bound).await;
    for app in all {
        assert_eq!(app.get("/readyz", None).await.status(), StatusCode::OK);
        assert_error(
            app.capability(&token, "read", "svc-reports:reports/q1")
                .await,
            StatusCode::FORBIDDEN,
            "capability_denied",
        )
        .await;
    }
    assert!(all_report(&all, 2).await);

    // A genuine version 5 that does not compile here (as from a newer broker):
    // every replica keeps version 2 and says policy_behind.
    use tessera_broker::store::policy_versions::Seal;
    let mut broken = v1.clone();
    broken.version = 5;
    let mut bad_files = files.clone();
    bad_files
        .policies
        .push(("new.cedar".into(), "permit (".into()));
    broken.sources = serde_json::to_string(&bad_files).unwrap();
    broken.sha256 = bad_files.sha256();
    broken.mac = tessera_broker::policy::in_force::PolicySeal::new(&a.state.kek).seal(&broken);
    sqlx::query(&a.state.store.sql(insert))
        .bind(broken.version)
        .bind(&broken.sha256)
        .bind(&broken.sources)
        .bind(&broken.trigger)
        .bind(&broken.replica)
        .bind(broken.published_at)
        .bind(&broken.mac)
        .execute(a.state.store.pool())
        .await
        .unwrap();
    // Buried under more planted rows than one page, the last numbered
    // i64::MAX: version 5 is still found, and numbering goes on.
    for forged in (100i64..=140).chain([i64::MAX]) {
        sqlx::query(&a.state.store.sql(insert))
            .bind(forged)
            .bind(files.sha256())
            .bind(&sources)
            .bind("admin")
            .bind("intruder")
            .bind(a.state.clock.now())
            .bind("00".repeat(32))
            .execute(a.state.store.pool())
            .await
            .unwrap();
    }
    for app in all {
        within(bound + bound, "policy_behind in /readyz", || async {
            let resp = app.get("/readyz", None).await;
            let v: Value = resp.json().await.unwrap();
            v["reasons"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r["code"] == "policy_behind"))
        })
        .await;
        assert_error(
            app.capability(&token, "read", "svc-reports:reports/q1")
                .await,
            StatusCode::FORBIDDEN,
            "capability_denied",
        )
        .await;
    }
    // A replica started now (an older broker, as it were) does not publish
    // its files over version 5: it is behind like the others.
    let e = a.replica().await;
    assert_eq!(status(&e).await["published_policy"]["version"], 5);
    within(
        bound + bound,
        "policy_behind on the new replica",
        || async {
            let v: Value = e.get("/readyz", None).await.json().await.unwrap();
            v["reasons"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r["code"] == "policy_behind"))
        },
    )
    .await;
    let all = [&a, &b, &c, &d, &e];
    // A genuine reload publishes version 6, and every replica is ready on it.
    std::fs::remove_file(a.policy_dir().join("stop.cedar")).unwrap();
    let reloaded: Value = a
        .post("/v1/admin/policy/reload", Some(&a.admin_token), Value::Null)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(reloaded["version"], 6, "{reloaded}");
    within(bound, "status after the genuine version", || {
        all_report(&all, 6)
    })
    .await;
    for app in all {
        assert_eq!(app.get("/readyz", None).await.status(), StatusCode::OK);
        app.capability_ok(&token, "read", "svc-reports:reports/q1")
            .await;
    }
}
