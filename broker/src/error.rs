//! The one HTTP error type.
//!
//! Handlers return [`ApiError`]; it carries a stable machine-readable `code`, an
//! HTTP status and a message that is safe to show to an untrusted sandbox. Internal
//! causes (database errors, policy details) are logged with the request id and never
//! echoed. The body `{"error": {"code", "message", "request_id"}}` is rendered by the
//! request-id middleware in `api::middleware`, which is the only place that knows the
//! request id; handlers only attach an [`ApiError`] to the response.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tessera_client::types::ErrorCode;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: ErrorCode,
    pub message: String,
    pub retry_after: Option<u64>,
    /// `WWW-Authenticate` and `DPoP-Nonce`, where the refusal needs them.
    pub headers: Vec<(&'static str, String)>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
            headers: Vec::new(),
        }
    }

    /// 400 with a specific code.
    pub fn bad_request(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthenticated,
            message,
        )
    }

    pub fn forbidden(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, code, message)
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFound,
            format!("{what} not found"),
        )
    }

    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Self {
            retry_after: Some(retry_after_secs.max(1)),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::RateLimited,
                "rate limit exceeded; retry after the delay in Retry-After",
            )
        }
    }

    /// The store cannot be reached: fail closed.
    pub fn unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::StoreUnavailable,
            "the broker's store is unavailable; nothing was issued",
        )
    }

    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Internal,
            "internal error; see the broker log for this request id",
        )
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = self.status.into_response();
        if let Some(secs) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                resp.headers_mut()
                    .insert(axum::http::header::RETRY_AFTER, v);
            }
        }
        for (name, value) in &self.headers {
            if let Ok(v) = HeaderValue::from_str(value) {
                resp.headers_mut().insert(*name, v);
            }
        }
        resp.extensions_mut().insert(self);
        resp
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        use crate::store::StoreError;
        match e {
            StoreError::Unavailable(cause) => {
                tracing::debug!(error = %cause, "store unavailable");
                crate::store::health::request_failed(&cause);
                ApiError::unavailable()
            }
            StoreError::Conflict(what) => ApiError::new(
                StatusCode::CONFLICT,
                ErrorCode::Conflict,
                format!("{what} already exists"),
            ),
            StoreError::Corrupt(what) => {
                tracing::error!(error = %what, "store returned data the broker cannot read");
                ApiError::internal()
            }
        }
    }
}
