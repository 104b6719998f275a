//! Rate grammar: `COUNT/PER`, e.g. `"60/min"`, `"10/s"`, `"5/sec"`, `"100/h"`,
//! `"1000/day"`, `"3/5m"`.
//!
//! Why: `@rate` policy annotations and configured caps share one definition, and the
//! rate limiter needs an exact way to pick the strictest of several rates.
//!
//! Invariants: COUNT is plain ASCII digits in 1..=1_000_000; PER is a unit word
//! (`s`/`sec`/`second`, `m`/`min`/`minute`, `h`/`hr`/`hour`, `d`/`day`) or any
//! duration accepted by [`parse_duration`]; parsing never panics; `Display` output
//! parses back to an equal [`Rate`]; comparisons are exact (u128, no floats).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::duration::{format_duration, parse_duration};
use super::{quote, GrammarError};

/// Largest accepted request count.
pub const MAX_COUNT: u32 = 1_000_000;
/// Longest accepted input, in bytes.
const MAX_INPUT_BYTES: usize = 48;
/// Emission intervals are never shorter than this.
const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// `count` requests per `per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub count: u32,
    pub per: Duration,
}

/// Unit words accepted as PER, with their length in seconds.
const UNIT_WORDS: [(&str, u64); 10] = [
    ("s", 1),
    ("sec", 1),
    ("second", 1),
    ("m", 60),
    ("min", 60),
    ("minute", 60),
    ("h", 3600),
    ("hr", 3600),
    ("hour", 3600),
    ("d", 86_400),
];

impl FromStr for Rate {
    type Err = GrammarError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() > MAX_INPUT_BYTES {
            return Err(GrammarError(format!(
                "rate {} is longer than {MAX_INPUT_BYTES} bytes",
                quote(s)
            )));
        }
        let bad = |why: String| {
            GrammarError(format!(
                "invalid rate {}: {why} (expected COUNT/PER, e.g. \"60/min\" or \"3/5m\")",
                quote(s)
            ))
        };
        let Some((count, per)) = s.split_once('/') else {
            return Err(bad("missing '/'".into()));
        };
        if count.is_empty() || count.len() > 7 || !count.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(format!("count must be a number from 1 to {MAX_COUNT}")));
        }
        let count: u32 = count
            .parse()
            .map_err(|_| bad(format!("count must be a number from 1 to {MAX_COUNT}")))?;
        if count == 0 || count > MAX_COUNT {
            return Err(bad(format!("count must be a number from 1 to {MAX_COUNT}")));
        }
        let per = match UNIT_WORDS.iter().find(|(w, _)| *w == per) {
            Some((_, secs)) => Duration::from_secs(*secs),
            None if per == "day" => Duration::from_secs(86_400),
            None => parse_duration(per).map_err(|_| {
                bad("period must be s, sec, min, h, hour, day or a duration such as 5m".into())
            })?,
        };
        Ok(Rate { count, per })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per = match self.per.as_secs() {
            _ if self.per.subsec_nanos() != 0 => format_duration(self.per),
            1 => "s".to_string(),
            60 => "min".to_string(),
            3600 => "h".to_string(),
            86_400 => "day".to_string(),
            _ => format_duration(self.per),
        };
        write!(f, "{}/{}", self.count, per)
    }
}

impl Rate {
    /// Time between two requests at a steady pace: `per / count`, never below 1 ms.
    /// A (hand-built) zero count yields `per`.
    pub fn emission_interval(&self) -> Duration {
        let interval = self.per.checked_div(self.count).unwrap_or(self.per);
        interval.max(MIN_INTERVAL)
    }

    /// True when `self` allows fewer requests per unit of time than `other`:
    /// `self.count / self.per < other.count / other.per`, compared exactly as
    /// `self.count * other.per < other.count * self.per` in u128 nanoseconds.
    pub fn is_stricter_than(&self, other: &Rate) -> bool {
        // Duration::MAX is < 2^95 ns and counts are < 2^32, so products fit in u128.
        let lhs = u128::from(self.count).saturating_mul(other.per.as_nanos());
        let rhs = u128::from(other.count).saturating_mul(self.per.as_nanos());
        lhs < rhs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rate(s: &str) -> Rate {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn accepts_the_documented_forms() {
        let secs = |n| Duration::from_secs(n);
        assert_eq!(
            rate("60/min"),
            Rate {
                count: 60,
                per: secs(60)
            }
        );
        assert_eq!(
            rate("10/s"),
            Rate {
                count: 10,
                per: secs(1)
            }
        );
        assert_eq!(
            rate("5/sec"),
            Rate {
                count: 5,
                per: secs(1)
            }
        );
        assert_eq!(
            rate("100/h"),
            Rate {
                count: 100,
                per: secs(3600)
            }
        );
        assert_eq!(
            rate("1000/day"),
            Rate {
                count: 1000,
                per: secs(86_400)
            }
        );
        assert_eq!(
            rate("3/5m"),
            Rate {
                count: 3,
                per: secs(300)
            }
        );
        assert_eq!(
            rate("1/1h30m"),
            Rate {
                count: 1,
                per: secs(5400)
            }
        );
    }

    #[test]
    fn rejects_malformed_input() {
        for s in [
            "",
            "60",
            "/min",
            "0/min",
            "-1/min",
            "+1/min",
            "1000001/s",
            "99999999999/s",
            "1/",
            "1/0s",
            "1/week",
            "1/ min",
            " 1/min",
            "1/min/s",
            "1.5/s",
            "1/367d",
        ] {
            assert!(s.parse::<Rate>().is_err(), "{s:?} should be rejected");
        }
    }

    #[test]
    fn displays_canonically() {
        assert_eq!(rate("60/minute").to_string(), "60/min");
        assert_eq!(rate("3/5m").to_string(), "3/5m");
        assert_eq!(rate("1000/d").to_string(), "1000/day");
        assert_eq!(rate("2/90s").to_string(), "2/1m30s");
    }

    #[test]
    fn emission_interval_is_per_over_count_with_floor() {
        assert_eq!(rate("60/min").emission_interval(), Duration::from_secs(1));
        assert_eq!(
            rate("1000000/s").emission_interval(),
            Duration::from_millis(1)
        );
        let zero = Rate {
            count: 0,
            per: Duration::from_secs(5),
        };
        assert_eq!(zero.emission_interval(), Duration::from_secs(5));
    }

    #[test]
    fn stricter_compares_exactly() {
        assert!(rate("59/min").is_stricter_than(&rate("1/s")));
        assert!(!rate("60/min").is_stricter_than(&rate("1/s")));
        assert!(!rate("1/s").is_stricter_than(&rate("60/min")));
        assert!(rate("3/5m").is_stricter_than(&rate("1/min")));
        let huge = Rate {
            count: u32::MAX,
            per: Duration::MAX,
        };
        assert!(huge.is_stricter_than(&rate("1/s")));
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,60}") {
            let _ = s.parse::<Rate>();
        }

        #[test]
        fn never_panics_on_grammar_like_input(s in "[0-9]{0,8}/[0-9dhmsinecoury]{0,12}") {
            if let Ok(r) = s.parse::<Rate>() {
                prop_assert!(r.count >= 1 && r.count <= MAX_COUNT);
                prop_assert!(r.per > Duration::ZERO);
            }
        }

        #[test]
        fn round_trips(count in 1u32..=MAX_COUNT, secs in 1u64..=366 * 86_400) {
            let r = Rate { count, per: Duration::from_secs(secs) };
            prop_assert_eq!(r.to_string().parse::<Rate>(), Ok(r));
        }

        #[test]
        fn strictness_is_a_strict_order(a in 1u32..1000, pa in 1u64..10_000, b in 1u32..1000, pb in 1u64..10_000) {
            let ra = Rate { count: a, per: Duration::from_secs(pa) };
            let rb = Rate { count: b, per: Duration::from_secs(pb) };
            prop_assert!(!(ra.is_stricter_than(&rb) && rb.is_stricter_than(&ra)));
            prop_assert!(!ra.is_stricter_than(&ra));
        }
    }
}
