//! `@approval` and `@approval_ttl`: who must approve a permit's capability, how
//! many of them, and how long the request may wait.
//!
//! Grammar of `@approval`: `"required"` (any one approver), `"any"`,
//! `"group:NAME"`, `"user:NAME"`, or `"N of "` before one of those (N from 1
//! to 9: N distinct people). NAME is an entities.json id. Group membership is
//! read from the policy snapshot in force when an approver decides, so a
//! reload that removes someone from the group removes their say at once.
//!
//! Invariants: a gate is parsed once, at load; when several satisfied permits
//! carry gates, every one of them must be met (the strictest is all of them).

use std::fmt;
use std::time::Duration;

use crate::grammar::{parse_duration, quote};

/// How long an approval may wait when the permit says nothing (`@approval_ttl`).
pub const DEFAULT_APPROVAL_TTL: Duration = Duration::from_secs(15 * 60);
/// Bounds of `@approval_ttl`.
pub const APPROVAL_TTL_BOUNDS: (Duration, Duration) =
    (Duration::from_secs(60), Duration::from_secs(7 * 86_400));
/// Most distinct approvers a gate may ask for.
pub const MAX_REQUIRED: u32 = 9;

/// Who may approve.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ApproverRule {
    Any,
    Group(String),
    User(String),
}

/// One permit's approval requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalGate {
    pub rule: ApproverRule,
    pub required: u32,
    pub ttl: Duration,
}

impl fmt::Display for ApproverRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApproverRule::Any => f.write_str("any"),
            ApproverRule::Group(g) => write!(f, "group:{g}"),
            ApproverRule::User(u) => write!(f, "user:{u}"),
        }
    }
}

impl ApproverRule {
    /// Parses `any`, `group:NAME` or `user:NAME` (what [`fmt::Display`] writes).
    pub fn parse(s: &str) -> Result<ApproverRule, String> {
        if s == "any" {
            return Ok(ApproverRule::Any);
        }
        let (kind, name) = s
            .split_once(':')
            .ok_or_else(|| format!("{} names no approvers", quote(s)))?;
        let ok = !name.is_empty()
            && name.len() <= 128
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._@+-".contains(&b));
        if !ok {
            return Err(format!("{}: not an entities.json id", quote(name)));
        }
        match kind {
            "group" => Ok(ApproverRule::Group(name.to_owned())),
            "user" => Ok(ApproverRule::User(name.to_owned())),
            _ => Err(format!("{}: expected group: or user:", quote(kind))),
        }
    }

    /// Whether `user`, in `groups` (all of them, nested included), is named.
    pub fn admits(&self, user: &str, groups: &[String]) -> bool {
        match self {
            ApproverRule::Any => true,
            ApproverRule::User(u) => u == user,
            ApproverRule::Group(g) => groups.iter().any(|x| x == g),
        }
    }
}

/// Parses an `@approval` value; `Err` is the message, without the key.
pub fn parse_gate(value: &str) -> Result<(ApproverRule, u32), String> {
    if value == "required" {
        return Ok((ApproverRule::Any, 1));
    }
    let (required, rule) = match value.split_once(" of ") {
        Some((n, rule)) => {
            let n = (n.len() == 1)
                .then(|| n.parse::<u32>().ok())
                .flatten()
                .filter(|n| (1..=MAX_REQUIRED).contains(n))
                .ok_or_else(|| format!("{}: a count from 1 to {MAX_REQUIRED}", quote(n)))?;
            (n, rule)
        }
        None => (1, value),
    };
    Ok((ApproverRule::parse(rule)?, required))
}

/// Parses an `@approval_ttl` value.
pub fn parse_ttl(value: &str) -> Result<Duration, String> {
    let d = parse_duration(value).map_err(|e| e.to_string())?;
    let (min, max) = APPROVAL_TTL_BOUNDS;
    if d < min || d > max {
        return Err(format!(
            "{} is outside {}s to {}s",
            quote(value),
            min.as_secs(),
            max.as_secs()
        ));
    }
    Ok(d)
}

/// The gates of several permits as one text (`2 of group:finance; user:bob`),
/// sorted, as an approval records them.
pub fn describe(gates: &[ApprovalGate]) -> String {
    let mut parts: Vec<String> = gates
        .iter()
        .map(|g| match g.required {
            1 => g.rule.to_string(),
            n => format!("{n} of {}", g.rule),
        })
        .collect();
    parts.sort();
    parts.dedup();
    parts.join("; ")
}

/// Parses what [`describe`] wrote back into (rule, required) pairs.
pub fn parse_described(text: &str) -> Result<Vec<(ApproverRule, u32)>, String> {
    text.split("; ").map(parse_gate).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar() {
        assert_eq!(parse_gate("required").unwrap(), (ApproverRule::Any, 1));
        assert_eq!(parse_gate("any").unwrap(), (ApproverRule::Any, 1));
        assert_eq!(
            parse_gate("group:release-managers").unwrap(),
            (ApproverRule::Group("release-managers".into()), 1)
        );
        assert_eq!(
            parse_gate("2 of group:finance").unwrap(),
            (ApproverRule::Group("finance".into()), 2)
        );
        assert_eq!(
            parse_gate("user:dana").unwrap(),
            (ApproverRule::User("dana".into()), 1)
        );
        for bad in [
            "",
            "yes",
            "group:",
            "team:x",
            "0 of group:x",
            "10 of group:x",
            "two of group:x",
            "2 of ",
            "group:a b",
            "group:a;b",
        ] {
            assert!(parse_gate(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn described_gates_read_back() {
        let gates = vec![
            ApprovalGate {
                rule: ApproverRule::User("bob".into()),
                required: 1,
                ttl: DEFAULT_APPROVAL_TTL,
            },
            ApprovalGate {
                rule: ApproverRule::Group("finance".into()),
                required: 2,
                ttl: DEFAULT_APPROVAL_TTL,
            },
        ];
        let text = describe(&gates);
        assert_eq!(text, "2 of group:finance; user:bob");
        assert_eq!(
            parse_described(&text).unwrap(),
            vec![
                (ApproverRule::Group("finance".into()), 2),
                (ApproverRule::User("bob".into()), 1)
            ]
        );
    }

    #[test]
    fn who_is_admitted() {
        let groups = vec!["finance".to_string(), "staff".to_string()];
        assert!(ApproverRule::Group("staff".into()).admits("dana", &groups));
        assert!(!ApproverRule::Group("ops".into()).admits("dana", &groups));
        assert!(ApproverRule::User("dana".into()).admits("dana", &[]));
        assert!(!ApproverRule::User("dana".into()).admits("erin", &groups));
        assert!(ApproverRule::Any.admits("anyone", &[]));
    }

    #[test]
    fn ttl_bounds() {
        assert_eq!(parse_ttl("15m").unwrap(), DEFAULT_APPROVAL_TTL);
        assert!(parse_ttl("30s").is_err());
        assert!(parse_ttl("8d").is_err());
    }
}
