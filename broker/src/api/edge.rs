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
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub async fn guard(State(app): State<AppState>, req: Request, next: Next) -> Response {
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
        return ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "host_not_allowed",
            "this broker does not answer for that Host (see http.allowed_hosts)",
        )
        .into_response();
    }
    if let Some(len) = req.headers().get(header::CONTENT_LENGTH) {
        let declared = len.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok());
        match declared {
            Some(n) if n > MAX_BODY_BYTES as u64 => return body_too_large().into_response(),
            Some(_) => {}
            None => {
                return ApiError::bad_request("invalid_request", "Content-Length is not a number")
                    .into_response()
            }
        }
    }
    match tokio::time::timeout(http.request_timeout, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "request_timeout",
            "the request took longer than the broker allows",
        )
        .into_response(),
    }
}
