//! What a connection is doing, in requests rather than bytes, so the server can
//! close connections that hold a slot and ask for nothing.
//!
//! Why requests: a peer can keep bytes moving without ever asking for
//! anything (HTTP/2 PINGs or WINDOW_UPDATEs every few seconds), so "no byte
//! for a while" would let it hold its slot forever. A connection counts as
//! idle when no request is in flight and none started or ended for the idle
//! timeout, whatever frames move meanwhile.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

#[derive(Clone)]
pub struct RequestActivity(Arc<Inner>);

struct Inner {
    epoch: Instant,
    /// Milliseconds since `epoch` when a request last started or ended.
    last_ms: AtomicU64,
    in_flight: AtomicU64,
    started: AtomicU64,
}

impl RequestActivity {
    pub fn new() -> RequestActivity {
        RequestActivity(Arc::new(Inner {
            epoch: Instant::now(),
            last_ms: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            started: AtomicU64::new(0),
        }))
    }

    fn touch(&self) {
        let now = self.0.epoch.elapsed().as_millis() as u64;
        self.0.last_ms.store(now, Ordering::Relaxed);
    }

    /// Whether the connection has asked for anything yet.
    pub fn any_request(&self) -> bool {
        self.0.started.load(Ordering::Relaxed) > 0
    }

    /// How long the connection has been open.
    pub fn age(&self) -> Duration {
        self.0.epoch.elapsed()
    }

    /// How long no request has been in flight (zero while one is).
    pub fn idle_for(&self) -> Duration {
        if self.0.in_flight.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        let last = self.0.last_ms.load(Ordering::Relaxed);
        let now = self.0.epoch.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(last))
    }

    fn enter(&self) -> InFlight {
        self.0.started.fetch_add(1, Ordering::Relaxed);
        self.0.in_flight.fetch_add(1, Ordering::AcqRel);
        self.touch();
        InFlight(self.clone())
    }
}

/// One request in flight; ends when dropped (answered or abandoned).
struct InFlight(RequestActivity);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0 .0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A service that reports each request it handles to a [`RequestActivity`].
#[derive(Clone)]
pub struct Counted<S> {
    inner: S,
    activity: RequestActivity,
}

impl<S> Counted<S> {
    pub fn new(inner: S, activity: RequestActivity) -> Counted<S> {
        Counted { inner, activity }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, R> tower::Service<R> for Counted<S>
where
    S: tower::Service<R, Response = axum::response::Response>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        let guard = self.activity.enter();
        let fut = self.inner.call(req);
        Box::pin(async move {
            // In flight until its body has been sent, not only its head: a
            // stopping server must not drop an answer half written.
            let out = fut.await?;
            // The guard lives in the body (a pass-through `map_err`, which
            // keeps the size hint and so the Content-Length) and is dropped
            // with it, once hyper wrote its last frame or the connection ended.
            Ok(out.map(|body| {
                axum::body::Body::new(http_body_util::BodyExt::map_err(body, move |e| {
                    let _in_flight = &guard;
                    e
                }))
            }))
        })
    }
}
