//! A request or response body relayed by the absolute-form HTTP proxy, counted
//! against the run's byte allowance and the connection's deadline; it holds the
//! connection's record, so the `egress.closed` row is written when the last body
//! of the exchange is done.

use super::inject::intercept::Tally;
use super::traffic::{Conn, Cut};
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::time::Instant;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone, Copy)]
pub enum Direction {
    Up,
    Down,
}

pub enum ProxyBody {
    /// The gateway's own answer.
    Full(Option<Bytes>),
    /// Bytes from the client or the upstream.
    Relayed {
        inner: Incoming,
        conn: Arc<Conn>,
        direction: Direction,
        deadline: Instant,
        /// An injected exchange's account (`inject::intercept`).
        tally: Option<Arc<Tally>>,
    },
}

impl ProxyBody {
    pub fn text(s: impl Into<Bytes>) -> ProxyBody {
        ProxyBody::Full(Some(s.into()))
    }

    pub fn empty() -> ProxyBody {
        ProxyBody::Full(None)
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        match self.get_mut() {
            ProxyBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            ProxyBody::Relayed {
                inner,
                conn,
                direction,
                deadline,
                tally,
            } => {
                if Instant::now() >= *deadline {
                    conn.cut(Cut::DurationLimit);
                    return Poll::Ready(Some(Err("the connection's longest life is over".into())));
                }
                match Pin::new(inner).poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => {
                        if let Some(data) = frame.data_ref() {
                            if let Some(t) = tally {
                                t.add(*direction, data.len());
                            }
                            let ok = match direction {
                                Direction::Up => conn.add_up(data.len()),
                                Direction::Down => conn.add_down(data.len()),
                            };
                            if !ok {
                                conn.cut(Cut::ByteLimit);
                                return Poll::Ready(Some(Err(
                                    "the run has used its byte allowance".into(),
                                )));
                            }
                        }
                        Poll::Ready(Some(Ok(frame)))
                    }
                    Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
                    Poll::Ready(None) => Poll::Ready(None),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Full(b) => b.is_none(),
            ProxyBody::Relayed { inner, .. } => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            ProxyBody::Full(None) => SizeHint::with_exact(0),
            ProxyBody::Relayed { inner, .. } => inner.size_hint(),
        }
    }
}
