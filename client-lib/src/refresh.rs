//! A credential kept fresh: fetched on first use, reused while it is valid, and
//! fetched again shortly *before* it expires, so a caller never holds a credential
//! that dies mid-request.
//!
//! Why a window proportional to the lifetime: capabilities can be short (minutes);
//! refreshing one minute early would waste most of a two-minute credential, so the
//! window is the smaller of the configured margin and a fifth of the lifetime.
//! Refreshes are single-flight: concurrent callers wait for one fetch.

use crate::error::Error;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

type Fetch<T> = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<(T, SystemTime), Error>> + Send>> + Send + Sync,
>;

/// The clock refresh decisions use; replaceable in tests.
pub type Now = Arc<dyn Fn() -> SystemTime + Send + Sync>;

pub struct Refreshing<T> {
    fetch: Fetch<T>,
    now: Now,
    margin: Duration,
    slot: tokio::sync::Mutex<Option<Cached<T>>>,
}

struct Cached<T> {
    value: Arc<T>,
    refresh_at: SystemTime,
}

impl<T: Send + Sync + 'static> Refreshing<T> {
    /// `fetch` returns a credential and when it expires.
    pub fn new<F, Fut>(margin: Duration, fetch: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(T, SystemTime), Error>> + Send + 'static,
    {
        Refreshing {
            fetch: Arc::new(move || Box::pin(fetch())),
            now: Arc::new(SystemTime::now),
            margin,
            slot: tokio::sync::Mutex::new(None),
        }
    }

    /// Uses `now` instead of the system clock.
    pub fn with_clock(mut self, now: Now) -> Self {
        self.now = now;
        self
    }

    /// The current credential, fetching a new one when none is held or the held
    /// one is inside its refresh window.
    pub async fn get(&self) -> Result<Arc<T>, Error> {
        let mut slot = self.slot.lock().await;
        let now = (self.now)();
        if let Some(c) = slot.as_ref() {
            if now < c.refresh_at {
                return Ok(c.value.clone());
            }
        }
        let (value, expires) = (self.fetch)().await?;
        let lifetime = expires.duration_since(now).unwrap_or_default();
        let window = self.margin.min(lifetime / 5);
        let value = Arc::new(value);
        *slot = Some(Cached {
            value: value.clone(),
            refresh_at: expires - window,
        });
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[tokio::test]
    async fn refreshes_inside_the_window_only() {
        let clock = Arc::new(AtomicU64::new(1_000_000));
        let fetched = Arc::new(AtomicU64::new(0));
        let (c, f) = (clock.clone(), fetched.clone());
        let r = Refreshing::new(Duration::from_secs(60), move || {
            let n = f.fetch_add(1, Ordering::SeqCst);
            let now = c.load(Ordering::SeqCst);
            async move { Ok((n, SystemTime::UNIX_EPOCH + Duration::from_secs(now + 900))) }
        });
        let c = clock.clone();
        let r = r.with_clock(Arc::new(move || {
            SystemTime::UNIX_EPOCH + Duration::from_secs(c.load(Ordering::SeqCst))
        }));
        assert_eq!(*r.get().await.unwrap(), 0);
        clock.fetch_add(839, Ordering::SeqCst);
        assert_eq!(*r.get().await.unwrap(), 0, "still outside the 60 s window");
        clock.fetch_add(1, Ordering::SeqCst);
        assert_eq!(*r.get().await.unwrap(), 1, "refreshed 60 s before expiry");
    }
}
