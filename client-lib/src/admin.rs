//! The admin API's client: every `tessera` admin command (runtimes, runs,
//! revocations, keys, audit, policy reload) calls the broker through it, with
//! the wire types of [`crate::types`] in and out.
//!
//! Why in the client library: the admin token is a bearer secret like the run
//! token, so it travels under the same rules ([`crate::check_transport`]: no
//! proxy from the environment unless asked, no redirects, `http://` only to
//! loopback), and a deployment tool in Rust gets the same typed calls the CLI
//! uses. No call is retried: an admin action (disable, rotate, end) is not
//! repeated behind the operator's back.

use crate::client::{broker_address, check_transport, decode, short, transport, Transport};
use crate::error::Error;
use crate::types::*;
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::time::Duration;

/// A client of the broker's admin API, holding the admin token.
pub struct AdminClient {
    http: reqwest::Client,
    base: String,
    token: SecretString,
}

impl std::fmt::Debug for AdminClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminClient")
            .field("base", &self.base)
            .field("token", &"[redacted]")
            .finish()
    }
}

/// How to reach the broker with the admin token.
pub struct AdminClientBuilder {
    base: String,
    token: SecretString,
    ca_pem: Option<Vec<u8>>,
    timeout: Duration,
    proxy_from_env: bool,
    insecure_http: bool,
}

impl AdminClientBuilder {
    /// A PEM CA bundle that verifies an `https://` broker.
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Use the proxy named by the environment (off by default).
    pub fn proxy_from_env(mut self, yes: bool) -> Self {
        self.proxy_from_env = yes;
        self
    }

    /// Allow `http://` to a host that is not loopback (off by default).
    pub fn insecure_http(mut self, yes: bool) -> Self {
        self.insecure_http = yes;
        self
    }

    pub fn build(self) -> Result<AdminClient, Error> {
        let base = broker_address(&self.base);
        check_transport(&base, self.ca_pem.is_some(), self.insecure_http)?;
        let http = transport(&Transport {
            base: &base,
            ca_pem: self.ca_pem.as_deref(),
            timeout: self.timeout,
            connect_timeout: Duration::from_secs(5),
            user_agent: concat!("tessera-admin/", env!("CARGO_PKG_VERSION")),
            proxy_from_env: self.proxy_from_env,
        })?;
        Ok(AdminClient {
            http,
            base,
            token: self.token,
        })
    }
}

/// No query parameters.
const NO_QUERY: Option<&()> = None;
/// No body.
const NO_BODY: Option<&()> = None;

impl AdminClient {
    /// `base`: the broker's address (`http://127.0.0.1:8700`); `token`: the
    /// admin token (`tsr_adm_…`).
    pub fn builder(base: impl Into<String>, token: SecretString) -> AdminClientBuilder {
        AdminClientBuilder {
            base: base.into(),
            token,
            ca_pem: None,
            timeout: Duration::from_secs(30),
            proxy_from_env: false,
            insecure_http: false,
        }
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        query: Option<&impl Serialize>,
        body: Option<&impl Serialize>,
    ) -> Result<T, Error> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(self.token.expose_secret());
        if let Some(q) = query {
            req = req.query(q);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        match req.send().await {
            Ok(resp) => decode(resp).await,
            // Not retried, so every failure to get an answer is said the
            // same way, with reqwest's reason.
            Err(e) => Err(Error::Unavailable {
                code: None,
                message: format!("cannot reach the broker at {}: {}", self.base, short(&e)),
                request_id: None,
            }),
        }
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Error> {
        self.call(reqwest::Method::GET, path, NO_QUERY, NO_BODY)
            .await
    }

    async fn post<T: DeserializeOwned>(&self, path: &str) -> Result<T, Error> {
        self.call(reqwest::Method::POST, path, NO_QUERY, NO_BODY)
            .await
    }

    /// `POST /v1/admin/runtimes`: the key is in the answer, once.
    pub async fn create_runtime(
        &self,
        req: &CreateRuntimeRequest,
    ) -> Result<CreateRuntimeResponse, Error> {
        self.call(
            reqwest::Method::POST,
            "/v1/admin/runtimes",
            NO_QUERY,
            Some(req),
        )
        .await
    }

    /// `GET /readyz`: `ready`, or [`Error::Unavailable`] with the broker's code
    /// when its store does not answer.
    pub async fn ready(&self) -> Result<crate::types::HealthResponse, Error> {
        self.get("/readyz").await
    }

    /// `GET /v1/admin/runtimes`.
    pub async fn runtimes(&self) -> Result<RuntimeList, Error> {
        self.get("/v1/admin/runtimes").await
    }

    /// `POST /v1/admin/runtimes/{name}/disable`.
    pub async fn disable_runtime(&self, name: &str) -> Result<DisableRuntimeResponse, Error> {
        self.post(&format!("/v1/admin/runtimes/{}/disable", segment(name)?))
            .await
    }

    /// `GET /v1/admin/runs`.
    pub async fn runs(&self, query: &RunListQuery) -> Result<RunList, Error> {
        self.call(reqwest::Method::GET, "/v1/admin/runs", Some(query), NO_BODY)
            .await
    }

    /// `GET /v1/runs/{id}`.
    pub async fn run(&self, id: &str) -> Result<RunView, Error> {
        self.get(&format!("/v1/runs/{}", segment(id)?)).await
    }

    /// `POST /v1/runs/{id}/end`.
    pub async fn end_run(&self, id: &str) -> Result<EndRunResponse, Error> {
        self.post(&format!("/v1/runs/{}/end", segment(id)?)).await
    }

    /// `POST /v1/capabilities/{id}/revoke`.
    pub async fn revoke_capability(&self, id: &str) -> Result<RevokeCapabilityResponse, Error> {
        self.post(&format!("/v1/capabilities/{}/revoke", segment(id)?))
            .await
    }

    /// `GET /v1/admin/leases`: downstream removals not yet confirmed.
    pub async fn pending_revocations(
        &self,
        query: &PendingRevocationsQuery,
    ) -> Result<PendingRevocationList, Error> {
        self.call(
            reqwest::Method::GET,
            "/v1/admin/leases",
            Some(query),
            NO_BODY,
        )
        .await
    }

    /// `POST /v1/admin/keys/rotate`.
    pub async fn rotate_key(&self) -> Result<RotateKeyResponse, Error> {
        self.post("/v1/admin/keys/rotate").await
    }

    /// `GET /v1/admin/status`: every replica and what it enforces.
    pub async fn status(&self) -> Result<BrokerStatus, Error> {
        self.get("/v1/admin/status").await
    }

    /// `GET /v1/admin/keys`.
    pub async fn keys(&self) -> Result<KeyList, Error> {
        self.get("/v1/admin/keys").await
    }

    /// `GET /v1/admin/audit`.
    pub async fn audit(&self, query: &AuditQuery) -> Result<AuditPage, Error> {
        self.call(
            reqwest::Method::GET,
            "/v1/admin/audit",
            Some(query),
            NO_BODY,
        )
        .await
    }

    /// `GET /v1/admin/audit/verify`.
    pub async fn verify_audit(&self) -> Result<AuditVerifyReport, Error> {
        self.get("/v1/admin/audit/verify").await
    }

    /// `POST /v1/admin/audit/checkpoints/check` (at most 100 per call).
    pub async fn check_checkpoints(
        &self,
        req: &CheckpointsRequest,
    ) -> Result<CheckpointsResponse, Error> {
        self.call(
            reqwest::Method::POST,
            "/v1/admin/audit/checkpoints/check",
            NO_QUERY,
            Some(req),
        )
        .await
    }

    /// `POST /v1/admin/audit/exports`: records an export through a checkpoint.
    pub async fn record_audit_export(
        &self,
        req: &AuditExportRequest,
    ) -> Result<AuditExportRecorded, Error> {
        self.call(
            reqwest::Method::POST,
            "/v1/admin/audit/exports",
            NO_QUERY,
            Some(req),
        )
        .await
    }

    /// `POST /v1/admin/audit/segments/check` (at most 1000 rows per call).
    pub async fn check_audit_segment(
        &self,
        req: &SegmentCheckRequest,
    ) -> Result<SegmentCheckResponse, Error> {
        self.call(
            reqwest::Method::POST,
            "/v1/admin/audit/segments/check",
            NO_QUERY,
            Some(req),
        )
        .await
    }

    /// `GET /v1/admin/audit/checkpoints/latest`.
    pub async fn latest_audit_checkpoint(&self) -> Result<LatestCheckpoint, Error> {
        self.get("/v1/admin/audit/checkpoints/latest").await
    }

    /// `POST /v1/admin/policy/reload`.
    pub async fn reload_policy(&self) -> Result<PolicyReloadResponse, Error> {
        self.post("/v1/admin/policy/reload").await
    }

    /// Mints an approver key for a user (admin token); the key is in the answer, once.
    pub async fn create_approver(
        &self,
        body: &CreateApproverRequest,
    ) -> Result<CreateApproverResponse, Error> {
        self.call(
            reqwest::Method::POST,
            "/v1/admin/approvers",
            NO_QUERY,
            Some(body),
        )
        .await
    }

    /// Approver keys (admin token).
    pub async fn approvers(&self) -> Result<ApproverList, Error> {
        self.get("/v1/admin/approvers").await
    }

    /// Revokes an approver key (admin token).
    pub async fn revoke_approver(&self, id: &str) -> Result<Approver, Error> {
        self.post(&format!("/v1/admin/approvers/{}/revoke", segment(id)?))
            .await
    }

    /// Approvals: with the admin token every one; with an approver key
    /// (`as_approver`), those this approver may decide.
    pub async fn approvals(
        &self,
        query: &ApprovalListQuery,
        as_approver: bool,
    ) -> Result<ApprovalList, Error> {
        let path = if as_approver {
            "/v1/approvals"
        } else {
            "/v1/admin/approvals"
        };
        self.call(reqwest::Method::GET, path, Some(query), NO_BODY)
            .await
    }

    /// One approval, with the admin token or an approver key.
    pub async fn approval(&self, id: &str, as_approver: bool) -> Result<Approval, Error> {
        let id = segment(id)?;
        if as_approver {
            self.get(&format!("/v1/approvals/{id}")).await
        } else {
            self.get(&format!("/v1/admin/approvals/{id}")).await
        }
    }

    /// Approves (approver key only: an approval must name a person).
    pub async fn approve(&self, id: &str, comment: Option<String>) -> Result<Approval, Error> {
        let path = format!("/v1/approvals/{}/approve", segment(id)?);
        let body = DecideApprovalRequest { comment };
        self.call(reqwest::Method::POST, &path, NO_QUERY, Some(&body))
            .await
    }

    /// Denies, as an approver (`as_approver`) or as the administrator.
    pub async fn deny(
        &self,
        id: &str,
        comment: Option<String>,
        as_approver: bool,
    ) -> Result<Approval, Error> {
        let id = segment(id)?;
        let path = if as_approver {
            format!("/v1/approvals/{id}/deny")
        } else {
            format!("/v1/admin/approvals/{id}/deny")
        };
        let body = DecideApprovalRequest { comment };
        self.call(reqwest::Method::POST, &path, NO_QUERY, Some(&body))
            .await
    }
}

/// A path segment as given, if it cannot change the path: an id or a name
/// never holds `/`, `?`, `#`, `%` or `..`.
fn segment(s: &str) -> Result<&str, Error> {
    let ok = !s.is_empty()
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_graphic() && !b"/?#%\\".contains(&b));
    if ok {
        Ok(s)
    } else {
        Err(Error::Config(format!("{s:?} is not an id or a name")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_cannot_change_the_path() {
        for ok in ["0b7c2f7e-1d2a-4c3b-9e8f-7a6b5c4d3e2f", "demo", "rt.v2_a-b"] {
            assert_eq!(segment(ok).unwrap(), ok);
        }
        for bad in [
            "", ".", "..", "a/b", "a?x=1", "a#b", "%2e%2e", "a b", "a\\b",
        ] {
            assert!(segment(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn debug_never_shows_the_token() {
        let client = AdminClient::builder(
            "http://127.0.0.1:1",
            SecretString::from("tsr_adm_secretsecretsecretsecretsecretsecretsec"),
        )
        .build()
        .unwrap();
        let shown = format!("{client:?}");
        assert!(!shown.contains("secret"), "{shown}");
    }
}
