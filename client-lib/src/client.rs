//! The HTTP client a sandboxed tool uses: one run token, capabilities on demand.
//!
//! Why it reads the run token from a file (or an inherited descriptor) and not
//! from the environment: environment variables are inherited by every child
//! process and printed by every crash reporter; a file the runtime mounts for the
//! sandbox (or a descriptor it passes) is not. A token in `TESSERA_RUN_TOKEN`
//! works only with the explicit opt-in `TESSERA_ALLOW_TOKEN_ENV=1`, with a warning.
//!
//! Retries: a 503 that says nothing was done (`store_unavailable`,
//! `backend_throttled`), a 429 (rate limited, honouring `Retry-After`) and a
//! connection that could not be opened are retried with jittered exponential
//! backoff within a time budget; a decision (403, 401, 400, 404) never is —
//! asking again would not change it — nor is a refusal that may follow a
//! request that took effect (`request_timeout`) or that asking again will not
//! change (500, 502, `backend_unsafe_defaults`).

use crate::credentials::{AwsCredentials, Capability, DatabaseCredentials, Exchanged};
use crate::dpop::DpopKey;
use crate::error::Error;
use crate::types::{
    Approval, ApprovalPending, ApprovalStatus, CapabilityRequest, CapabilityResponse, ErrorBody,
    ExchangeRequest, ExchangeResponse, GatewaySession, OAuthError, RenewHoldsRequest,
    RenewHoldsResponse, RevokeCapabilityResponse, TokenExchangeResponse, GRANT_TYPE_TOKEN_EXCHANGE,
    RUN_TOKEN_TYPE,
};
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The prefix every run token has; anything else is a configuration mistake
/// (e.g. pointing at a runtime key or the admin token).
pub const RUN_TOKEN_PREFIX: &str = "tsr_run_";

/// How requests are retried.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// First backoff; doubles each retry, with ±50 % jitter.
    pub base: Duration,
    /// Longest single backoff (a `Retry-After` longer than the budget ends retrying).
    pub max_backoff: Duration,
    /// Longest total time spent waiting between attempts.
    pub budget: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 4,
            base: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
            budget: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// Never retry.
    pub fn none() -> Self {
        RetryPolicy {
            max_retries: 0,
            ..Default::default()
        }
    }

    fn backoff(&self, retry: u32) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32 << retry.min(16))
            .min(self.max_backoff);
        // Jitter in [50 %, 150 %) so many clients do not retry in step.
        let r = random_u32() as u64 % 1000;
        exp.mul_f64(0.5 + r as f64 / 1000.0)
    }
}

fn random_u32() -> u32 {
    // Jitter needs no cryptographic quality; the hasher's per-process random keys do.
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish() as u32
}

/// Where the broker is and which run this sandbox acts for.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    base: String,
    run_token: SecretString,
    retry: RetryPolicy,
    timeout: Duration,
    /// With DPoP on: the key every capability and access token is bound to.
    dpop: Option<Arc<DpopKey>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.inner.base)
            .field("run_token", &"[redacted]")
            .field("retry", &self.inner.retry)
            .finish()
    }
}

/// Builds a [`Client`]; every setting has a sensible default except the address
/// and the run token.
pub struct ClientBuilder {
    base: Option<String>,
    run_token: Option<SecretString>,
    ca_pem: Option<Vec<u8>>,
    timeout: Duration,
    connect_timeout: Duration,
    user_agent: String,
    retry: RetryPolicy,
    proxy_from_env: bool,
    insecure_http: bool,
    dpop: bool,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("base", &self.base)
            .field("run_token", &self.run_token.as_ref().map(|_| "[redacted]"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            base: None,
            run_token: None,
            ca_pem: None,
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            user_agent: format!("tessera-client/{}", env!("CARGO_PKG_VERSION")),
            retry: RetryPolicy::default(),
            proxy_from_env: false,
            insecure_http: false,
            dpop: false,
        }
    }
}

/// What a capability request may ask for beyond action and resource.
#[derive(Clone, Copy, Default)]
pub struct Ask<'a> {
    /// At most this lifetime, e.g. `"5m"`.
    pub ttl: Option<&'a str>,
    /// Lapse — and be revoked by the broker, downstream credentials included —
    /// unless [`Client::renew_holds`] names it within this long (e.g. `"15s"`):
    /// for a holder that may die without revoking (`tessera exec`).
    pub hold: Option<&'a str>,
    /// Supersede: issuing it revokes the run's earlier live capabilities asked
    /// for in the same slot (a helper called again for the same grant).
    pub slot: Option<&'a str>,
    /// What exactly will be done (a JSON object): shown to approvers, hashed
    /// into the capability's `args` claim, seen by policy as `context.arguments`.
    pub arguments: Option<&'a serde_json::Value>,
    /// When a human must approve (the broker answers 202): wait up to this long
    /// for the decision, then redeem the approval. `None`: do not wait, fail
    /// with [`Error::ApprovalRequired`] (`approval_pending`, with its id).
    pub wait_for_approval: Option<Duration>,
    /// Called with the approval whenever its status is seen to change while
    /// waiting (first when it is asked for): a visible status for a human.
    pub on_approval: Option<&'a (dyn Fn(&Approval) + Sync)>,
}

impl std::fmt::Debug for Ask<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ask")
            .field("ttl", &self.ttl)
            .field("hold", &self.hold)
            .field("slot", &self.slot)
            .field("arguments", &self.arguments)
            .field("wait_for_approval", &self.wait_for_approval)
            .finish_non_exhaustive()
    }
}

/// `POST /v1/capabilities` answers 201 with a capability or 202 with an approval.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Asked {
    Issued(CapabilityResponse),
    Pending(ApprovalPending),
}

/// Longest single long-poll; the broker bounds it by its own request timeout too.
const APPROVAL_POLL: Duration = Duration::from_secs(20);

fn approval_error(code: &str, approval_id: &str, message: String) -> Error {
    Error::ApprovalRequired {
        code: code.to_owned(),
        approval_id: Some(approval_id.to_owned()),
        message,
        request_id: String::new(),
    }
}

impl ClientBuilder {
    /// Broker address, e.g. `https://tessera.internal:8700`.
    pub fn address(mut self, base: impl Into<String>) -> Self {
        self.base = Some(base.into().trim_end_matches('/').to_owned());
        self
    }

    /// The run token itself (prefer [`ClientBuilder::run_token_file`]).
    pub fn run_token(mut self, token: SecretString) -> Self {
        self.run_token = Some(token);
        self
    }

    /// Reads the run token from a file (a runtime mounts it into the sandbox);
    /// refused when group or others may read it.
    pub fn run_token_file(self, path: impl AsRef<Path>) -> Result<Self, Error> {
        let token = read_token(path.as_ref(), true)?;
        Ok(self.run_token(token))
    }

    /// Reads the run token from inherited descriptor `fd` (a pipe, or a file the
    /// runtime opened), then closes it: neither a later child nor a stray read
    /// finds it there again.
    pub fn run_token_fd(self, fd: u32) -> Result<Self, Error> {
        let raw = i32::try_from(fd).ok().filter(|n| *n > 2).ok_or_else(|| {
            Error::Config("TESSERA_RUN_TOKEN_FD must be a descriptor above 2".into())
        })?;
        let token = read_token(Path::new(&format!("/dev/fd/{raw}")), false);
        // Closed whether or not the read worked: it was handed over for this.
        let _ = nix::unistd::close(raw);
        Ok(self.run_token(token?))
    }

    /// PEM certificates of the CA that signed the broker's TLS certificate
    /// (without them, an `https://` broker is verified against the system's roots).
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Total time one HTTP attempt may take.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.connect_timeout = t;
        self
    }

    pub fn user_agent(mut self, ua: impl Into<String>) -> Self {
        self.user_agent = ua.into();
        self
    }

    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Send requests through the proxy that `HTTP_PROXY`/`HTTPS_PROXY`/
    /// `ALL_PROXY` name (default: never; `TESSERA_USE_PROXY=1`). The proxy
    /// sees the run token unless the broker is `https://`.
    pub fn proxy_from_env(mut self, yes: bool) -> Self {
        self.proxy_from_env = yes;
        self
    }

    /// Allow `http://` to a host that is not loopback (default: refused; the
    /// run token would cross the network in clear). `TESSERA_INSECURE_HTTP=1`.
    pub fn insecure_http(mut self, yes: bool) -> Self {
        self.insecure_http = yes;
        self
    }

    /// Bind every capability and access token this client gets to a DPoP key
    /// (RFC 9449) made now and kept in memory: a copied token is useless
    /// without it. Needs the broker's `[oauth] issuer` to be its address.
    pub fn dpop(mut self, yes: bool) -> Self {
        self.dpop = yes;
        self
    }

    pub fn build(self) -> Result<Client, Error> {
        let base = self
            .base
            .as_deref()
            .map(broker_address)
            .ok_or_else(|| Error::Config("no broker address (TESSERA_ADDR)".into()))?;
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Error::Config(format!(
                "broker address must start with http:// or https://, got {base:?}"
            )));
        }
        check_transport(&base, self.ca_pem.is_some(), self.insecure_http)?;
        let run_token = self.run_token.ok_or_else(|| {
            Error::Config("no run token (TESSERA_RUN_TOKEN_FILE or TESSERA_RUN_TOKEN_FD)".into())
        })?;
        check_token_shape(run_token.expose_secret())?;
        let http = transport(&Transport {
            base: &base,
            ca_pem: self.ca_pem.as_deref(),
            timeout: self.timeout,
            connect_timeout: self.connect_timeout,
            user_agent: &self.user_agent,
            proxy_from_env: self.proxy_from_env,
        })?;
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                base,
                run_token,
                retry: self.retry,
                timeout: self.timeout,
                dpop: if self.dpop {
                    Some(Arc::new(DpopKey::generate().map_err(Error::Config)?))
                } else {
                    None
                },
            }),
        })
    }
}

/// The broker's address as given (`TESSERA_ADDR`, `--addr`): a URL, or
/// `host:port`, read as `http://host:port` (which [`check_transport`] allows
/// only to loopback). A trailing `/` is dropped.
pub fn broker_address(text: &str) -> String {
    let text = text.trim().trim_end_matches('/');
    if text.contains("://") {
        text.to_owned()
    } else {
        format!("http://{text}")
    }
}

/// How a client reaches the broker (shared by [`Client`] and
/// [`crate::AdminClient`]: both carry a bearer secret).
pub(crate) struct Transport<'a> {
    pub base: &'a str,
    pub ca_pem: Option<&'a [u8]>,
    pub timeout: Duration,
    pub connect_timeout: Duration,
    pub user_agent: &'a str,
    pub proxy_from_env: bool,
}

/// The HTTP client for a bearer secret: to the broker and nowhere else.
pub(crate) fn transport(t: &Transport<'_>) -> Result<reqwest::Client, Error> {
    let mut http = reqwest::Client::builder()
        .timeout(t.timeout)
        .connect_timeout(t.connect_timeout)
        .user_agent(t.user_agent);
    // The token goes to the broker and nowhere else: a proxy named by
    // HTTP_PROXY/ALL_PROXY (sandboxes often set them) would see it, so
    // proxies are used only when asked for.
    if !t.proxy_from_env {
        http = http.no_proxy();
    }
    // A redirect would re-send the request — the token, a capability in the
    // body — to wherever the Location points.
    http = http.redirect(reqwest::redirect::Policy::none());
    // Always our own rustls configuration (ring provider), so no process-wide
    // crypto provider has to be installed by the embedding program.
    let roots = match (t.ca_pem, t.base.starts_with("https://")) {
        (Some(pem), _) => roots(pem)?,
        (None, false) => rustls::RootCertStore::empty(),
        (None, true) => system_roots()?,
    };
    http.use_preconfigured_tls(tls_config(roots)?)
        .build()
        .map_err(|e| Error::Config(format!("HTTP client: {e}")))
}

/// Where the run token may go in clear: `http://` only to loopback (or with
/// `insecure_http`), and never with a CA configured — that CA would verify
/// nothing, so the setting is a mistake worth saying. Decided from the address
/// alone, before any connection.
/// Whether a bearer secret may be sent to `base` (with a CA given or not):
/// `http://` only to loopback unless `insecure_http`, and never `http://`
/// with a CA. Decided from the address alone, before any connection; shared
/// with every `tessera` command that holds a token (the admin commands too).
pub fn check_transport(base: &str, has_ca: bool, insecure_http: bool) -> Result<(), Error> {
    let url = reqwest::Url::parse(base)
        .map_err(|e| Error::Config(format!("broker address {base:?}: {e}")))?;
    if url.scheme() != "http" {
        return Ok(());
    }
    if has_ca {
        return Err(Error::Config(
            "TESSERA_CA_FILE (a CA) is set but the broker address is http://: nothing would be \
             verified; use https://"
                .into(),
        ));
    }
    let host = url.host_str().unwrap_or_default();
    let loopback = match host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
    {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    };
    if loopback {
        return Ok(());
    }
    if insecure_http {
        tracing::warn!(host = ?url.host_str(), "sending the run token in clear over http:// (TESSERA_INSECURE_HTTP=1)");
        return Ok(());
    }
    Err(Error::Config(format!(
        "refusing to send the run token in clear to {}: use https://, or set \
         TESSERA_INSECURE_HTTP=1 to accept that anyone on the path reads it",
        url.host_str().unwrap_or("?")
    )))
}

/// The system's trust store (or the file `SSL_CERT_FILE` names), for an
/// `https://` broker whose certificate a public or company-wide CA signed.
fn system_roots() -> Result<rustls::RootCertStore, Error> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(Error::Config(
            "an https:// broker: no CA given and the system has no root certificates; give the \
             broker's CA certificate: TESSERA_CA_FILE (the CLI's --ca-file, the library's ca_pem)"
                .into(),
        ));
    }
    Ok(roots)
}

fn roots(pem: &[u8]) -> Result<rustls::RootCertStore, Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| Error::Config(format!("CA file is not PEM: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| Error::Config(format!("bad CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(Error::Config("the CA file holds no certificate".into()));
    }
    Ok(roots)
}

fn tls_config(roots: rustls::RootCertStore) -> Result<rustls::ClientConfig, Error> {
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS: {e}")))
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
}

fn check_token_shape(token: &str) -> Result<(), Error> {
    if !token.starts_with(RUN_TOKEN_PREFIX)
        || token.len() > 256
        || token.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(Error::Config(format!(
            "the run token must be one {RUN_TOKEN_PREFIX}… value (is the file the run token?)"
        )));
    }
    Ok(())
}

/// Reads a run token file. With `private`, a regular file that group or
/// others may read is refused: the token in it is then anyone's on this
/// machine (the mode is read from the opened file, not the path, so a swap
/// between check and read changes nothing).
fn read_token(path: &Path, private: bool) -> Result<SecretString, Error> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let cannot = |e: std::io::Error| {
        Error::Config(format!(
            "cannot read the run token from {}: {e}",
            path.display()
        ))
    };
    let mut file = std::fs::File::open(path).map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    if private && meta.is_file() && meta.mode() & 0o077 != 0 {
        return Err(Error::Config(format!(
            "the run token file {} has mode {:o}: group or others can read it; chmod 600 it \
             (or hand the token over a descriptor, TESSERA_RUN_TOKEN_FD)",
            path.display(),
            meta.mode() & 0o777
        )));
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(cannot)?;
    Ok(SecretString::from(text.trim().to_owned()))
}

impl Client {
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The `Proxy-Authorization` value the broker's egress gateway takes from
    /// this run (`Bearer` and the run token): for a relay that adds it on a
    /// sandboxed tool's behalf, so the tool itself never holds the token.
    pub fn proxy_authorization(&self) -> SecretString {
        SecretString::from(format!("Bearer {}", self.inner.run_token.expose_secret()))
    }

    /// Configures from the environment:
    /// - `TESSERA_ADDR`: the broker address (required);
    /// - the run token from `TESSERA_RUN_TOKEN_FILE` (a path) or
    ///   `TESSERA_RUN_TOKEN_FD` (a descriptor number inherited from the runtime);
    ///   `TESSERA_RUN_TOKEN` (the token itself) only with `TESSERA_ALLOW_TOKEN_ENV=1`;
    /// - `TESSERA_CA_FILE`: the CA of an `https://` broker (without it, the system's roots);
    /// - `TESSERA_USE_PROXY=1`: use the proxy variables (off by default);
    /// - `TESSERA_INSECURE_HTTP=1`: allow `http://` to a host off this machine.
    pub fn from_env() -> Result<Client, Error> {
        Self::from_lookup(&|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
    }

    /// [`Client::from_env`] over any variable lookup (for tests and embedding).
    pub fn from_lookup(env: &dyn Fn(&str) -> Option<String>) -> Result<Client, Error> {
        let mut b = ClientBuilder::default().address(
            env("TESSERA_ADDR").ok_or_else(|| Error::Config("TESSERA_ADDR is not set".into()))?,
        );
        b = if let Some(path) = env("TESSERA_RUN_TOKEN_FILE") {
            b.run_token_file(PathBuf::from(path))?
        } else if let Some(fd) = env("TESSERA_RUN_TOKEN_FD") {
            let n: u32 = fd
                .parse()
                .map_err(|_| Error::Config("TESSERA_RUN_TOKEN_FD must be a number".into()))?;
            b.run_token_fd(n)?
        } else if let Some(token) = env("TESSERA_RUN_TOKEN") {
            if env("TESSERA_ALLOW_TOKEN_ENV").as_deref() != Some("1") {
                return Err(Error::Config(
                    "TESSERA_RUN_TOKEN is set but tokens in the environment leak to every child process; \
                     use TESSERA_RUN_TOKEN_FILE, or set TESSERA_ALLOW_TOKEN_ENV=1 to accept the risk"
                        .into(),
                ));
            }
            tracing::warn!(
                "using the run token from TESSERA_RUN_TOKEN: every child process inherits it"
            );
            b.run_token(SecretString::from(token))
        } else {
            return Err(Error::Config(
                "no run token: set TESSERA_RUN_TOKEN_FILE (or TESSERA_RUN_TOKEN_FD)".into(),
            ));
        };
        b = b
            .dpop(env("TESSERA_DPOP").as_deref() == Some("1"))
            .proxy_from_env(env("TESSERA_USE_PROXY").as_deref() == Some("1"))
            .insecure_http(env("TESSERA_INSECURE_HTTP").as_deref() == Some("1"));
        if let Some(ca) = env("TESSERA_CA_FILE") {
            let pem = std::fs::read(&ca)
                .map_err(|e| Error::Config(format!("cannot read TESSERA_CA_FILE {ca}: {e}")))?;
            b = b.ca_pem(pem);
        }
        b.build()
    }

    /// Asks for a capability for `action` on `resource` (`BACKEND:PATH`).
    pub async fn capability(&self, action: &str, resource: &str) -> Result<Capability, Error> {
        self.capability_for(action, resource, None).await
    }

    /// Like [`Client::capability`], asking for at most `ttl` (e.g. `"5m"`).
    pub async fn capability_for(
        &self,
        action: &str,
        resource: &str,
        ttl: Option<&str>,
    ) -> Result<Capability, Error> {
        let ask = Ask {
            ttl,
            ..Ask::default()
        };
        self.capability_with(action, resource, &ask).await
    }

    /// A capability with the options of `ask` (ttl, hold, slot).
    pub async fn capability_with(
        &self,
        action: &str,
        resource: &str,
        ask: &Ask<'_>,
    ) -> Result<Capability, Error> {
        let mut body = CapabilityRequest {
            ttl: ask.ttl.map(str::to_owned),
            hold: ask.hold.map(str::to_owned),
            slot: ask.slot.map(str::to_owned),
            arguments: ask.arguments.cloned(),
            ..CapabilityRequest::new(action, resource)
        };
        let pending = match self
            .send_with::<_, Asked>(
                "/v1/capabilities",
                Payload::Json(&body),
                Bearer::Run,
                Proof::Bind,
            )
            .await?
        {
            Asked::Issued(r) => return Ok(Capability::new(r, action, resource)),
            Asked::Pending(p) => p,
        };
        let id = pending.approval_id;
        let Some(limit) = ask.wait_for_approval else {
            return Err(approval_error(
                "approval_pending",
                &id,
                format!(
                    "approval {id} is pending (approvers: {}); it expires at {}",
                    pending
                        .approvers
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; "),
                    pending.expires_at
                ),
            ));
        };
        let approval = self.wait_for_approval(&id, limit, ask.on_approval).await?;
        let code = match approval.status {
            ApprovalStatus::Approved => None,
            ApprovalStatus::Pending => Some("approval_pending"),
            ApprovalStatus::Denied => Some("approval_denied"),
            ApprovalStatus::Expired | ApprovalStatus::Cancelled => Some("approval_expired"),
        };
        if let Some(code) = code {
            let why = approval
                .decisions
                .iter()
                .rev()
                .find_map(|d| d.comment.clone())
                .map(|c| format!(": {c}"))
                .unwrap_or_default();
            return Err(approval_error(
                code,
                &id,
                format!("approval {id} is {}{why}", approval.status.as_str()),
            ));
        }
        body.approval_id = Some(id);
        match self
            .send_with::<_, Asked>(
                "/v1/capabilities",
                Payload::Json(&body),
                Bearer::Run,
                Proof::Bind,
            )
            .await?
        {
            Asked::Issued(r) => Ok(Capability::new(r, action, resource)),
            Asked::Pending(p) => Err(Error::Protocol(format!(
                "the broker answered 202 (approval {}) to the redemption of an approved request",
                p.approval_id
            ))),
        }
    }

    /// The approval `id` of this run, as it stands now.
    pub async fn approval(&self, id: &str) -> Result<Approval, Error> {
        self.get_approval(id, None).await
    }

    /// Waits up to `limit` for approval `id` to be decided (long-polling the
    /// broker); returns it as last seen, pending if the time ran out.
    pub async fn wait_for_approval(
        &self,
        id: &str,
        limit: Duration,
        on_status: Option<&(dyn Fn(&Approval) + Sync)>,
    ) -> Result<Approval, Error> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut seen: Option<ApprovalStatus> = None;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            // The first read does not wait: the caller hears "pending" at once.
            let wait = seen.map(|_| left.min(APPROVAL_POLL));
            let approval = self.get_approval(id, wait).await?;
            if seen != Some(approval.status) {
                seen = Some(approval.status);
                tracing::info!(approval = id, status = approval.status.as_str(), "approval");
                if let Some(f) = on_status {
                    f(&approval);
                }
            }
            if approval.status != ApprovalStatus::Pending || left.is_zero() {
                return Ok(approval);
            }
        }
    }

    async fn get_approval(&self, id: &str, wait: Option<Duration>) -> Result<Approval, Error> {
        if id.len() != 36 || !id.bytes().all(|c| c.is_ascii_hexdigit() || c == b'-') {
            return Err(Error::Config("not an approval id".into()));
        }
        let mut path = format!("/v1/approvals/{id}");
        if let Some(w) = wait {
            // Whole seconds (the broker's duration grammar), at least one.
            path.push_str(&format!("?wait={}s", w.as_secs().max(1)));
        }
        let inner = &self.inner;
        let mut req = inner
            .http
            .get(format!("{}{path}", inner.base))
            .bearer_auth(inner.run_token.expose_secret());
        if let Some(w) = wait {
            // The answer is held for up to `w`: give the request that much more.
            req = req.timeout(inner.timeout + w);
        }
        match req.send().await {
            Ok(resp) => decode(resp).await,
            Err(e) => Err(Error::Unavailable {
                code: None,
                message: format!("asking {} about approval {id}: {}", inner.base, short(&e)),
                request_id: None,
            }),
        }
    }

    /// This run's credential-injection session at the egress gateway: the
    /// run's CA and its placeholders (`tessera exec --egress` uses it).
    pub async fn gateway_session(&self) -> Result<GatewaySession, Error> {
        self.send::<(), _>("/v1/gateway/session", None, Bearer::Run)
            .await
    }

    /// Exchanges a capability for the downstream credential (one use).
    pub async fn exchange(&self, cap: &Capability) -> Result<Exchanged, Error> {
        let body = ExchangeRequest {
            capability: cap.token().to_owned(),
        };
        let r: ExchangeResponse = self
            .send_with(
                "/v1/exchange",
                Payload::Json(&body),
                Bearer::None,
                Proof::Present(cap.token()),
            )
            .await?;
        Ok(Exchanged::from(r))
    }

    /// Renews the holds of `ids` (this run's capabilities asked for with a
    /// hold). Every id comes back either renewed or in `lapsed`; a lapsed one
    /// is gone for good.
    pub async fn renew_holds(&self, ids: &[&str]) -> Result<RenewHoldsResponse, Error> {
        let body = RenewHoldsRequest {
            capability_ids: ids.iter().map(|s| (*s).to_owned()).collect(),
        };
        self.send("/v1/capabilities/renew", Some(&body), Bearer::Run)
            .await
    }

    /// Revokes a capability (and its leases, downstream included). `Ok(false)`:
    /// it was already revoked.
    pub async fn revoke(&self, cap: &Capability) -> Result<bool, Error> {
        self.revoke_id(cap.id()).await
    }

    /// Revokes a capability by id.
    pub async fn revoke_id(&self, capability_id: &str) -> Result<bool, Error> {
        if capability_id.len() != 36
            || !capability_id
                .bytes()
                .all(|c| c.is_ascii_hexdigit() || c == b'-')
        {
            return Err(Error::Config("not a capability id".into()));
        }
        let r: RevokeCapabilityResponse = self
            .send::<(), _>(
                &format!("/v1/capabilities/{capability_id}/revoke"),
                None,
                Bearer::Run,
            )
            .await?;
        Ok(r.revoked)
    }

    /// A capability exchanged at once for AWS credentials (backend kind `aws-sts`).
    pub async fn aws_credentials(
        &self,
        action: &str,
        resource: &str,
    ) -> Result<AwsCredentials, Error> {
        self.aws_credentials_with(action, resource, &Ask::default())
            .await
    }

    /// Like [`Client::aws_credentials`], with the options of `ask`.
    pub async fn aws_credentials_with(
        &self,
        action: &str,
        resource: &str,
        ask: &Ask<'_>,
    ) -> Result<AwsCredentials, Error> {
        let cap = self.capability_with(action, resource, ask).await?;
        let ex = self.exchange(&cap).await?;
        AwsCredentials::from_exchange(cap, ex)
    }

    /// A capability exchanged at once for a database user (kinds `postgres`, `mysql`).
    pub async fn database(
        &self,
        action: &str,
        resource: &str,
    ) -> Result<DatabaseCredentials, Error> {
        let cap = self.capability(action, resource).await?;
        let ex = self.exchange(&cap).await?;
        DatabaseCredentials::from_exchange(cap, ex)
    }

    /// An OAuth access token for the protected resource `resource` (its URL)
    /// with one `scope`, by RFC 8693 token exchange of this run's token at
    /// `POST /oauth/token`; bound to this client's DPoP key when DPoP is on
    /// (then call [`Client::dpop_proof`] for each request to the resource).
    pub async fn access_token(&self, resource: &str, scope: &str) -> Result<AccessToken, Error> {
        let form: String = [
            ("grant_type", GRANT_TYPE_TOKEN_EXCHANGE),
            ("subject_token", self.inner.run_token.expose_secret()),
            ("subject_token_type", RUN_TOKEN_TYPE),
            ("resource", resource),
            ("scope", scope),
        ]
        .iter()
        .map(|(k, v)| format!("{k}={}", form_escape(v)))
        .collect::<Vec<_>>()
        .join("&");
        let r: TokenExchangeResponse = self
            .send_with::<(), _>(
                "/oauth/token",
                Payload::Form(form),
                Bearer::None,
                Proof::Bind,
            )
            .await?;
        Ok(AccessToken {
            token: SecretString::from(r.access_token),
            token_type: r.token_type,
            expires_in: Duration::from_secs(u64::try_from(r.expires_in).unwrap_or(0)),
            scope: r.scope,
        })
    }

    /// A DPoP proof for `method` on `url` presenting `token` (for a resource
    /// server that an access token from [`Client::access_token`] is bound
    /// for), with that server's `nonce` if it asked for one (RFC 9449 §9);
    /// `None` when DPoP is off.
    pub fn dpop_proof(
        &self,
        method: &str,
        url: &str,
        token: &AccessToken,
        nonce: Option<&str>,
    ) -> Option<String> {
        let key = self.inner.dpop.as_ref()?;
        Some(key.proof_with_nonce(method, url, Some(token.token.expose_secret()), nonce))
    }

    /// The thumbprint of this client's DPoP key (`cnf.jkt` of what it binds).
    pub fn dpop_thumbprint(&self) -> Option<&str> {
        self.inner.dpop.as_ref().map(|k| k.thumbprint())
    }

    async fn send<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: Option<&B>,
        bearer: Bearer,
    ) -> Result<T, Error> {
        let payload = match body {
            Some(b) => Payload::Json(b),
            None => Payload::None,
        };
        self.send_with(path, payload, bearer, Proof::None).await
    }

    async fn send_with<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: Payload<'_, B>,
        bearer: Bearer,
        proof: Proof<'_>,
    ) -> Result<T, Error> {
        let inner = &self.inner;
        let url = format!("{}{path}", inner.base);
        let mut waited = Duration::ZERO;
        let mut retry = 0u32;
        let mut nonce_retried = false;
        loop {
            let mut req = inner.http.post(&url);
            if let Bearer::Run = bearer {
                req = req.bearer_auth(inner.run_token.expose_secret());
            }
            match &body {
                Payload::Json(b) => req = req.json(b),
                Payload::Form(f) => {
                    req = req
                        .header("content-type", "application/x-www-form-urlencoded")
                        .body(f.clone())
                }
                Payload::None => {}
            }
            if let Some(key) = &inner.dpop {
                match proof {
                    Proof::None => {}
                    Proof::Bind => req = req.header("dpop", key.proof("POST", &url, None)),
                    Proof::Present(t) => req = req.header("dpop", key.proof("POST", &url, Some(t))),
                }
            }
            let err = match req.send().await {
                Ok(resp) => {
                    if let (Some(key), Some(n)) = (
                        &inner.dpop,
                        resp.headers()
                            .get("dpop-nonce")
                            .and_then(|v| v.to_str().ok()),
                    ) {
                        key.set_nonce(n);
                    }
                    match decode::<T>(resp).await {
                        Ok(v) => return Ok(v),
                        // RFC 9449 §8: once, with the nonce just received.
                        Err(e) if e.code() == Some("use_dpop_nonce") && !nonce_retried => {
                            nonce_retried = true;
                            continue;
                        }
                        Err(e) => e,
                    }
                }
                Err(e) if e.is_connect() => Error::Unavailable {
                    code: None,
                    message: format!("cannot connect to {}: {}", inner.base, short(&e)),
                    request_id: None,
                },
                Err(e) if e.is_timeout() => {
                    // The request may have been processed: not retried.
                    return Err(Error::Unavailable {
                        code: None,
                        message: format!("no answer from {} in time", inner.base),
                        request_id: None,
                    });
                }
                Err(e) => return Err(Error::Protocol(short(&e))),
            };
            let wait = match &err {
                Error::RateLimited { retry_after, .. } => *retry_after,
                // Only what certainly issued nothing: no answer, or a 503 that
                // says so. A `request_timeout` may follow a request that took
                // effect, a 500 or 502 will not pass by asking again.
                Error::Unavailable { code, .. }
                    if matches!(
                        code.as_deref(),
                        None | Some("store_unavailable" | "backend_throttled")
                    ) =>
                {
                    inner.retry.backoff(retry)
                }
                _ => return Err(err),
            };
            if retry >= inner.retry.max_retries || waited + wait > inner.retry.budget {
                return Err(err);
            }
            tracing::debug!(path, retry, ?wait, code = err.code(), "retrying");
            tokio::time::sleep(wait).await;
            waited += wait;
            retry += 1;
        }
    }
}

#[derive(Clone, Copy)]
enum Bearer {
    Run,
    None,
}

enum Payload<'a, B> {
    None,
    Json(&'a B),
    Form(String),
}

/// What DPoP proof a request carries when the client has a key.
#[derive(Clone, Copy)]
enum Proof<'a> {
    None,
    /// Ask for what is issued to be bound to the key.
    Bind,
    /// Present this bound token.
    Present(&'a str),
}

/// `application/x-www-form-urlencoded` escaping of one value.
fn form_escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// An OAuth access token for one protected resource.
pub struct AccessToken {
    token: SecretString,
    /// `Bearer`, or `DPoP` when bound to the client's key.
    pub token_type: String,
    pub expires_in: Duration,
    pub scope: String,
}

impl AccessToken {
    /// The token (a secret: send it only to its resource).
    pub fn token(&self) -> &str {
        self.token.expose_secret()
    }

    /// `Authorization` header value: `Bearer <t>` or `DPoP <t>`.
    pub fn authorization(&self) -> String {
        format!("{} {}", self.token_type, self.token.expose_secret())
    }
}

impl std::fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessToken")
            .field("token", &"[redacted]")
            .field("token_type", &self.token_type)
            .field("expires_in", &self.expires_in)
            .field("scope", &self.scope)
            .finish()
    }
}

/// reqwest's error with its causes (the OS's "Connection refused", a TLS
/// alert, a DNS failure), not only its own "error sending request", kept
/// short. No part of a request's body or headers is in these texts.
pub(crate) fn short(e: &reqwest::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cause = c.source();
    }
    let mut s = parts.join(": ");
    if s.len() > 300 {
        let end = s.floor_char_boundary(300);
        s.truncate(end);
    }
    s
}

pub(crate) async fn decode<T: DeserializeOwned>(resp: reqwest::Response) -> Result<T, Error> {
    let status = resp.status();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let bytes = resp.bytes().await.map_err(|e| Error::Protocol(short(&e)))?;
    if status.is_success() {
        return serde_json::from_slice(&bytes)
            .map_err(|e| Error::Protocol(format!("{status}: {e}")));
    }
    if let Ok(o) = serde_json::from_slice::<OAuthError>(&bytes) {
        return Err(Error::from_response(
            status.as_u16(),
            o.code,
            o.error_description,
            o.request_id,
            retry_after,
        ));
    }
    match serde_json::from_slice::<ErrorBody>(&bytes) {
        Ok(b) => Err(Error::from_response(
            status.as_u16(),
            b.error.code,
            b.error.message,
            b.error.request_id,
            retry_after,
        )),
        Err(_) if status.is_redirection() => Err(Error::Protocol(format!(
            "the broker answered {status}, a redirect; clients never follow redirects \
             (check TESSERA_ADDR)"
        ))),
        Err(_) if status.is_server_error() => Err(Error::Unavailable {
            code: None,
            message: format!("the broker answered {status}"),
            request_id: None,
        }),
        Err(_) => Err(Error::Protocol(format!("{status} without an error body"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_may_be_host_port() {
        assert_eq!(broker_address("127.0.0.1:8700"), "http://127.0.0.1:8700");
        assert_eq!(broker_address(" localhost:8700/ "), "http://localhost:8700");
        assert_eq!(broker_address("[::1]:8700"), "http://[::1]:8700");
        assert_eq!(
            broker_address("https://b.example:8700/"),
            "https://b.example:8700"
        );
        // Read as http://, so the loopback rule still decides.
        assert!(check_transport(&broker_address("192.0.2.10:8700"), false, false).is_err());
    }

    #[test]
    fn the_token_goes_in_clear_only_to_loopback() {
        for ok in [
            "http://127.0.0.1:8700",
            "http://127.9.9.9",
            "http://[::1]:8700",
            "http://localhost:8700",
            "https://tessera.example:8700",
        ] {
            check_transport(ok, false, false).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for refused in [
            "http://192.0.2.10:8700",
            "http://tessera.internal",
            "http://[2001:db8::1]",
            "http://127.0.0.1.nip.io",
            "http://localhost.example",
        ] {
            let e = check_transport(refused, false, false).unwrap_err();
            assert!(e.to_string().contains("in clear"), "{refused}: {e}");
            check_transport(refused, false, true).unwrap();
        }
        let e = check_transport("http://127.0.0.1:8700", true, false).unwrap_err();
        assert!(e.to_string().contains("TESSERA_CA_FILE"), "{e}");
        check_transport("https://h:1", true, false).unwrap();
    }

    /// A token file others may read is refused, whatever its content; the
    /// descriptor mode is not (the descriptor is the grant).
    #[test]
    fn a_token_file_readable_by_others_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("tessera-client-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("run.token");
        std::fs::write(
            &file,
            "tsr_run_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n",
        )
        .unwrap();
        let path = file.display().to_string();
        let lookup = |k: &str| match k {
            "TESSERA_ADDR" => Some("http://127.0.0.1:1".to_owned()),
            "TESSERA_RUN_TOKEN_FILE" => Some(path.clone()),
            _ => None,
        };
        for mode in [0o644, 0o640, 0o604, 0o666, 0o660] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = Client::from_lookup(&lookup).unwrap_err();
            assert!(
                e.to_string().contains(&format!("{mode:o}")) && e.to_string().contains("chmod 600"),
                "{mode:o}: {e}"
            );
        }
        for mode in [0o600, 0o400] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            Client::from_lookup(&lookup).unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn backoff_is_jittered_and_bounded() {
        let p = RetryPolicy::default();
        for retry in 0..10 {
            let b = p.backoff(retry);
            let nominal = p.base.saturating_mul(1 << retry).min(p.max_backoff);
            assert!(b >= nominal / 2 && b < nominal * 3 / 2, "{retry}: {b:?}");
        }
    }

    #[test]
    fn configuration_errors_are_clear() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let e = Client::from_lookup(&env(&[])).unwrap_err();
        assert!(e.to_string().contains("TESSERA_ADDR"));
        let e = Client::from_lookup(&env(&[("TESSERA_ADDR", "http://127.0.0.1:1")])).unwrap_err();
        assert!(e.to_string().contains("TESSERA_RUN_TOKEN_FILE"));
        let token = "tsr_run_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        let e = Client::from_lookup(&move |k: &str| match k {
            "TESSERA_ADDR" => Some("http://127.0.0.1:1".into()),
            "TESSERA_RUN_TOKEN" => Some(token.into()),
            _ => None,
        })
        .unwrap_err();
        assert!(e.to_string().contains("TESSERA_ALLOW_TOKEN_ENV"), "{e}");
        let ok = Client::from_lookup(&move |k: &str| match k {
            "TESSERA_ADDR" => Some("http://127.0.0.1:1".into()),
            "TESSERA_RUN_TOKEN" => Some(token.into()),
            "TESSERA_ALLOW_TOKEN_ENV" => Some("1".into()),
            _ => None,
        })
        .unwrap();
        assert!(!format!("{ok:?}").contains(token));
        let e = Client::builder()
            .address("http://localhost")
            .run_token(SecretString::from("tsr_rt_wrongkind".to_owned()))
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("tsr_run_"));
        // No CA: the system's roots verify an https:// broker (issue 15: this
        // was refused, even for a broker with a public certificate).
        Client::builder()
            .address("https://x")
            .run_token(SecretString::from(token.to_owned()))
            .build()
            .unwrap();
    }
}
