//! Request extractors: JSON bodies with stable error codes, and the three kinds of
//! bearer caller (runtime, run, admin).
//!
//! Every credential arrives as `Authorization: Bearer …`. Its prefix says which
//! kind it claims to be; it is parsed as that kind of [`crate::secret`] (its
//! shape checked) before it is hashed, and only the SHA-256 is looked up. A
//! wrong or unknown credential is a 401 that does not say which part was wrong.

use crate::app::AppState;
use crate::error::ApiError;
use crate::secret::{kind, AdminToken, ApproverKey, Kind, Secret};
use crate::store::approvers::{self, ApproverRecord};
use crate::store::runs::RunRecord;
use crate::store::runtimes::{self, RuntimeRecord};
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use tessera_client::types::ErrorCode;

/// The request id, set by the request-context middleware.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for RequestId {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        Ok(parts
            .extensions
            .get::<RequestId>()
            .cloned()
            .unwrap_or_else(|| RequestId("req_unknown".to_owned())))
    }
}

/// A JSON body: at most the router's body limit, unknown fields rejected (by the
/// wire types), every failure a 4xx with a stable code.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(json_error(rejection)),
        }
    }
}

/// Query-string parameters, with unknown or malformed ones answered as
/// `invalid_query` in the broker's error shape.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(ApiQuery(v)),
            Err(rejection) => Err(ApiError::bad_request(
                ErrorCode::InvalidQuery,
                rejection.body_text().chars().take(200).collect::<String>(),
            )),
        }
    }
}

fn json_error(rejection: JsonRejection) -> ApiError {
    match rejection {
        JsonRejection::JsonDataError(e) => {
            // serde's text can quote request content: cut it short, on a char boundary.
            let msg: String = e.body_text().chars().take(200).collect();
            ApiError::bad_request(ErrorCode::InvalidRequest, msg)
        }
        JsonRejection::JsonSyntaxError(_) => {
            ApiError::bad_request(ErrorCode::InvalidJson, "request body is not valid JSON")
        }
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::UnsupportedMediaType,
            "expected Content-Type: application/json",
        ),
        JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            body_too_large()
        }
        other => ApiError::bad_request(
            ErrorCode::InvalidRequest,
            other.body_text().chars().take(200).collect::<String>(),
        ),
    }
}

pub fn body_too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::BodyTooLarge,
        "request body exceeds 64 KiB",
    )
}

fn bearer(parts: &Parts) -> Result<&str, ApiError> {
    let value = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthenticated("missing Authorization: Bearer credential"))?;
    let text = value
        .to_str()
        .map_err(|_| ApiError::unauthenticated("malformed Authorization header"))?;
    let token = text
        .strip_prefix("Bearer ")
        .ok_or_else(|| ApiError::unauthenticated("Authorization must use the Bearer scheme"))?;
    Ok(token.trim())
}

fn invalid_credential() -> ApiError {
    ApiError::unauthenticated("invalid or unknown credential")
}

/// The hash to look `token` up by, if it is a well-formed secret of kind `K`:
/// the one way a presented credential becomes a lookup key.
fn hash_of<K: Kind>(token: &str) -> Result<String, ApiError> {
    Secret::<K>::sha256_of_presented(token).map_err(|_| invalid_credential())
}

async fn runtime_from(
    app: &AppState,
    parts: &Parts,
    token: &str,
) -> Result<Arc<RuntimeRecord>, ApiError> {
    let needs_cert = app
        .config
        .tls
        .as_ref()
        .is_some_and(|t| t.require_runtime_client_cert);
    if needs_cert
        && parts
            .extensions
            .get::<crate::server::ClientCertificate>()
            .is_none()
    {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::ClientCertificateRequired,
            "runtime credentials are accepted only with a verified TLS client certificate",
        ));
    }
    let hash = hash_of::<kind::RuntimeKey>(token)?;
    let runtime = runtimes::find_by_key_hash(&app.store, &hash)
        .await?
        .ok_or_else(invalid_credential)?;
    if let Some(pinned) = &runtime.client_cert_sha256 {
        let presented = parts.extensions.get::<crate::server::ClientCertificate>();
        if presented.is_none_or(|c| !constant_time_eq(c.sha256.as_bytes(), pinned.as_bytes())) {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                ErrorCode::ClientCertificateMismatch,
                "this runtime key is pinned to another TLS client certificate",
            ));
        }
    }
    Ok(Arc::new(runtime))
}

fn is_admin(app: &AppState, token: &str) -> bool {
    let Some(expected) = &app.admin_token_hash else {
        return false;
    };
    hash_of::<kind::AdminToken>(token)
        .is_ok_and(|hash| constant_time_eq(hash.as_bytes(), expected.as_bytes()))
}

/// Compares two digests without an early exit.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

/// A runtime, authenticated by its API key.
pub struct RuntimeCaller(pub Arc<RuntimeRecord>);

impl FromRequestParts<AppState> for RuntimeCaller {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        let token = bearer(parts)?;
        Ok(RuntimeCaller(runtime_from(app, parts, token).await?))
    }
}

/// The administrator, authenticated by the admin token.
pub struct AdminCaller;

impl FromRequestParts<AppState> for AdminCaller {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        let token = bearer(parts)?;
        if is_admin(app, token) {
            Ok(AdminCaller)
        } else {
            Err(invalid_credential())
        }
    }
}

/// A tool inside a run, authenticated by the run token.
pub struct RunCaller(pub Arc<RunRecord>);

pub(crate) async fn run_from(app: &AppState, token: &str) -> Result<Arc<RunRecord>, ApiError> {
    use crate::grant::run_token::{self, RunTokenError};
    run_token::run_from(app, token).await.map_err(|e| match e {
        RunTokenError::Invalid => invalid_credential(),
        RunTokenError::Store(e) => e.into(),
    })
}

impl FromRequestParts<AppState> for RunCaller {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        let token = bearer(parts)?;
        Ok(RunCaller(run_from(app, token).await?))
    }
}

/// Endpoints open to a runtime (for its own runs) or the administrator.
pub enum RuntimeOrAdmin {
    Runtime(Arc<RuntimeRecord>),
    Admin,
}

impl RuntimeOrAdmin {
    /// The runtime a lookup must be restricted to (`None` for the admin).
    pub fn runtime_id(&self) -> Option<&str> {
        match self {
            RuntimeOrAdmin::Runtime(rt) => Some(&rt.id),
            RuntimeOrAdmin::Admin => None,
        }
    }

    pub fn actor(&self) -> String {
        match self {
            RuntimeOrAdmin::Runtime(rt) => format!("runtime:{}", rt.name),
            RuntimeOrAdmin::Admin => "admin".to_owned(),
        }
    }
}

impl FromRequestParts<AppState> for RuntimeOrAdmin {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        let token = bearer(parts)?;
        if token.starts_with(AdminToken::PREFIX) {
            return if is_admin(app, token) {
                Ok(RuntimeOrAdmin::Admin)
            } else {
                Err(invalid_credential())
            };
        }
        Ok(RuntimeOrAdmin::Runtime(
            runtime_from(app, parts, token).await?,
        ))
    }
}

/// Endpoints open to a run (for itself) or the administrator.
pub enum RunOrAdmin {
    Run(Arc<RunRecord>),
    Admin,
}

impl FromRequestParts<AppState> for RunOrAdmin {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        let token = bearer(parts)?;
        if token.starts_with(AdminToken::PREFIX) {
            return if is_admin(app, token) {
                Ok(RunOrAdmin::Admin)
            } else {
                Err(invalid_credential())
            };
        }
        Ok(RunOrAdmin::Run(run_from(app, token).await?))
    }
}

/// An approver key: who decides approvals. Never a run token, a runtime key or
/// the admin token (a separate prefix, a separate table).
pub struct ApproverCaller(pub Arc<ApproverRecord>);

async fn approver_from(app: &AppState, token: &str) -> Result<Arc<ApproverRecord>, ApiError> {
    let hash = hash_of::<kind::ApproverKey>(token)?;
    let approver = approvers::find_by_key_hash(&app.store, &hash)
        .await?
        .ok_or_else(invalid_credential)?;
    Ok(Arc::new(approver))
}

impl FromRequestParts<AppState> for ApproverCaller {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        let token = bearer(parts)?;
        Ok(ApproverCaller(approver_from(app, token).await?))
    }
}

/// `GET /v1/approvals/{id}`: the run that asked, or an approver.
pub enum RunOrApprover {
    Run(Arc<RunRecord>),
    Approver(Arc<ApproverRecord>),
}

impl FromRequestParts<AppState> for RunOrApprover {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        let token = bearer(parts)?;
        if token.starts_with(ApproverKey::PREFIX) {
            return Ok(RunOrApprover::Approver(approver_from(app, token).await?));
        }
        Ok(RunOrApprover::Run(run_from(app, token).await?))
    }
}
