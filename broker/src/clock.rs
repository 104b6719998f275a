//! The broker's notion of "now".
//!
//! Expiry is decided against wall-clock time in seconds (JWT `exp`, run expiry)
//! and milliseconds (rate limits, audit). Tests move time forward with
//! [`Clock::advance`] to prove that expired runs and capabilities are dead without
//! sleeping; production code never advances it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

#[derive(Clone, Default)]
pub struct Clock {
    offset_ms: Arc<AtomicI64>,
}

impl Clock {
    pub fn new() -> Self {
        Self::default()
    }

    /// Current time in milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        let real = OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000;
        real as i64 + self.offset_ms.load(Ordering::Relaxed)
    }

    /// Current time in whole seconds since the Unix epoch.
    pub fn now(&self) -> i64 {
        self.now_ms().div_euclid(1000)
    }

    /// Moves this clock (and every clone of it) forward. For tests.
    pub fn advance(&self, by: Duration) {
        self.offset_ms
            .fetch_add(by.as_millis() as i64, Ordering::Relaxed);
    }
}

/// RFC 3339 UTC text of a Unix time in seconds.
pub fn rfc3339(unix_seconds: i64) -> String {
    OffsetDateTime::from_unix_timestamp(unix_seconds)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_owned())
}

/// RFC 3339 UTC text of a Unix time in milliseconds.
pub fn rfc3339_ms(unix_ms: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(unix_ms as i128 * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_owned())
}

/// Unix milliseconds of an RFC 3339 timestamp (`2026-11-29T10:00:00Z`, any offset).
pub fn parse_rfc3339_ms(text: &str) -> Option<i64> {
    let t = OffsetDateTime::parse(text, &Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips_in_milliseconds() {
        let ms = 1_764_410_400_123;
        assert_eq!(parse_rfc3339_ms(&rfc3339_ms(ms)), Some(ms));
        assert_eq!(
            parse_rfc3339_ms("2026-11-29T10:00:00+01:00"),
            parse_rfc3339_ms("2026-11-29T09:00:00Z")
        );
        assert_eq!(parse_rfc3339_ms("yesterday"), None);
        assert_eq!(parse_rfc3339_ms("2026-11-29"), None);
    }

    #[test]
    fn advance_moves_all_clones() {
        let c = Clock::new();
        let d = c.clone();
        let before = d.now();
        c.advance(Duration::from_secs(3600));
        assert!(d.now() >= before + 3600);
    }

    #[test]
    fn formats_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_800_000_000), "2027-01-15T08:00:00Z");
    }
}
