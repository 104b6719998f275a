//! Request context: request id, error bodies, access log, metrics.
//!
//! Every response leaves through here. A handler's [`ApiError`] travels in the
//! response extensions and is rendered into `{"error": {code, message, request_id}}`
//! here, because this is where the request id is known. Responses that axum itself
//! produced (405, 413 from the body limit, …) get the same JSON shape, so a client
//! never has to parse anything else.

use super::extract::RequestId;
use crate::app::AppState;
use crate::boxed::BoxFuture;
use crate::error::ApiError;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::convert::Infallible;
use std::task::{Context, Poll};
use std::time::Instant;
use tessera_client::types::ErrorCode;
use tessera_client::types::{ErrorBody, ErrorDetail};
use tower::{Layer, Service};
use tracing::Instrument;

/// A handler rendered its own error body (the OAuth endpoints' RFC 6749
/// JSON): it is passed on as it is.
#[derive(Debug, Clone, Copy)]
pub struct Rendered;

/// The outermost layer of [`super::router`]: every request gets an id (in its
/// extensions as [`RequestId`], in a `request` span around everything below,
/// in `X-Request-Id` on the answer), every error response the JSON body, and
/// every answer is counted.
#[derive(Clone)]
pub struct RequestContextLayer {
    app: AppState,
}

impl RequestContextLayer {
    pub fn new(app: AppState) -> Self {
        Self { app }
    }
}

impl<S> Layer<S> for RequestContextLayer {
    type Service = RequestContext<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestContext {
            app: self.app.clone(),
            inner,
        }
    }
}

/// The service [`RequestContextLayer`] wraps around a route.
#[derive(Clone)]
pub struct RequestContext<S> {
    app: AppState,
    inner: S,
}

impl<S> Service<Request> for RequestContext<S>
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

    fn call(&mut self, mut req: Request) -> Self::Future {
        // The service that was polled ready is the one that is called; a clone
        // (not yet ready) stays behind for the next request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let app = self.app.clone();
        Box::pin(async move {
            let id = crate::ids::new_request_id();
            let dpop_nonce = app.dpop.requires_nonce() && req.headers().contains_key("dpop");
            req.extensions_mut().insert(RequestId(id.clone()));
            let started = Instant::now();
            // The fields are formatted only if a subscriber takes the span.
            let span = tracing::info_span!("request", request_id = %id, method = %req.method(), path = %req.uri().path(), version = ?req.version());
            // A body the handler leaves unread is read before the answer
            // (an early refusal over HTTP/2 would otherwise reset the stream).
            // HTTP/1 needs none of it (hyper closes or reads on), and a client
            // waiting for `100 Continue` must not be invited to send.
            let unread = if req.version() == axum::http::Version::HTTP_2
                && !req.headers().contains_key(axum::http::header::EXPECT)
            {
                let body = std::mem::take(req.body_mut());
                let (body, unread) = super::unread::watch(body);
                *req.body_mut() = body;
                unread
            } else {
                None
            };
            // Everything below runs in the span, the inner service's `call` included.
            let mut below = std::pin::pin!(async move { inner.call(req).await }.instrument(span));
            let Ok(resp) = below.as_mut().await;
            if let Some(unread) = &unread {
                super::unread::drain(unread).await;
            }
            Ok(finish(&app, resp, &id, below.span(), dpop_nonce, started))
        })
    }
}

/// The answer as it leaves: the error body rendered, the request id and a
/// DPoP nonce added, the response counted.
fn finish(
    app: &AppState,
    mut resp: Response,
    id: &str,
    span: &tracing::Span,
    dpop_nonce: bool,
    started: Instant,
) -> Response {
    let rendered = resp.extensions_mut().remove::<Rendered>().is_some();
    let error = match resp.extensions_mut().remove::<ApiError>() {
        Some(e) => Some(e),
        None if rendered => None,
        None if resp.status().is_client_error() || resp.status().is_server_error() => {
            Some(generic_error(resp.status()))
        }
        None => None,
    };
    if let Some(e) = error {
        let _enter = span.enter();
        if e.status.is_server_error() {
            tracing::error!(
                status = e.status.as_u16(),
                code = e.code.as_str(),
                "request failed"
            );
        } else {
            tracing::info!(
                status = e.status.as_u16(),
                code = e.code.as_str(),
                "request refused"
            );
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code: e.code.as_str().to_owned(),
                message: e.message.clone(),
                request_id: id.to_owned(),
            },
        };
        let headers = resp.headers().clone();
        resp = (e.status, axum::Json(body)).into_response();
        for (name, value) in headers.iter() {
            let named = e.headers.iter().any(|(n, _)| name == *n);
            if name == axum::http::header::RETRY_AFTER
                || name == axum::http::header::CONNECTION
                || named
            {
                resp.headers_mut().insert(name, value.clone());
            }
        }
    }
    if let Ok(v) = HeaderValue::from_str(id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    // RFC 9449 §8: a fresh nonce with every answer to a DPoP request.
    if dpop_nonce && !resp.headers().contains_key("dpop-nonce") {
        if let Ok(v) = HeaderValue::from_str(&app.dpop.nonce(app.clock.now())) {
            resp.headers_mut().insert("dpop-nonce", v);
        }
    }
    app.metrics
        .http_response(resp.status().as_u16(), started.elapsed().as_secs_f64());
    resp
}

fn generic_error(status: StatusCode) -> ApiError {
    match status {
        StatusCode::NOT_FOUND => ApiError::not_found("route"),
        StatusCode::METHOD_NOT_ALLOWED => ApiError::new(
            status,
            ErrorCode::MethodNotAllowed,
            "method not allowed on this route",
        ),
        StatusCode::PAYLOAD_TOO_LARGE => super::extract::body_too_large(),
        s if s.is_server_error() => ApiError::internal(),
        s => ApiError::new(s, ErrorCode::InvalidRequest, "request refused"),
    }
}

/// Fallback for unknown routes.
pub async fn not_found() -> ApiError {
    ApiError::not_found("route")
}
