//! Request bodies a handler never read are read (and dropped) before the
//! answer goes out.
//!
//! Why: a handler that refuses early (a bad token, a missing client
//! certificate) answers without reading the body. Over HTTP/2 the stream is
//! then still open from the client's side when the answer completes, so the
//! server resets it, and clients such as curl report a framing error
//! (`(92) Stream error in the HTTP/2 framing layer`) instead of the JSON
//! refusal. Reading what is left of the body first ends the stream cleanly.
//! Only HTTP/2 requests are watched (the middleware decides), and none that
//! expects `100 Continue`: reading would invite a body the answer refused.
//! It is bounded: at most [`super::MAX_BODY_BYTES`] and [`DRAIN_FOR`]; a body
//! beyond either is left unread (its stream is reset, as before).

use axum::body::{Body, Bytes, HttpBody};
use http_body_util::BodyExt;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

/// How long the rest of an unread body may take to arrive.
const DRAIN_FOR: Duration = Duration::from_secs(1);

/// Where a body the handler dropped unread is left for [`drain`].
pub type Slot = Arc<Mutex<Option<Body>>>;

/// `body`, handing itself to `slot` if dropped before its end.
pub fn watch(body: Body) -> (Body, Option<Slot>) {
    if body.is_end_stream() {
        return (body, None);
    }
    let slot: Slot = Arc::new(Mutex::new(None));
    let watched = Watched {
        inner: Some(body),
        slot: slot.clone(),
    };
    (Body::new(watched), Some(slot))
}

/// Reads what is left of a body the handler did not read, within bounds.
pub async fn drain(slot: &Slot) {
    let rest = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
    let Some(mut body) = rest else { return };
    let read = async {
        let mut seen = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(data) = frame.data_ref() {
                seen += data.len();
                if seen > super::MAX_BODY_BYTES {
                    return;
                }
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_FOR, read).await;
}

struct Watched {
    inner: Option<Body>,
    slot: Slot,
}

impl HttpBody for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        match self.inner.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| http_body::SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(body) = self.inner.take() {
            if !body.is_end_stream() {
                *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(body);
            }
        }
    }
}
