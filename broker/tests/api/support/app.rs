//! One `TestApp`: the real router on port 0 over a fresh store (a temporary
//! SQLite file, or a fresh schema in the PostgreSQL server on this machine), with
//! helpers per endpoint. `both_stores!` runs a test body against both stores.
//!
//! PostgreSQL is not optional: if it cannot be reached the PostgreSQL variants
//! fail, they never skip. `TESSERA_TEST_PG_URL` overrides the server URL.

use reqwest::{Response, StatusCode};
use serde_json::{json, Value};
use sqlx::{Connection, Executor};
use std::net::SocketAddr;
use std::path::PathBuf;
use tessera_broker::app::AppState;
use tessera_broker::boot::{Broker, Jobs};
use tessera_broker::config::{Config, Overrides};
use tessera_broker::keys::Kek;
use tessera_broker::policy::PolicyEngine;
use tessera_broker::secret::AdminToken;
use tessera_client::types::{
    AuditPage, CapabilityResponse, CreateRunResponse, CreateRuntimeRequest, CreateRuntimeResponse,
    ExchangeRequest, ExchangeResponse, IntrospectResponse,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Db {
    Sqlite,
    Postgres,
}

pub fn pg_url() -> String {
    std::env::var("TESSERA_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

pub const TEST_POLICY: &str = r#"
@id("readers") @ttl("10m") @uses("3")
permit (principal in Tessera::Group::"analysts", action == Tessera::Action::"read", resource)
when { resource.backend == "svc-reports" && resource.path like "reports/*" };

@id("rita-rate") @rate("3/min") @ttl("1m")
permit (principal == Tessera::User::"rita", action == Tessera::Action::"read", resource)
when { resource.backend == "svc-reports" };

@id("ursula-many-uses") @uses("50")
permit (principal == Tessera::User::"ursula", action == Tessera::Action::"read", resource)
when { resource.backend == "svc-reports" };

@id("needs-human") @approval("required") @ttl("5m")
permit (principal == Tessera::User::"bob", action == Tessera::Action::"invoke", resource);

@id("billing-for-summaries")
permit (principal in Tessera::Group::"analysts", action == Tessera::Action::"write", resource)
when { resource.backend == "svc-billing" && context.task.kind == "summarize" };

@id("no-untrusted")
forbid (principal, action, resource) when { context.run.labels.contains("untrusted-input") };
"#;

pub const TEST_ENTITIES: &str = r#"[
  { "uid": { "type": "Tessera::Group", "id": "analysts" }, "attrs": {}, "parents": [] },
  { "uid": { "type": "Tessera::User", "id": "alice" }, "attrs": {},
    "parents": [{ "type": "Tessera::Group", "id": "analysts" }] },
  { "uid": { "type": "Tessera::Group", "id": "release" }, "attrs": {}, "parents": [] },
  { "uid": { "type": "Tessera::Group", "id": "finance" }, "attrs": {}, "parents": [] },
  { "uid": { "type": "Tessera::User", "id": "dana" }, "attrs": {},
    "parents": [{ "type": "Tessera::Group", "id": "release" }, { "type": "Tessera::Group", "id": "finance" }] },
  { "uid": { "type": "Tessera::User", "id": "erin" }, "attrs": {},
    "parents": [{ "type": "Tessera::Group", "id": "finance" }] },
  { "uid": { "type": "Tessera::User", "id": "fred" }, "attrs": {},
    "parents": [{ "type": "Tessera::Group", "id": "finance" }, { "type": "Tessera::Group", "id": "release" }] }
]"#;

pub const TEST_CONFIG: &str = r#"
[limits]
max_capability_ttl = "1h"
default_capability_ttl = "5m"
max_run_ttl = "2h"

[backends.svc-reports]
kind = "token"
audience = "https://reports.internal"

[backends.svc-billing]
kind = "token"
audience = "https://billing.internal"
actions = ["read", "write"]
"#;

/// The database backends [`TestAppBuilder::db_backends`] adds: the real
/// PostgreSQL and MariaDB servers on this machine, URLs from the environment
/// like a deployment. Strict mode is off: the machine's shared servers keep PostgreSQL's and MariaDB's defaults (lo_*
/// for PUBLIC, CONNECT on every database), which a test must not change for
/// everyone. Strict mode is tested on private clusters (`db_contained`).
pub const DB_CONFIG: &str = r#"
[backends.pg-test]
kind = "postgres"
url_env = "TESSERA_TEST_BACKEND_PG"
strict = false

[backends.my-test]
kind = "mysql"
url_env = "TESSERA_TEST_BACKEND_MY"
account_host = "%"
strict = false
"#;

pub const DB_POLICY: &str = r#"
@id("db-analysts") @ttl("10m") @uses("5")
permit (principal in Tessera::Group::"analysts",
        action in [Tessera::Action::"select", Tessera::Action::"insert"], resource)
when { resource.kind == "postgres" || resource.kind == "mysql" };

@id("db-dora-fifty") @ttl("10m") @uses("50")
permit (principal == Tessera::User::"dora", action == Tessera::Action::"select", resource)
when { resource.kind == "postgres" || resource.kind == "mysql" };

@id("db-erin-all-tables") @ttl("10m") @uses("5")
permit (principal == Tessera::User::"erin", action == Tessera::Action::"select", resource)
when { resource.kind == "postgres" && resource.path like "postgres.tsr_t_*.\*" };

@id("db-frank-mysql-databases") @ttl("10m") @uses("5")
permit (principal == Tessera::User::"frank", action == Tessera::Action::"select", resource)
when { resource.kind == "mysql" && resource.path like "tsr_t_*.\*" };

@id("db-ursula-scale") @ttl("1h") @uses("10000")
permit (principal == Tessera::User::"ursula", action == Tessera::Action::"select", resource)
when { resource.backend == "pg-test" };
"#;

/// The MariaDB server the database-backend tests use (`TESSERA_TEST_MYSQL_URL`).
pub fn mysql_url() -> String {
    std::env::var("TESSERA_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

/// Where the database backends of [`TestAppBuilder::db_backends`] point.
#[derive(Debug, Clone)]
pub struct DbBackends {
    pub pg: String,
    pub mysql: String,
    /// Strict mode of both backends (see [`DB_CONFIG`]).
    pub strict: bool,
    /// `account_host` of the MariaDB backend.
    pub mysql_account_host: String,
}

impl Default for DbBackends {
    fn default() -> Self {
        DbBackends {
            pg: pg_url(),
            mysql: mysql_url(),
            strict: false,
            mysql_account_host: "%".to_owned(),
        }
    }
}

/// The test policy plus `extra` as a second file (when not empty).
pub fn test_policy_with(extra: &str) -> PolicyEngine {
    let schema = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../policy/schema.cedarschema"
    ))
    .expect("shipped schema");
    let mut files = vec![("test.cedar".to_owned(), TEST_POLICY.to_owned())];
    if !extra.is_empty() {
        files.push(("extra.cedar".to_owned(), extra.to_owned()));
    }
    PolicyEngine::from_sources(&schema, &files, TEST_ENTITIES).expect("test policy loads")
}

/// Writes the test policy set into `dir` (what a reload will read).
pub fn write_policy_dir(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).expect("policy dir");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../policy/schema.cedarschema"),
        dir.join("schema.cedarschema"),
    )
    .expect("schema");
    std::fs::write(dir.join("test.cedar"), TEST_POLICY).expect("policy");
    std::fs::write(dir.join("entities.json"), TEST_ENTITIES).expect("entities");
}

pub struct TestApp {
    pub addr: SocketAddr,
    /// The egress gateway's address, when the configuration has `[gateway]`.
    pub gateway: Option<SocketAddr>,
    pub state: AppState,
    pub client: reqwest::Client,
    pub admin_token: String,
    store_url: String,
    kek: String,
    extra: Extra,
    server: tokio::task::JoinHandle<()>,
    _dir: TempDir,
}

/// What a test adds to the default set-up: more `tessera.toml` (backends), one
/// more policy file, environment variables the config reads.
#[derive(Debug, Clone, Default)]
pub struct Extra {
    pub config: String,
    pub policy: String,
    pub env: Vec<(String, String)>,
}

impl Extra {
    /// This set-up and then `more`'s: configuration and policy appended, the
    /// environment extended.
    fn and(mut self, more: Extra) -> Extra {
        for (mine, theirs) in [
            (&mut self.config, more.config),
            (&mut self.policy, more.policy),
        ] {
            if !theirs.is_empty() {
                if !mine.is_empty() {
                    mine.push('\n');
                }
                mine.push_str(&theirs);
            }
        }
        self.env.extend(more.env);
        self
    }
}

impl DbBackends {
    /// The configuration, policy and environment of the database backends.
    fn extra(self) -> Extra {
        Extra {
            config: DB_CONFIG
                .replace("strict = false", &format!("strict = {}", self.strict))
                .replace(
                    "account_host = \"%\"",
                    &format!("account_host = \"{}\"", self.mysql_account_host),
                ),
            policy: DB_POLICY.to_owned(),
            env: vec![
                ("TESSERA_TEST_BACKEND_PG".to_owned(), self.pg),
                ("TESSERA_TEST_BACKEND_MY".to_owned(), self.mysql),
            ],
        }
    }
}

/// How a [`TestApp`] is set up: `TestApp::builder(db)`, any of the options,
/// then [`TestAppBuilder::start`].
#[must_use = "a builder starts nothing until `start`"]
pub struct TestAppBuilder {
    db: Db,
    pg_server: Option<String>,
    extra: Extra,
}

impl TestAppBuilder {
    /// Where the PostgreSQL store's server is reached (e.g. through a test
    /// proxy) instead of [`pg_url`]; a fresh schema is made there.
    pub fn pg_server(mut self, url: impl Into<String>) -> Self {
        self.pg_server = Some(url.into());
        self
    }

    /// Adds `extra` to the default set-up (other tests keep the default config).
    pub fn extra(mut self, extra: Extra) -> Self {
        self.extra = std::mem::take(&mut self.extra).and(extra);
        self
    }

    /// Adds the database backends `pg-test` (PostgreSQL) and `my-test`
    /// (MariaDB), pointed at `backends`, and the database policies ([`DB_POLICY`]).
    pub fn db_backends(self, backends: DbBackends) -> Self {
        self.extra(backends.extra())
    }

    /// A fresh store, KEK and admin token, and the broker serving them.
    pub async fn start(self) -> TestApp {
        tessera_broker::server::install_crypto_provider();
        let dir = TempDir::new();
        let store_url = match self.db {
            Db::Sqlite => format!("sqlite://{}", dir.0.join("tessera.db").display()),
            Db::Postgres => fresh_pg_schema(&self.pg_server.unwrap_or_else(pg_url)).await,
        };
        let (_, kek) = Kek::generate();
        let admin = AdminToken::generate();
        TestApp::launch(
            dir,
            store_url,
            kek.to_string(),
            admin.expose_secret().to_owned(),
            self.extra,
        )
        .await
    }
}

/// A directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("tessera-test-{}", tessera_broker::ids::new_id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh PostgreSQL schema; returns a URL whose connections use it.
pub async fn fresh_pg_schema(server_url: &str) -> String {
    let schema = format!(
        "t_{}",
        tessera_broker::ids::hex(&tessera_broker::ids::random_bytes::<8>())
    );
    let mut conn = sqlx::PgConnection::connect(&pg_url())
        .await
        .expect("PostgreSQL must be running on 127.0.0.1:5432 (see .ci/run)");
    conn.execute(format!("CREATE SCHEMA {schema}").as_str())
        .await
        .expect("create schema");
    let sep = if server_url.contains('?') { '&' } else { '?' };
    format!("{server_url}{sep}options=-c%20search_path%3D{schema}")
}

impl TestApp {
    /// The default broker on `db`: `TestApp::builder(db).start()`.
    pub async fn spawn(db: Db) -> TestApp {
        Self::builder(db).start().await
    }

    /// A broker on `db`, set up further before [`TestAppBuilder::start`].
    pub fn builder(db: Db) -> TestAppBuilder {
        TestAppBuilder {
            db,
            pg_server: None,
            extra: Extra::default(),
        }
    }

    /// Stops this broker (server and state dropped, nothing settled) and starts
    /// a new one on the same store, keys and configuration: a restart.
    pub async fn restart(self) -> TestApp {
        self.server.abort();
        let _ = self.server.await;
        let TestApp {
            state,
            store_url,
            kek,
            admin_token,
            extra,
            _dir,
            ..
        } = self;
        drop(state);
        Self::launch(_dir, store_url, kek, admin_token, extra).await
    }

    /// A second broker on the same store, KEK and admin token: another replica.
    pub async fn replica(&self) -> TestApp {
        Self::launch(
            TempDir::new(),
            self.store_url.clone(),
            self.kek.clone(),
            self.admin_token.clone(),
            self.extra.clone(),
        )
        .await
    }

    /// Serves a broker on this store, KEK, admin token and set-up.
    async fn launch(
        dir: TempDir,
        store_url: String,
        kek: String,
        admin: String,
        extra: Extra,
    ) -> TestApp {
        let url = store_url.clone();
        let extra_env = extra.env.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let env = move |k: &str| {
            if k == "TESSERA_STORE_URL" {
                return Some(url.clone());
            }
            let set = extra_env
                .iter()
                .find(|(name, _)| name == k)
                .map(|(_, v)| v.clone());
            // The OAuth issuer (and DPoP `htu` base) is where this broker listens.
            if k == "TESSERA_OAUTH_ISSUER" && set.is_none() {
                return Some(format!("http://{addr}"));
            }
            set
        };
        write_policy_dir(&dir.0.join("policy"));
        if !extra.policy.is_empty() {
            std::fs::write(dir.0.join("policy").join("extra.cedar"), &extra.policy)
                .expect("extra policy");
        }
        let config = Config::from_toml(
            &format!("{TEST_CONFIG}\n{}", extra.config),
            &Overrides {
                dev: true,
                data_dir: Some(dir.0.clone()),
                policy_dir: Some(dir.0.join("policy")),
                ..Default::default()
            },
            &env,
        )
        .expect("test config");
        // The key and the admin token where a dev broker reads them, as an
        // operator would leave them; the broker is built and served by the
        // function `tessera serve` uses.
        for (file, secret) in [("tessera-dev.kek", &kek), ("admin.token", &admin)] {
            let path = dir.0.join(file);
            if !path.exists() {
                tessera_broker::private_fs::write_new(&path, secret).expect("secret file");
            }
        }
        let broker = Broker::build_on(config, listener)
            .await
            .expect("broker builds");
        let state = broker.app().clone();
        let gateway = broker.gateway_addr();
        // Only the replica sync runs in the background, as it does in
        // `serve`; the tests drive revocation, expiry and webhooks one pass
        // at a time themselves.
        let server = tokio::spawn(async move {
            let _ = broker
                .run_until_stopped(Jobs::ReplicaSync, std::future::pending())
                .await;
        });
        TestApp {
            addr,
            gateway,
            state,
            client: reqwest::Client::new(),
            admin_token: admin,
            store_url,
            kek,
            extra,
            server,
            _dir: dir,
        }
    }

    /// The policy directory this broker reloads from.
    pub fn policy_dir(&self) -> PathBuf {
        self._dir.0.join("policy")
    }

    /// Audit rows as `GET /v1/admin/audit?{query}` returns them.
    pub async fn audit(&self, query: &str) -> Vec<Value> {
        let resp = self
            .get(&format!("/v1/admin/audit?{query}"), Some(&self.admin_token))
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
        let v: Value = resp.json().await.expect("json");
        wire::<AuditPage>(&v);
        v["events"].as_array().expect("events").clone()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub async fn post(&self, path: &str, bearer: Option<&str>, body: Value) -> Response {
        let mut req = self.client.post(self.url(path)).json(&body);
        if let Some(b) = bearer {
            req = req.bearer_auth(b);
        }
        req.send().await.expect("request")
    }

    pub async fn get(&self, path: &str, bearer: Option<&str>) -> Response {
        let mut req = self.client.get(self.url(path));
        if let Some(b) = bearer {
            req = req.bearer_auth(b);
        }
        req.send().await.expect("request")
    }

    pub async fn create_runtime(&self, name: &str, users: &str, kinds: &str) -> String {
        let resp = self
            .post(
                "/v1/admin/runtimes",
                Some(&self.admin_token),
                to_json(&CreateRuntimeRequest {
                    name: name.to_owned(),
                    users: Some(users.to_owned()),
                    task_kinds: Some(kinds.to_owned()),
                    client_cert_sha256: None,
                }),
            )
            .await;
        assert_eq!(resp.status(), StatusCode::CREATED);
        let v: Value = resp.json().await.expect("json");
        wire::<CreateRuntimeResponse>(&v).key
    }

    pub async fn start_run_with(
        &self,
        runtime_key: &str,
        user: &str,
        kind: &str,
        labels: &[&str],
    ) -> Response {
        self.post(
            "/v1/runs",
            Some(runtime_key),
            json!({ "user": user, "task": { "id": "t-1", "kind": kind, "attributes": {} }, "ttl": "30m", "labels": labels }),
        )
        .await
    }

    /// Starts a run; returns (run id, run token).
    pub async fn start_run(&self, runtime_key: &str, user: &str, kind: &str) -> (String, String) {
        let resp = self.start_run_with(runtime_key, user, kind, &[]).await;
        assert_eq!(resp.status(), StatusCode::CREATED);
        let v: Value = resp.json().await.expect("json");
        let run = wire::<CreateRunResponse>(&v);
        (run.run_id.into(), run.run_token)
    }

    /// A runtime "rt" for everyone and a run for `user`.
    pub async fn run_for(&self, user: &str) -> (String, String, String) {
        let key = self
            .create_runtime(
                &format!("rt-{}", &tessera_broker::ids::new_id()[24..]),
                "*",
                "*",
            )
            .await;
        let (id, token) = self.start_run(&key, user, "summarize").await;
        (key, id, token)
    }

    pub async fn capability(&self, run_token: &str, action: &str, resource: &str) -> Response {
        self.post(
            "/v1/capabilities",
            Some(run_token),
            json!({ "action": action, "resource": resource }),
        )
        .await
    }

    /// Asks for a capability that must be issued; returns the response body.
    pub async fn capability_ok(&self, run_token: &str, action: &str, resource: &str) -> Value {
        let resp = self.capability(run_token, action, resource).await;
        let status = resp.status();
        let v: Value = resp.json().await.expect("json");
        assert_eq!(status, StatusCode::CREATED, "{v}");
        wire::<CapabilityResponse>(&v);
        v
    }

    /// `POST /v1/runs/{run_id}/end` as the runtime holding `key`.
    pub async fn end_run(&self, key: &str, run_id: &str) -> Response {
        self.post(&format!("/v1/runs/{run_id}/end"), Some(key), Value::Null)
            .await
    }

    /// Exchanges a capability that must be exchanged; returns the response body.
    pub async fn exchange_ok<T: CapabilityToken + ?Sized>(&self, cap: &T) -> Value {
        let resp = self.exchange(cap.token()).await;
        let status = resp.status();
        let v: Value = resp.json().await.expect("json");
        assert_eq!(status, StatusCode::OK, "{v}");
        wire::<ExchangeResponse>(&v);
        v
    }

    pub async fn exchange(&self, capability: &str) -> Response {
        let body = ExchangeRequest {
            capability: capability.to_owned(),
        };
        self.post("/v1/exchange", None, to_json(&body)).await
    }

    pub async fn introspect(&self, bearer: &str, token: &str) -> Value {
        let resp = self
            .post("/v1/introspect", Some(bearer), json!({ "token": token }))
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
        let v: Value = resp.json().await.expect("json");
        wire::<IntrospectResponse>(&v);
        v
    }

    /// A run's capabilities as its runtime (`key`) reads them (`GET /v1/runs/{id}`).
    pub async fn run_capabilities(&self, key: &str, run_id: &str) -> Vec<Value> {
        let run: Value = self
            .get(&format!("/v1/runs/{run_id}"), Some(key))
            .await
            .json()
            .await
            .expect("json");
        run["capabilities"].as_array().cloned().unwrap_or_default()
    }

    pub async fn count(&self, table: &str) -> i64 {
        let q = format!("SELECT COUNT(*) AS n FROM {table}");
        let row = sqlx::query(&q)
            .fetch_one(self.state.store.pool())
            .await
            .expect("count");
        sqlx::Row::try_get::<i64, _>(&row, "n").expect("n")
    }
}

/// Asserts an error response: status, stable code, request id present.
pub async fn assert_error(resp: Response, status: StatusCode, code: &str) -> Value {
    assert_eq!(resp.status(), status, "expected {status} {code}");
    let header_id = resp
        .headers()
        .get("x-request-id")
        .map(|v| v.to_str().expect("ascii").to_owned());
    let v: Value = resp.json().await.expect("error body is JSON");
    assert_eq!(v["error"]["code"], code, "{v}");
    let rid = v["error"]["request_id"].as_str().expect("request id");
    assert!(rid.starts_with("req_"));
    assert_eq!(Some(rid.to_owned()), header_id);
    assert!(v["error"]["message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
    v
}

/// Runs one async test body against SQLite and against PostgreSQL.
#[macro_export]
macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name($crate::support::app::TestApp::spawn($crate::support::app::Db::Sqlite).await).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$name($crate::support::app::TestApp::spawn($crate::support::app::Db::Postgres).await).await
                }
            }
        )*
    };
}

/// The real `tessera` binary serving this test's store, keys, admin token and
/// configuration (see [`TestApp::process`]); killed when dropped.
pub struct ProcessBroker {
    pub child: std::process::Child,
    pub addr: SocketAddr,
    pub log: PathBuf,
    _dir: TempDir,
}

impl ProcessBroker {
    /// Where the process's egress gateway listens (from its log: the
    /// configuration may say port 0), waiting up to ten seconds for it.
    pub async fn gateway_addr(&self) -> SocketAddr {
        for _ in 0..100 {
            let log = self.log_text();
            let found = log
                .lines()
                .filter(|l| l.contains("egress gateway listening"))
                .find_map(|l| {
                    l.split("listen=")
                        .nth(1)?
                        .split_whitespace()
                        .next()?
                        .parse()
                        .ok()
                });
            if let Some(addr) = found {
                return addr;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("the broker process's gateway did not say where it listens")
    }

    /// Sends `signal` (e.g. `SIGTERM`, `SIGKILL`) to the process.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), signal)
            .expect("signal the broker");
    }

    /// Waits up to `within` for the process to exit; panics if it does not.
    pub async fn exited(&mut self, within: std::time::Duration) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the broker did not exit within {within:?}; its log:\n{}",
                self.log_text()
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Everything the process wrote to stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log contains `needle` (a failpoint reached, …).
    pub async fn logged(&self, needle: &str, within: std::time::Duration) {
        let deadline = std::time::Instant::now() + within;
        while !self.log_text().contains(needle) {
            assert!(
                std::time::Instant::now() < deadline,
                "{needle:?} not logged within {within:?}; the log:\n{}",
                self.log_text()
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

impl Drop for ProcessBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl TestApp {
    /// Starts the real binary (`tessera serve --dev`) on this app's store, KEK,
    /// admin token, configuration and policy, with `env` added, and waits until
    /// it is ready. This app's HTTP helpers keep talking to the in-process
    /// router unless the test points `addr` at the process.
    pub async fn process(&self, env: &[(&str, &str)]) -> ProcessBroker {
        self.process_with(env, &[]).await
    }

    /// [`TestApp::process`], started through `wrapper` (e.g. `prlimit --nofile=256:256 --`).
    /// Ready means listening (plain or TLS) and, for plain HTTP, `/readyz` answering 200.
    pub async fn process_with(&self, env: &[(&str, &str)], wrapper: &[&str]) -> ProcessBroker {
        let dir = TempDir::new();
        let policy = dir.0.join("policy");
        write_policy_dir(&policy);
        if !self.extra.policy.is_empty() {
            std::fs::write(policy.join("extra.cedar"), &self.extra.policy).expect("extra policy");
        }
        let config = dir.0.join("tessera.toml");
        std::fs::write(&config, format!("{TEST_CONFIG}\n{}", self.extra.config)).expect("config");
        // Mode 0600: a dev broker refuses a token file others may read.
        let token = dir.0.join("admin.token");
        std::fs::write(&token, &self.admin_token).expect("admin token");
        std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .expect("admin token mode");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let log = dir.0.join("broker.log");
        let bin = env!("CARGO_BIN_EXE_tessera");
        let mut cmd = match wrapper.split_first() {
            None => std::process::Command::new(bin),
            Some((first, rest)) => {
                let mut c = std::process::Command::new(first);
                c.args(rest).arg(bin);
                c
            }
        };
        cmd.args(["serve", "--dev", "--config"])
            .arg(&config)
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--data-dir")
            .arg(&dir.0)
            .arg("--policy-dir")
            .arg(&policy)
            .env("TESSERA_STORE_URL", &self.store_url)
            .env("TESSERA_KEK", &self.kek)
            .env("TESSERA_ADMIN_TOKEN_FILE", &token)
            .env("TESSERA_LOG", "info,tessera_broker=debug,sqlx=warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"));
        for (k, v) in &self.extra.env {
            cmd.env(k, v);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start tessera");
        let mut broker = ProcessBroker {
            child,
            addr,
            log,
            _dir: dir,
        };
        let tls = self.extra.config.contains("[tls]");
        for _ in 0..400 {
            if broker.log_text().contains("tessera listening") {
                if tls {
                    return broker;
                }
                let ready = self.client.get(format!("http://{addr}/readyz")).send();
                if ready.await.is_ok_and(|r| r.status().is_success()) {
                    return broker;
                }
            }
            if let Ok(Some(status)) = broker.child.try_wait() {
                panic!(
                    "tessera exited ({status}) before ready:\n{}",
                    broker.log_text()
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("tessera did not become ready:\n{}", broker.log_text());
    }
}

/// A capability as a test holds it: the token itself, or the issuance answer.
pub trait CapabilityToken {
    fn token(&self) -> &str;
}

impl CapabilityToken for str {
    fn token(&self) -> &str {
        self
    }
}

impl CapabilityToken for Value {
    fn token(&self) -> &str {
        self["token"]
            .as_str()
            .expect("a capability response has a token")
    }
}

/// Mode 0600: clients refuse a token file that group or others may read.
pub fn private(f: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

/// `v` read as the wire type `T` the broker and the clients share: every
/// typed endpoint helper checks that what the broker sent is that type.
pub fn wire<T: serde::de::DeserializeOwned>(v: &Value) -> T {
    serde_json::from_value(v.clone())
        .unwrap_or_else(|e| panic!("the body is not a {}: {e}: {v}", std::any::type_name::<T>()))
}

/// A wire type as the JSON body a helper sends.
pub fn to_json<T: serde::Serialize>(body: &T) -> Value {
    serde_json::to_value(body).expect("a wire type serialises")
}
