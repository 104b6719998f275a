//! The STS/IAM/S3-compatible peer of the AWS backend tests: moto, started once
//! per test process through `tests/moto/launcher.py` on 127.0.0.1 and a free
//! port, plus a small S3 client that signs with the credentials a test was given.
//!
//! moto is installed by `scripts/moto.sh` (a pinned `moto[server]` in a
//! virtualenv under a cache directory). If it cannot be installed or started the
//! tests fail — they never skip. `TESSERA_MOTO_PYTHON` names an interpreter that
//! already has moto, to skip the script.
//!
//! Why sign S3 requests here instead of using `aws-sdk-s3` or boto3: `aws-sigv4`
//! (the SDK's own signer, already compiled for the broker) makes a GET or PUT a
//! dozen lines, real SigV4 that moto verifies, with no large dev-dependency and
//! no interpreter round-trip per request.

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, SignableBody, SignableRequest, SigningSettings,
};
use aws_sigv4::sign::v4;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

pub const ACCOUNT: &str = "123456789012";
pub const BUCKET: &str = "tessera-reports";
/// Requires external id [`EXTERNAL_ID`].
pub const ROLE: &str = "tessera-agents";
/// No external id; used by the deny_revoked_runs test alone.
pub const REVOKE_ROLE: &str = "tessera-agents-revoke";
pub const EXTERNAL_ID: &str = "tessera-test";

pub struct Keys {
    pub access_key_id: String,
    pub secret_access_key: String,
}

pub struct Moto {
    pub endpoint: String,
    /// The interpreter moto runs in (it also has boto3).
    pub python: String,
    pub broker: Keys,
    pub admin: Keys,
    /// Kept for the life of the test process: its stdin closing stops the server.
    _child: Mutex<Child>,
}

static MOTO: OnceLock<Moto> = OnceLock::new();

fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn python() -> String {
    if let Ok(p) = std::env::var("TESSERA_MOTO_PYTHON") {
        return p;
    }
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/moto.sh"))
        .arg("python")
        .stderr(Stdio::inherit())
        .output()
        .expect("scripts/moto.sh must run (it installs moto for the AWS tests)");
    assert!(
        out.status.success(),
        "scripts/moto.sh python failed: moto is required for the AWS backend tests"
    );
    String::from_utf8(out.stdout)
        .expect("path")
        .trim()
        .to_owned()
}

fn keys(v: &Value, user: &str) -> Keys {
    Keys {
        access_key_id: v["users"][user]["access_key_id"]
            .as_str()
            .expect("key")
            .to_owned(),
        secret_access_key: v["users"][user]["secret_access_key"]
            .as_str()
            .expect("secret")
            .to_owned(),
    }
}

/// The shared moto server (started on first use).
pub fn moto() -> &'static Moto {
    MOTO.get_or_init(|| {
        let log = std::env::temp_dir().join(format!("tessera-moto-{}.log", std::process::id()));
        let python = python();
        let mut child = Command::new(&python)
            .arg(repo_root().join("tests/moto/launcher.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("moto log file"))
            .spawn()
            .expect("start tests/moto/launcher.py");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the launcher's first line");
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|_| {
            panic!(
                "moto launcher did not start; its log: {}\n{}",
                log.display(),
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
        Moto {
            endpoint: format!("http://127.0.0.1:{}", v["port"]),
            python,
            broker: keys(&v, "tessera-broker"),
            admin: keys(&v, "tessera-admin"),
            _child: Mutex::new(child),
        }
    })
}

impl Moto {
    /// Every AssumeRole call moto received, as the launcher recorded it.
    pub async fn sessions(&self) -> Vec<Value> {
        let v: Value = reqwest::get(format!("{}/_tessera/sessions", self.endpoint))
            .await
            .expect("sessions")
            .json()
            .await
            .expect("json");
        v.as_array().expect("array").clone()
    }

    /// The AssumeRole calls whose session name carries `run_id`.
    pub async fn sessions_of(&self, run_id: &str) -> Vec<Value> {
        self.sessions()
            .await
            .into_iter()
            .filter(|s| {
                s["session_name"]
                    .as_str()
                    .is_some_and(|n| n.contains(run_id))
            })
            .collect()
    }

    /// A role's inline policies: name -> document.
    pub async fn role_policies(&self, role: &str) -> Value {
        reqwest::get(format!(
            "{}/_tessera/role-policies?role={role}",
            self.endpoint
        ))
        .await
        .expect("role policies")
        .json()
        .await
        .expect("json")
    }

    /// The next `count` AssumeRole calls for sessions starting with `prefix` fail
    /// with Throttling.
    pub async fn throttle(&self, prefix: &str, count: u32) {
        let resp = reqwest::Client::new()
            .post(format!("{}/_tessera/throttle", self.endpoint))
            .json(&serde_json::json!({ "session_prefix": prefix, "count": count }))
            .send()
            .await
            .expect("throttle");
        assert!(resp.status().is_success());
    }
}

/// Temporary credentials as the broker returned them.
pub struct SessionKeys {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl SessionKeys {
    pub fn from_exchange(v: &Value) -> SessionKeys {
        SessionKeys {
            access_key_id: v["access_key_id"].as_str().expect("key").to_owned(),
            secret_access_key: v["secret_access_key"].as_str().expect("secret").to_owned(),
            session_token: Some(v["session_token"].as_str().expect("token").to_owned()),
        }
    }

    pub fn admin(m: &Moto) -> SessionKeys {
        SessionKeys {
            access_key_id: m.admin.access_key_id.clone(),
            secret_access_key: m.admin.secret_access_key.clone(),
            session_token: None,
        }
    }
}

/// One S3 request to moto, SigV4-signed with `keys`; returns (status, body).
pub async fn s3(keys: &SessionKeys, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let m = moto();
    let url = format!("{}{path}", m.endpoint);
    let identity = Credentials::new(
        keys.access_key_id.clone(),
        keys.secret_access_key.clone(),
        keys.session_token.clone(),
        None,
        "test",
    )
    .into();
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("s3")
        .time(SystemTime::now())
        .settings(settings)
        .build()
        .expect("signing params")
        .into();
    let signable = SignableRequest::new(
        method,
        url.as_str(),
        std::iter::empty(),
        SignableBody::Bytes(body),
    )
    .expect("signable");
    let (instructions, _) = sign(signable, &params).expect("sign").into_parts();
    let mut req = reqwest::Client::new().request(method.parse().expect("method"), &url);
    for (name, value) in instructions.headers() {
        req = req.header(name, value);
    }
    let resp = req.body(body.to_vec()).send().await.expect("s3 request");
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_default())
}
