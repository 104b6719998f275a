//! Duration grammar: `"90s"`, `"5m"`, `"1h"`, `"2d"`, `"1h30m"`.
//!
//! Why: TTLs in policy annotations and configuration are written by humans and must be
//! unambiguous. The grammar is deliberately tiny: one or more `<digits><unit>` groups,
//! units `d`, `h`, `m`, `s` in strictly decreasing order, no spaces, no sign, no
//! fractions.
//!
//! Invariants: the input is at most [`MAX_INPUT_BYTES`] bytes; the total is > 0 and at
//! most [`MAX_DURATION`] (366 days); all arithmetic is checked, so no input panics or
//! overflows; `parse_duration(&format_duration(d)) == Ok(d)` for every accepted `d`.

use std::time::Duration;

use super::{quote, GrammarError};

/// Longest accepted input, in bytes.
pub const MAX_INPUT_BYTES: usize = 32;
/// Longest accepted duration: 366 days.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * DAY);

const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;

/// Units from largest to smallest; groups must follow this order, each at most once.
const UNITS: [(u8, u64); 4] = [(b'd', DAY), (b'h', HOUR), (b'm', MINUTE), (b's', 1)];

/// Parses `"90s"`, `"5m"`, `"1h"`, `"2d"`, `"1h30m"`: one or more `<digits><unit>`
/// groups, units s/m/h/d in strictly decreasing order, no spaces, no sign, total > 0
/// and <= 366 days, input <= 32 bytes. Never panics or overflows on any input.
pub fn parse_duration(s: &str) -> Result<Duration, GrammarError> {
    if s.is_empty() {
        return Err(GrammarError(
            "empty duration (expected e.g. \"15m\" or \"1h30m\")".into(),
        ));
    }
    if s.len() > MAX_INPUT_BYTES {
        return Err(GrammarError(format!(
            "duration {} is longer than {MAX_INPUT_BYTES} bytes",
            quote(s)
        )));
    }
    let bad = |why: &str| {
        GrammarError(format!(
            "invalid duration {}: {why} (expected <number><unit> groups with units d, h, m, s in that order, e.g. \"1h30m\")",
            quote(s)
        ))
    };
    let bytes = s.as_bytes();
    let mut total: u64 = 0;
    // Index into UNITS of the next unit still allowed (strictly decreasing order).
    let mut next_unit = 0usize;
    let mut i = 0usize;
    while i < bytes.len() {
        let start = i;
        let mut value: u64 = 0;
        while let Some(&b) = bytes.get(i) {
            if !b.is_ascii_digit() {
                break;
            }
            value = value
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(b - b'0')))
                .ok_or_else(|| bad("number too large"))?;
            i += 1;
        }
        if i == start {
            return Err(bad("expected a digit"));
        }
        let Some(&unit) = bytes.get(i) else {
            return Err(bad("number without a unit"));
        };
        i += 1;
        let Some(pos) = UNITS.iter().position(|(u, _)| *u == unit) else {
            return Err(bad("unknown unit"));
        };
        if pos < next_unit {
            return Err(bad(
                "units must be in decreasing order d, h, m, s and appear once",
            ));
        }
        next_unit = pos + 1;
        let secs = UNITS
            .get(pos)
            .map(|(_, secs)| *secs)
            .ok_or_else(|| bad("unknown unit"))?;
        total = value
            .checked_mul(secs)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| bad("too large"))?;
    }
    if total == 0 {
        return Err(bad("must be greater than zero"));
    }
    let d = Duration::from_secs(total);
    if d > MAX_DURATION {
        return Err(bad("longer than 366 days"));
    }
    Ok(d)
}

/// Formats the shortest canonical form (e.g. 5400 s → `"1h30m"`). Sub-second parts are
/// truncated; zero formats as `"0s"` (which [`parse_duration`] rejects, as it should).
pub fn format_duration(d: Duration) -> String {
    let mut rest = d.as_secs();
    if rest == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    for (unit, secs) in UNITS {
        let n = rest / secs;
        rest %= secs;
        if n > 0 {
            out.push_str(&n.to_string());
            out.push(char::from(unit));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_the_documented_forms() {
        let cases = [
            ("90s", 90),
            ("5m", 300),
            ("1h", 3600),
            ("2d", 172_800),
            ("1h30m", 5400),
            ("1d2h3m4s", 93_784),
            ("366d", 366 * 86_400),
        ];
        for (s, secs) in cases {
            assert_eq!(parse_duration(s), Ok(Duration::from_secs(secs)), "{s}");
        }
    }

    #[test]
    fn rejects_malformed_input() {
        for s in [
            "",
            "0s",
            "0h0m",
            "5",
            "m",
            "5x",
            "-5m",
            "+5m",
            " 5m",
            "5m ",
            "5 m",
            "30m1h",
            "1h1h",
            "1.5h",
            "367d",
            "1M",
            "5mm",
            "99999999999999999999999s",
            "1h30",
            "٣s",
        ] {
            assert!(parse_duration(s).is_err(), "{s:?} should be rejected");
        }
        assert!(parse_duration(&"1".repeat(33)).is_err());
    }

    #[test]
    fn error_names_the_input_but_truncates_it() {
        let err = parse_duration("30m1h")
            .err()
            .map(|e| e.0)
            .unwrap_or_default();
        assert!(err.contains("\"30m1h\""), "{err}");
        let long = format!("{}s", "9".repeat(31));
        assert!(parse_duration(&long).is_err());
    }

    #[test]
    fn formats_canonically() {
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_duration(Duration::from_secs(86_400)), "1d");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1s");
        assert_eq!(format_duration(Duration::ZERO), "0s");
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,40}") {
            let _ = parse_duration(&s);
        }

        #[test]
        fn never_panics_on_grammar_like_input(s in "[0-9dhms+-]{0,40}") {
            if let Ok(d) = parse_duration(&s) {
                prop_assert!(d > Duration::ZERO && d <= MAX_DURATION);
            }
        }

        #[test]
        fn round_trips(secs in 1u64..=366 * 86_400) {
            let d = Duration::from_secs(secs);
            let s = format_duration(d);
            prop_assert_eq!(parse_duration(&s), Ok(d));
        }
    }
}
