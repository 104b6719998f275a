//! Backend kind `aws-sts`: a capability buys temporary AWS credentials that can
//! do exactly the capability's action on its resource, and nothing once the
//! capability has expired.
//!
//! One exchange is one STS `AssumeRole` of the backend's role with:
//!
//! - an inline session policy ([`session_policy`]) allowing only `act` on the
//!   resource ARN, with `DateLessThan aws:CurrentTime = exp`: STS issues for at
//!   least 900 s, the condition ends them with the capability;
//! - `RoleSessionName` `tsr-<run id>-<lease suffix>`, session tags `tessera:user`,
//!   `tessera:run`, `tessera:task`, and `SourceIdentity` = the user, so every
//!   CloudTrail line is attributable to a user, run and task;
//! - `DurationSeconds` = the capability's remaining life, raised to STS's 900 s
//!   minimum and capped at `max_session_duration`.
//!
//! The tool gets `access_key_id`, `secret_access_key`, `session_token`,
//! `expiration` (RFC 3339: the earlier of the capability's and the session's
//! expiry), `region` (the backend's) and `credential_process` (the JSON object, `Version` 1, that AWS
//! SDKs and the CLI read from a `credential_process` command).
//!
//! STS sessions cannot be revoked. Run end is therefore immediate in the broker
//! (no new credentials) and, with `deny_revoked_runs = true`, in AWS too
//! ([`revoked_runs`]): the role denies the ended run's session tag. Otherwise
//! issued credentials work until the capability's expiry — see
//! docs/backends/aws.md.

pub mod clients;
pub mod grammar;
pub mod iam;
pub mod policy_doc;
pub mod revoked_runs;
pub mod session_policy;
pub mod settings;

use super::{Backend, BackendError, Grant, Issued, Revocation};
use crate::boxed::BoxFuture;
use crate::capability::CapabilityClaims;
use crate::clock::{rfc3339, Clock};
use aws_sdk_sts::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sts::types::Tag;
use serde_json::{json, Value};
use settings::AwsStsConfig;
use std::collections::BTreeMap;
use tessera_client::types::ErrorCode;

/// STS's shortest session.
pub const MIN_SESSION_SECS: i64 = 900;

pub struct AwsStsBackend {
    cfg: AwsStsConfig,
    clients: clients::Clients,
    clock: Clock,
    /// Serialises this broker's updates of the revoked-runs role policy.
    deny_lock: tokio::sync::Mutex<()>,
}

impl AwsStsBackend {
    /// Builds the clients and checks the credential source (fails `serve` early).
    pub async fn new(cfg: AwsStsConfig, clock: Clock) -> Result<Self, clients::CredentialsError> {
        let clients = clients::build(&cfg).await?;
        Ok(AwsStsBackend {
            cfg,
            clients,
            clock,
            deny_lock: tokio::sync::Mutex::new(()),
        })
    }

    /// One `AssumeRole` of the backend's role for `user`'s `run` and `task`:
    /// the session tags and SourceIdentity that make every CloudTrail line
    /// attributable, the session policy and the duration given.
    async fn assume(
        &self,
        session_name: &str,
        policy: String,
        duration: i64,
        user: &str,
        run: &str,
        task: &str,
    ) -> Result<aws_sdk_sts::operation::assume_role::AssumeRoleOutput, BackendError> {
        let tags = [
            ("tessera:user", user),
            ("tessera:run", run),
            ("tessera:task", task),
        ]
        .into_iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| BackendError::Unavailable(format!("building session tags: {e}")))?;
        self.clients
            .sts
            .assume_role()
            .role_arn(&self.cfg.role_arn)
            .role_session_name(session_name)
            .policy(policy)
            .duration_seconds(i32::try_from(duration).unwrap_or(MIN_SESSION_SECS as i32))
            .set_external_id(self.cfg.external_id.clone())
            .source_identity(user)
            .set_tags(Some(tags))
            .send()
            .await
            .map_err(|e| classify("AssumeRole", &e))
    }

    /// The region the backend's role is used in.
    pub fn region(&self) -> &str {
        &self.cfg.region
    }

    /// Credentials the egress gateway signs a run's requests with (SigV4
    /// injection, `gateway::inject`): the role, for the run's user, run and
    /// task (session tags and SourceIdentity, as for an exchange), dead at the
    /// run's expiry (`DateLessThan`). They never leave the gateway; each
    /// request they sign has been decided by policy first.
    pub async fn gateway_session(
        &self,
        user: &str,
        run: &str,
        task: &str,
        run_expires_at: i64,
    ) -> Result<(aws_credential_types::Credentials, i64), BackendError> {
        let now = self.clock.now();
        if !grammar::is_sts_name(user) {
            return Err(BackendError::Unsupported {
                code: ErrorCode::UserNotAwsCompatible,
                message: "the user name cannot be an AWS SourceIdentity".to_owned(),
            });
        }
        let session_name = format!("tsr-{run}-gw");
        if !grammar::is_sts_name(&session_name) {
            return Err(BackendError::Unsupported {
                code: ErrorCode::RunNotAwsCompatible,
                message: "the run id cannot be carried in an AWS session name".to_owned(),
            });
        }
        let policy = session_policy::build("*", "*", run_expires_at).map_err(|e| {
            BackendError::Unsupported {
                code: ErrorCode::SessionPolicyTooLarge,
                message: e.to_string(),
            }
        })?;
        let max = self.cfg.max_session_duration.as_secs() as i64;
        let duration = (run_expires_at - now).clamp(MIN_SESSION_SECS, max);
        let out = self
            .assume(&session_name, policy, duration, user, run, task)
            .await?;
        let creds = out.credentials().ok_or_else(|| {
            BackendError::Unavailable("AssumeRole returned no credentials".into())
        })?;
        let expires_at = creds.expiration().secs().min(run_expires_at);
        Ok((
            aws_credential_types::Credentials::new(
                creds.access_key_id(),
                creds.secret_access_key(),
                Some(creds.session_token().to_owned()),
                None,
                "tessera-gateway",
            ),
            expires_at,
        ))
    }

    async fn assume_role(&self, grant: &Grant<'_>) -> Result<Issued, BackendError> {
        let c = grant.claims;
        // The capability was checked when issued; the configuration may have
        // changed since (an action taken off the allow-list): check again.
        if grammar::check_resource(grant.path, &c.act, self.cfg.actions.as_deref()).is_err() {
            return Err(BackendError::Unsupported {
                code: ErrorCode::InvalidAction,
                message: "this backend no longer issues credentials for this action or resource"
                    .to_owned(),
            });
        }
        if !grammar::is_sts_name(&c.sub) {
            return Err(BackendError::Unsupported {
                code: ErrorCode::UserNotAwsCompatible,
                message:
                    "the user name cannot be an AWS SourceIdentity (2-64 of [A-Za-z0-9_+=,.@-])"
                        .to_owned(),
            });
        }
        let suffix = &grant.lease_id[grant.lease_id.len().saturating_sub(8)..];
        let session_name = format!("tsr-{}-{suffix}", c.run);
        if !grammar::is_sts_name(&session_name) {
            return Err(BackendError::Unsupported {
                code: ErrorCode::RunNotAwsCompatible,
                message: "the run id cannot be carried in an AWS session name".to_owned(),
            });
        }
        let policy = session_policy::build(&c.act, grant.path, c.exp).map_err(|e| {
            BackendError::Unsupported {
                code: ErrorCode::SessionPolicyTooLarge,
                message: e.to_string(),
            }
        })?;
        let max = self.cfg.max_session_duration.as_secs() as i64;
        let duration = (c.exp - grant.now).clamp(MIN_SESSION_SECS, max);
        let out = self
            .assume(&session_name, policy, duration, &c.sub, &c.run, &c.task)
            .await?;
        if let Some(used) = out.session_token_utilization() {
            if used >= 90 {
                tracing::warn!(
                    session_token_utilization = used,
                    "session policy and tags are close to STS's packed size limit"
                );
            }
        }
        let creds = out.credentials().ok_or_else(|| {
            BackendError::Unavailable("AssumeRole returned no credentials".into())
        })?;
        let sts_exp = creds.expiration().secs();
        let expires_at = sts_exp.min(c.exp);
        let expiration = rfc3339(expires_at);
        let fields = BTreeMap::from([
            (
                "access_key_id".to_owned(),
                Value::from(creds.access_key_id()),
            ),
            (
                "secret_access_key".to_owned(),
                Value::from(creds.secret_access_key()),
            ),
            (
                "session_token".to_owned(),
                Value::from(creds.session_token()),
            ),
            ("expiration".to_owned(), Value::from(expiration.clone())),
            // The region the backend's role is used in: SDKs need one, and a
            // tool that cannot find it fails (`NoRegionError`) before any call.
            ("region".to_owned(), Value::from(self.cfg.region.clone())),
            (
                "credential_process".to_owned(),
                json!({
                    "Version": 1,
                    "AccessKeyId": creds.access_key_id(),
                    "SecretAccessKey": creds.secret_access_key(),
                    "SessionToken": creds.session_token(),
                    "Expiration": expiration,
                }),
            ),
        ]);
        Ok(Issued { fields, expires_at })
    }

    /// Adds ended runs to the role's deny statement (see [`revoked_runs`]).
    async fn deny_runs(&self, leases: &[Revocation<'_>]) -> Result<(), BackendError> {
        let now = self.clock.now();
        let mut runs: BTreeMap<String, i64> = BTreeMap::new();
        for l in leases {
            if !matches!(l.reason, "run_ended" | "run_expired") {
                continue; // Only a run's end is pushed to AWS (docs/backends/aws.md).
            }
            let Some((run, until)) = revoked_runs::parse_ref(l.downstream_ref) else {
                tracing::warn!(
                    reference = l.downstream_ref,
                    "unreadable aws-sts lease reference; nothing to deny"
                );
                continue;
            };
            if until + revoked_runs::CLOCK_SKEW_SECS > now {
                let e = runs.entry(run.to_owned()).or_insert(until);
                *e = (*e).max(until);
            }
        }
        if runs.is_empty() {
            return Ok(()); // Expired already: the session policy denies everything.
        }
        let runs: Vec<(String, i64)> = runs.into_iter().collect();
        let _guard = self.deny_lock.lock().await;
        for _ in 0..3 {
            let current = self.read_deny_policy().await?;
            let next = revoked_runs::merge(current.as_ref(), &runs, now)
                .map_err(|e| BackendError::Refused(e.to_string()))?;
            if next != current {
                self.write_deny_policy(next.as_ref()).await?;
            }
            let check = self.read_deny_policy().await?;
            if revoked_runs::covers(check.as_ref(), &runs, now) {
                return Ok(());
            }
            tracing::warn!("revoked-runs role policy changed under us; retrying");
        }
        Err(BackendError::Unavailable(
            "the revoked-runs role policy kept changing (concurrent updates?)".into(),
        ))
    }

    async fn read_deny_policy(&self) -> Result<Option<policy_doc::PolicyDocument>, BackendError> {
        let text = self
            .clients
            .iam
            .get_role_policy(&self.cfg.role_name, revoked_runs::POLICY_NAME)
            .await?;
        match text {
            None => Ok(None),
            Some(t) => revoked_runs::parse_document(&t).map(Some).ok_or_else(|| {
                BackendError::Refused(format!(
                    "role policy {} is not a policy document Tessera can read",
                    revoked_runs::POLICY_NAME
                ))
            }),
        }
    }

    async fn write_deny_policy(
        &self,
        doc: Option<&policy_doc::PolicyDocument>,
    ) -> Result<(), BackendError> {
        let (iam, role, name) = (
            &self.clients.iam,
            &self.cfg.role_name,
            revoked_runs::POLICY_NAME,
        );
        match doc {
            Some(doc) => iam.put_role_policy(role, name, doc).await,
            None => iam.delete_role_policy(role, name).await,
        }
    }
}

impl Backend for AwsStsBackend {
    fn kind(&self) -> &'static str {
        "aws-sts"
    }

    fn credential_kind(&self) -> &'static str {
        "aws"
    }

    /// With `deny_revoked_runs`, the run and the capability's expiry: enough to
    /// deny the run's sessions on the role, and to know when that can stop.
    fn downstream_ref(&self, claims: &CapabilityClaims, _lease_id: &str) -> Option<String> {
        self.cfg
            .deny_revoked_runs
            .then(|| revoked_runs::lease_ref(&claims.run, claims.exp))
    }

    fn issue<'a>(&'a self, grant: Grant<'a>) -> BoxFuture<'a, Result<Issued, BackendError>> {
        Box::pin(async move { self.assume_role(&grant).await })
    }

    fn revoke<'a>(&'a self, _refs: &'a [String]) -> BoxFuture<'a, Result<(), BackendError>> {
        // Without reasons there is nothing to decide; the worker calls revoke_leases.
        Box::pin(async { Ok(()) })
    }

    fn revoke_leases<'a>(
        &'a self,
        leases: &'a [Revocation<'a>],
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(async move {
            if !self.cfg.deny_revoked_runs {
                return Ok(());
            }
            self.deny_runs(leases).await
        })
    }
}

/// Maps an SDK error to a broker error whose text is safe to log and audit
/// (AWS error codes and messages carry no secrets).
fn classify<E, R>(op: &str, e: &SdkError<E, R>) -> BackendError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match e {
        SdkError::ServiceError(ctx) => {
            let code = ctx.err().code().unwrap_or("Unknown");
            let message: String = ctx
                .err()
                .message()
                .unwrap_or("")
                .chars()
                .take(300)
                .collect();
            classify_code(op, code, &message)
        }
        SdkError::TimeoutError(_) => BackendError::Unavailable(format!("{op}: timed out")),
        other => BackendError::Unavailable(format!(
            "{op}: {}",
            aws_smithy_types::error::display::DisplayErrorContext(other)
        )),
    }
}

fn classify_code(op: &str, code: &str, message: &str) -> BackendError {
    match code {
        "Throttling"
        | "ThrottlingException"
        | "ThrottledException"
        | "RequestLimitExceeded"
        | "TooManyRequestsException"
        | "RequestThrottled"
        | "SlowDown" => BackendError::Throttled(format!("{op}: {code}")),
        "PackedPolicyTooLarge" | "PackedPolicyTooLargeException" => BackendError::Unsupported {
            code: ErrorCode::SessionPolicyTooLarge,
            message: "the session policy and session tags exceed STS's packed size limit".into(),
        },
        "InvalidClientTokenId"
        | "SignatureDoesNotMatch"
        | "ExpiredToken"
        | "ExpiredTokenException"
        | "UnrecognizedClientException"
        | "InvalidAccessKeyId" => BackendError::Refused(format!(
            "{op}: the broker's own AWS credentials were rejected ({code})"
        )),
        "InternalFailure" | "InternalError" | "ServiceUnavailable" | "ServiceFailure" => {
            BackendError::Unavailable(format!("{op}: {code}"))
        }
        _ => BackendError::Refused(format!("{op}: {code}: {message}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_classified() {
        assert!(matches!(
            classify_code("AssumeRole", "Throttling", ""),
            BackendError::Throttled(_)
        ));
        assert!(matches!(
            classify_code("AssumeRole", "PackedPolicyTooLarge", "x"),
            BackendError::Unsupported {
                code: ErrorCode::SessionPolicyTooLarge,
                ..
            }
        ));
        let e = classify_code(
            "AssumeRole",
            "AccessDenied",
            "not authorized to perform sts:AssumeRole",
        );
        assert!(
            matches!(&e, BackendError::Refused(m) if m.contains("AccessDenied")),
            "{e}"
        );
        assert!(matches!(
            classify_code("AssumeRole", "InvalidClientTokenId", ""),
            BackendError::Refused(m) if m.contains("broker's own AWS credentials")
        ));
        assert!(matches!(
            classify_code("GetRolePolicy", "ServiceUnavailable", ""),
            BackendError::Unavailable(_)
        ));
    }
}
