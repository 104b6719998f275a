//! Tessera's policy annotations: `@id`, `@description`, the constraints `@ttl`,
//! `@uses`, `@rate`, `@approval` (with `@approval_ttl`) and `@allow_addresses`
//! (egress: non-public ranges a `connect` permit opens) that ride on permit
//! policies, and `@on_deny("end_run")`, which rides on a forbid: the egress
//! gateway ends a run that tries a destination the forbid refuses.
//!
//! Why: constraints are part of the policy an administrator reviews, so they live next
//! to the permit they qualify, and a typo must fail the load rather than silently
//! grant an unconstrained capability.
//!
//! Invariants: the only keys accepted are the nine above; constraint keys only on
//! `permit` policies, `@on_deny` only on `forbid` policies; every value is parsed strictly at load time (never at request
//! time); merging keeps the strictest value and the id of the policy that set it, ties
//! going to the first policy in the (sorted) order merged.

use std::time::Duration;

use cedar_policy::Effect;

use super::approval_gate::{self, ApprovalGate};
use super::Constraints;
use crate::backends::net::cidr::{self, Cidr};
use crate::grammar::{parse_duration, quote, Rate};

/// Largest accepted `@uses` value.
pub(super) const MAX_USES: u32 = 1_000_000;
/// Longest accepted `@id`.
const MAX_ID_LEN: usize = 128;

/// Keys a policy may carry.
const KNOWN_KEYS: [&str; 9] = [
    "id",
    "description",
    "ttl",
    "uses",
    "rate",
    "approval",
    "approval_ttl",
    "allow_addresses",
    "on_deny",
];

/// Constraints declared by one permit policy.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct PolicyConstraints {
    pub ttl: Option<Duration>,
    pub uses: Option<u32>,
    pub rate: Option<Rate>,
    pub approval: Option<ApprovalGate>,
    /// Non-public ranges this permit opens to the egress gateway.
    pub allow_addresses: Vec<Cidr>,
    /// A forbid's `@on_deny("end_run")`.
    pub end_run_on_deny: bool,
}

/// A bad annotation: which key (to locate it in the source), what, and a hint.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct AnnotationError {
    pub key: String,
    pub message: String,
    pub hint: Option<String>,
}

/// What the annotations of one policy say.
#[derive(Debug, Default)]
pub(super) struct Parsed {
    pub id: Option<String>,
    pub constraints: PolicyConstraints,
    pub errors: Vec<AnnotationError>,
}

/// Parses and checks the annotations of one policy.
pub(super) fn parse<'a>(
    effect: Effect,
    annotations: impl Iterator<Item = (&'a str, &'a str)>,
) -> Parsed {
    let mut out = Parsed::default();
    let mut approval_ttl: Option<Duration> = None;
    let mut saw_approval_ttl = false;
    for (key, value) in annotations {
        let mut fail = |message: String, hint: Option<&str>| {
            out.errors.push(AnnotationError {
                key: key.to_string(),
                message,
                hint: hint.map(str::to_string),
            });
        };
        let is_constraint = matches!(
            key,
            "ttl" | "uses" | "rate" | "approval" | "approval_ttl" | "allow_addresses"
        );
        if !KNOWN_KEYS.contains(&key) {
            fail(
                format!(
                    "unknown annotation @{}",
                    key.chars().take(64).collect::<String>()
                ),
                Some("allowed: @id, @description, @ttl, @uses, @rate, @approval, @approval_ttl, @allow_addresses, @on_deny"),
            );
            continue;
        }
        if is_constraint && effect == Effect::Forbid {
            fail(
                format!("@{key} is only allowed on permit policies"),
                Some("constraints qualify what a permit grants; a forbid grants nothing"),
            );
            continue;
        }
        if key == "on_deny" && effect == Effect::Permit {
            fail(
                "@on_deny is only allowed on forbid policies".into(),
                Some("it says what happens when the forbid refuses a destination"),
            );
            continue;
        }
        match key {
            "id" => match check_id(value) {
                Ok(()) => out.id = Some(value.to_string()),
                Err(message) => fail(message, Some("e.g. @id(\"analysts-read-reports\")")),
            },
            "ttl" => match parse_duration(value) {
                Ok(d) => out.constraints.ttl = Some(d),
                Err(e) => fail(format!("@ttl: {e}"), None),
            },
            "uses" => match parse_uses(value) {
                Some(n) => out.constraints.uses = Some(n),
                None => fail(
                    format!("@uses: invalid count {}", quote(value)),
                    Some("a whole number from 1 to 1000000, e.g. @uses(\"20\")"),
                ),
            },
            "rate" => match value.parse::<Rate>() {
                Ok(r) => out.constraints.rate = Some(r),
                Err(e) => fail(format!("@rate: {e}"), None),
            },
            "approval" => match approval_gate::parse_gate(value) {
                Ok((rule, required)) => {
                    out.constraints.approval = Some(ApprovalGate {
                        rule,
                        required,
                        ttl: approval_gate::DEFAULT_APPROVAL_TTL,
                    })
                }
                Err(e) => fail(
                    format!("@approval: {e}"),
                    Some(
                        "e.g. @approval(\"group:release-managers\"), @approval(\"2 of group:finance\"), \
                         @approval(\"user:dana\") or @approval(\"required\") (any approver)",
                    ),
                ),
            },
            "approval_ttl" => {
                saw_approval_ttl = true;
                match approval_gate::parse_ttl(value) {
                    Ok(d) => approval_ttl = Some(d),
                    Err(e) => fail(format!("@approval_ttl: {e}"), None),
                }
            }
            "allow_addresses" => match cidr::parse_list(value) {
                Ok(ranges) => out.constraints.allow_addresses = ranges,
                Err(e) => fail(
                    format!("@allow_addresses: {e}"),
                    Some("networks separated by commas, e.g. @allow_addresses(\"127.0.0.0/8, ::1/128\")"),
                ),
            },
            "on_deny" => match value {
                "end_run" => out.constraints.end_run_on_deny = true,
                _ => fail(
                    format!("@on_deny: unknown action {}", quote(value)),
                    Some("@on_deny(\"end_run\"): the run ends when it tries what this forbid refuses"),
                ),
            },
            _ => {} // "description": free text
        }
    }
    match (&mut out.constraints.approval, approval_ttl) {
        (Some(gate), Some(ttl)) => gate.ttl = ttl,
        (None, _) if saw_approval_ttl && effect == Effect::Permit => {
            out.errors.push(AnnotationError {
                key: "approval_ttl".into(),
                message: "@approval_ttl without @approval".into(),
                hint: Some("it says how long an approval may wait; add @approval(…)".into()),
            })
        }
        _ => {}
    }
    out
}

fn check_id(id: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/');
    if id.is_empty() || id.len() > MAX_ID_LEN || !id.chars().all(ok_char) {
        return Err(format!(
            "@id: invalid id {} (1 to {MAX_ID_LEN} characters among A-Z a-z 0-9 - _ . : /)",
            quote(id)
        ));
    }
    Ok(())
}

fn parse_uses(value: &str) -> Option<u32> {
    if value.is_empty() || value.len() > 7 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok().filter(|n| (1..=MAX_USES).contains(n))
}

impl Constraints {
    /// Merges one satisfied permit's constraints, keeping the strictest of each.
    pub(super) fn tighten(&mut self, id: &str, c: &PolicyConstraints) {
        if let Some(ttl) = c.ttl {
            if self.ttl.as_ref().is_none_or(|(cur, _)| ttl < *cur) {
                self.ttl = Some((ttl, id.to_string()));
            }
        }
        if let Some(uses) = c.uses {
            if self.uses.as_ref().is_none_or(|(cur, _)| uses < *cur) {
                self.uses = Some((uses, id.to_string()));
            }
        }
        if let Some(rate) = c.rate {
            if self
                .rate
                .as_ref()
                .is_none_or(|(cur, _)| rate.is_stricter_than(cur))
            {
                self.rate = Some((rate, id.to_string()));
            }
        }
        for range in &c.allow_addresses {
            if !self.allow_addresses.contains(range) {
                self.allow_addresses.push(*range);
            }
        }
        if let Some(gate) = &c.approval {
            if self.approval.is_none() {
                self.approval = Some(id.to_string());
            }
            self.gates.push((id.to_string(), gate.clone()));
            if let Some(uses) = c.uses {
                self.gated_uses = Some(self.gated_uses.map_or(uses, |u| u.min(uses)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(effect: Effect, pairs: &[(&str, &str)]) -> Parsed {
        parse(effect, pairs.iter().copied())
    }

    #[test]
    fn parses_all_constraints() {
        let p = parsed(
            Effect::Permit,
            &[
                ("id", "a"),
                ("description", "anything goes here"),
                ("ttl", "15m"),
                ("uses", "20"),
                ("rate", "60/min"),
                ("approval", "required"),
            ],
        );
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        assert_eq!(p.id.as_deref(), Some("a"));
        assert_eq!(p.constraints.ttl, Some(Duration::from_secs(900)));
        assert_eq!(p.constraints.uses, Some(20));
        assert_eq!(p.constraints.rate.map(|r| r.count), Some(60));
        assert_eq!(
            p.constraints.approval.map(|g| (g.rule, g.required)),
            Some((approval_gate::ApproverRule::Any, 1))
        );
    }

    #[test]
    fn rejects_bad_values_and_keys() {
        let bad: [(&str, &str); 9] = [
            ("ttl", "15 minutes"),
            ("ttl", ""),
            ("uses", "0"),
            ("uses", "1000001"),
            ("uses", "-1"),
            ("rate", "fast"),
            ("approval", "yes"),
            ("id", "has space"),
            ("color", "red"),
        ];
        for (k, v) in bad {
            let p = parsed(Effect::Permit, &[(k, v)]);
            assert_eq!(p.errors.len(), 1, "@{k}({v:?}) should fail");
            assert_eq!(p.errors.first().map(|e| e.key.as_str()), Some(k));
        }
    }

    #[test]
    fn egress_annotations_sit_where_they_mean_something() {
        let p = parsed(
            Effect::Permit,
            &[("allow_addresses", "127.0.0.0/8, ::1/128")],
        );
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        assert_eq!(p.constraints.allow_addresses.len(), 2);
        let p = parsed(Effect::Forbid, &[("on_deny", "end_run")]);
        assert!(p.errors.is_empty() && p.constraints.end_run_on_deny);
        for (effect, k, v) in [
            (Effect::Permit, "allow_addresses", "10.0.0.1/8"),
            (Effect::Permit, "allow_addresses", "anywhere"),
            (Effect::Forbid, "allow_addresses", "10.0.0.0/8"),
            (Effect::Permit, "on_deny", "end_run"),
            (Effect::Forbid, "on_deny", "warn"),
        ] {
            let p = parsed(effect, &[(k, v)]);
            assert_eq!(p.errors.len(), 1, "{effect:?} @{k}({v:?}) should fail");
            assert!(!p.constraints.end_run_on_deny && p.constraints.allow_addresses.is_empty());
        }
    }

    #[test]
    fn constraints_are_rejected_on_forbid() {
        let p = parsed(
            Effect::Forbid,
            &[("id", "g"), ("description", "d"), ("ttl", "5m")],
        );
        assert_eq!(p.errors.len(), 1);
        assert!(p.errors.iter().all(|e| e.key == "ttl"));
        assert_eq!(p.id.as_deref(), Some("g"));
    }

    #[test]
    fn approval_gates_and_their_ttl() {
        let p = parsed(
            Effect::Permit,
            &[("approval_ttl", "1h"), ("approval", "2 of group:finance")],
        );
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        let gate = p.constraints.approval.unwrap();
        assert_eq!(gate.required, 2);
        assert_eq!(gate.ttl, Duration::from_secs(3600));
        let alone = parsed(Effect::Permit, &[("approval_ttl", "1h")]);
        assert_eq!(alone.errors[0].message, "@approval_ttl without @approval");
        let bad = parsed(
            Effect::Permit,
            &[("approval", "group:x"), ("approval_ttl", "5s")],
        );
        assert_eq!(bad.errors.len(), 1, "{:?}", bad.errors);
        assert_eq!(bad.errors[0].key, "approval_ttl");
    }

    #[test]
    fn tighten_keeps_the_strictest_and_who_set_it() {
        let a = PolicyConstraints {
            ttl: Some(Duration::from_secs(900)),
            uses: Some(5),
            rate: "60/min".parse().ok(),
            approval: None,
            ..Default::default()
        };
        let b = PolicyConstraints {
            ttl: Some(Duration::from_secs(300)),
            uses: Some(50),
            rate: "10/min".parse().ok(),
            approval: Some(ApprovalGate {
                rule: approval_gate::ApproverRule::Any,
                required: 1,
                ttl: approval_gate::DEFAULT_APPROVAL_TTL,
            }),
            ..Default::default()
        };
        let mut c = Constraints::default();
        c.tighten("a", &a);
        c.tighten("b", &b);
        assert_eq!(c.ttl, Some((Duration::from_secs(300), "b".into())));
        assert_eq!(c.uses, Some((5, "a".into())));
        assert_eq!(c.rate.map(|(r, id)| (r.count, id)), Some((10, "b".into())));
        assert_eq!(c.approval.as_deref(), Some("b"));
    }
}
