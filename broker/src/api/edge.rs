//! Checks every request gets before a handler sees it, whatever the listener:
//! the `Host` allow-list (a DNS-rebinding page must not read a loopback
//! broker's metrics or keys), a declared body above the cap refused before a
//! byte of it is read (no `100 Continue` either), and a deadline for the whole
//! request, body included.

use super::extract::body_too_large;
use super::MAX_BODY_BYTES;
use crate::app::AppState;
use crate::boxed::BoxFuture;
use crate::error::ApiError;
use crate::server::LocalAddr;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::convert::Infallible;
use std::task::{Context, Poll};
use tessera_client::types::ErrorCode;
use tower::{Layer, Service};

/// The layer that puts [`Guard`] in front of every route.
#[derive(Clone)]
pub struct GuardLayer {
    app: AppState,
}

impl GuardLayer {
    pub fn new(app: AppState) -> Self {
        Self { app }
    }
}

impl<S> Layer<S> for GuardLayer {
    type Service = Guard<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Guard {
            app: self.app.clone(),
            inner,
        }
    }
}

/// The checks, then the route under the request deadline.
#[derive(Clone)]
pub struct Guard<S> {
    app: AppState,
    inner: S,
}

impl<S> Service<Request> for Guard<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        // The service that was polled ready is the one that is called; a clone
        // (not yet ready) stays behind for the next request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let app = self.app.clone();
        Box::pin(async move {
            let h1 = req.version() <= axum::http::Version::HTTP_11;
            if let Some(refused) = check(&app, &req) {
                return Ok(closing(refused, h1));
            }
            let deadline = app.config.http.request_timeout;
            match tokio::time::timeout(deadline, inner.call(req)).await {
                Ok(Ok(resp)) => Ok(resp),
                Err(_) => {
                    let late = ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        ErrorCode::RequestTimeout,
                        "the request took longer than the broker allows",
                    );
                    Ok(closing(late, h1))
                }
            }
        })
    }
}

/// The refusal for a request that must not reach a route: a `Host` this
/// broker does not answer for, a declared body above the cap or a
/// `Content-Length` that is not a number.
fn check(app: &AppState, req: &Request) -> Option<ApiError> {
    let http = &app.config.http;
    let local = req
        .extensions()
        .get::<LocalAddr>()
        .map_or(app.config.listen, |l| l.0);
    // HTTP/2 carries the host in `:authority` (the URI); HTTP/1.1 in `Host`.
    let host = req
        .uri()
        .authority()
        .map(|a| a.as_str())
        .or_else(|| {
            req.headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
        })
        .unwrap_or_default();
    if !http.allowed_hosts.allows(host, local) {
        return Some(ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            ErrorCode::HostNotAllowed,
            "this broker does not answer for that Host (see http.allowed_hosts)",
        ));
    }
    if let Some(len) = req.headers().get(header::CONTENT_LENGTH) {
        let declared = len.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok());
        match declared {
            Some(n) if n > MAX_BODY_BYTES as u64 => return Some(body_too_large()),
            Some(_) => {}
            None => {
                return Some(ApiError::bad_request(
                    ErrorCode::InvalidRequest,
                    "Content-Length is not a number",
                ))
            }
        }
    }
    None
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
