//! A request or response body relayed by the absolute-form HTTP proxy, counted
//! against the run's byte allowance and the connection's deadline; it holds the
//! connection's record, so the `egress.closed` row is written when the last body
//! of the exchange is done. A body the gateway must read whole (one it signs,
//! one an approval is bound to) is read here, once, within the memory bodies
//! read whole may hold ([`Whole`]), and sent framed by its length.

pub use super::traffic::Direction;
use super::traffic::{Conn, Cut, Tally};
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::time::Instant;

type Error = Box<dyn std::error::Error + Send + Sync>;

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

/// A request body read whole (one to be signed, or one an approval is bound
/// to), and the memory it holds until it is dropped: the run's share, when
/// the body has one, and the gateway's.
pub struct Whole {
    pub bytes: Bytes,
    _shares: (
        Option<tokio::sync::OwnedSemaphorePermit>,
        tokio::sync::OwnedSemaphorePermit,
    ),
}

/// How long a body read whole may take to arrive, at most.
const WHOLE_BODY_SECS: u64 = 60;

impl super::Gateway {
    /// Reads `body` whole: at most `max` bytes, within the MiB of memory the
    /// gateway lets bodies read whole hold (`run_share`'s too, when given),
    /// in a minute and before `deadline`. Each body holds its announced
    /// length, or `max` when it announces none.
    pub(crate) async fn read_whole(
        &self,
        body: Incoming,
        max: usize,
        run_share: Option<&Arc<tokio::sync::Semaphore>>,
        deadline: Instant,
    ) -> Result<Whole, super::refusal::Refusal> {
        use super::refusal::{Code, Refusal};
        let mib = body
            .size_hint()
            .exact()
            .map_or(max, |n| n as usize)
            .div_ceil(1 << 20)
            .max(1);
        let too_large = || {
            Refusal::new(
                Code::LimitReached,
                format!("a request body read whole is at most {max} bytes"),
            )
        };
        if mib > max.div_ceil(1 << 20) {
            return Err(too_large());
        }
        let busy = || Refusal::new(Code::LimitReached, "too many bodies being read at once");
        let wait = Instant::now() + std::time::Duration::from_secs(WHOLE_BODY_SECS);
        let run = match run_share {
            Some(s) => Some(
                tokio::time::timeout_at(wait, s.clone().acquire_many_owned(mib as u32))
                    .await
                    .map_err(|_| busy())?
                    .map_err(|_| busy())?,
            ),
            None => None,
        };
        let all = self.signed_bodies.clone().acquire_many_owned(mib as u32);
        let all = tokio::time::timeout_at(wait, all)
            .await
            .map_err(|_| busy())?
            .map_err(|_| busy())?;
        let limited = http_body_util::Limited::new(body, max);
        let bytes = tokio::time::timeout_at(
            wait.min(deadline),
            http_body_util::BodyExt::collect(limited),
        )
        .await
        .map_err(|_| Refusal::new(Code::LimitReached, "the request body took too long"))?
        .map_err(|_| too_large())?
        .to_bytes();
        Ok(Whole {
            bytes,
            _shares: (run, all),
        })
    }
}

/// `bytes` as the body sent upstream, counted against the connection's
/// allowance (which it may end), framed by its length.
pub fn whole_upstream(
    bytes: Bytes,
    conn: &Conn,
    headers: &mut hyper::HeaderMap,
) -> Result<ProxyBody, super::refusal::Refusal> {
    if !conn.add_up(bytes.len()) {
        conn.cut(Cut::ByteLimit);
        return Err(super::refusal::Refusal::new(
            super::refusal::Code::LimitReached,
            "the run has used its byte allowance",
        ));
    }
    headers.remove(hyper::header::TRANSFER_ENCODING);
    headers.insert(
        hyper::header::CONTENT_LENGTH,
        hyper::header::HeaderValue::from(bytes.len()),
    );
    Ok(ProxyBody::text(bytes))
}
