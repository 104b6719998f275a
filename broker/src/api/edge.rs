//! Checks every request gets before a handler sees it, whatever the listener:
//! the `Host` allow-list (a DNS-rebinding page must not read a loopback
//! broker's metrics or keys), a declared body above the cap refused before a
//! byte of it is read (no `100 Continue` either), and a deadline for the whole
//! request, body included.

use super::extract::body_too_large;
use super::MAX_BODY_BYTES;
use crate::app::AppState;
use crate::error::ApiError;
use crate::server::LocalAddr;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tessera_client::types::ErrorCode;

pub async fn guard(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let h1 = req.version() <= axum::http::Version::HTTP_11;
    let http = &app.config.http;
    let local = req
        .extensions()
        .get::<LocalAddr>()
        .map_or(app.config.listen, |l| l.0);
    // HTTP/2 carries the host in `:authority` (the URI); HTTP/1.1 in `Host`.
    let host = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| {
            req.headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_owned)
        })
        .unwrap_or_default();
    if !http.allowed_hosts.allows(&host, local) {
        let refused = ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            ErrorCode::HostNotAllowed,
            "this broker does not answer for that Host (see http.allowed_hosts)",
        );
        return closing(refused, h1);
    }
    if let Some(len) = req.headers().get(header::CONTENT_LENGTH) {
        let declared = len.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok());
        match declared {
            Some(n) if n > MAX_BODY_BYTES as u64 => return closing(body_too_large(), h1),
            Some(_) => {}
            None => {
                let bad = ApiError::bad_request(
                    ErrorCode::InvalidRequest,
                    "Content-Length is not a number",
                );
                return closing(bad, h1);
            }
        }
    }
    match tokio::time::timeout(http.request_timeout, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => {
            let late = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::RequestTimeout,
                "the request took longer than the broker allows",
            );
            closing(late, h1)
        }
    }
}

/// A refusal sent before the body was read (or while it still arrives) ends
/// an HTTP/1 connection: the unread body would otherwise be parsed as the next
/// request, and a client reusing the connection would see it cut mid-request.
/// (HTTP/2 resets the stream instead; `Connection` is not allowed there.)
fn closing(error: ApiError, h1: bool) -> Response {
    let mut resp = error.into_response();
    if h1 {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}
