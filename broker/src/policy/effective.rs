//! What a capability actually gets: the strictest permit annotations, filled in with
//! the server defaults and bounded by the server caps and the caller's requested ttl.
//!
//! Why: [`Constraints`] says what the satisfied permits asked for; an administrator
//! testing or explaining a policy needs the values a capability would carry and which
//! bound decided each one (a permit's annotation, a server default, a server cap, or
//! the caller's own request).
//!
//! Invariants: this is the one rule; the broker's issuance (`api/capabilities.rs`)
//! calls it too:
//! ttl = min(@ttl or limits.default_capability_ttl, limits.max_capability_ttl,
//! requested ttl); uses = min(@uses or limits.default_uses, limits.max_uses); the rate
//! is the stricter of @rate and limits.max_rate (the server cap is charged per run on
//! every request, a policy's @rate per run and policy). On a tie the earlier bound in
//! that order is named. Not modelled here: a capability never outlives its run.

use std::time::Duration;

use super::Constraints;
use crate::config::Limits;
use crate::grammar::Rate;

/// Which bound decided an effective value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The annotation of this satisfied permit (the strictest of them).
    Policy(String),
    /// No satisfied permit carries the annotation: the server default applies.
    ServerDefault,
    /// The server cap is stricter than what the permits asked for.
    ServerCap,
    /// The caller asked for less (ttl only).
    Requested,
}

/// One effective value, what decided it, and what the permits asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Bounded<T> {
    pub value: T,
    pub source: Source,
    /// The strictest annotation among the satisfied permits and its policy id.
    pub declared: Option<(T, String)>,
    /// The server cap was below the annotation (or the default), whatever decided
    /// the final value.
    pub capped: bool,
}

/// The constraints a capability would be issued with.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    pub ttl: Bounded<Duration>,
    pub uses: Bounded<u32>,
    pub rate: Bounded<Rate>,
    /// Id of a satisfied permit with `@approval`.
    pub approval: Option<String>,
    /// Who must approve (`2 of group:finance; user:bob`), with an approval.
    pub approvers: Option<String>,
}

impl Effective {
    /// Applies the server defaults and caps in `limits`, and the caller's requested
    /// ttl, to the constraints of the satisfied permits.
    pub fn new(c: &Constraints, limits: &Limits, requested_ttl: Option<Duration>) -> Effective {
        let mut ttl = declared_or_default(&c.ttl, limits.default_capability_ttl);
        ttl.capped = tighten(&mut ttl, limits.max_capability_ttl, Source::ServerCap);
        if let Some(asked) = requested_ttl {
            tighten(&mut ttl, asked, Source::Requested);
        }
        let mut uses = declared_or_default(&c.uses, limits.default_uses);
        uses.capped = tighten(&mut uses, limits.max_uses, Source::ServerCap);
        let rate = match &c.rate {
            Some((r, id)) if !limits.max_rate.is_stricter_than(r) => Bounded {
                value: *r,
                source: Source::Policy(id.clone()),
                declared: c.rate.clone(),
                capped: false,
            },
            _ => Bounded {
                value: limits.max_rate,
                source: Source::ServerCap,
                declared: c.rate.clone(),
                capped: c.rate.is_some(),
            },
        };
        Effective {
            ttl,
            uses,
            rate,
            approval: c.approval.clone(),
            approvers: (!c.gates.is_empty()).then(|| c.approvers()),
        }
    }
}

fn declared_or_default<T: Copy>(declared: &Option<(T, String)>, default: T) -> Bounded<T> {
    match declared {
        Some((value, id)) => Bounded {
            value: *value,
            source: Source::Policy(id.clone()),
            declared: declared.clone(),
            capped: false,
        },
        None => Bounded {
            value: default,
            source: Source::ServerDefault,
            declared: None,
            capped: false,
        },
    }
}

/// Lowers `b` to `bound` when that is stricter; true when it was.
fn tighten<T: Copy + PartialOrd>(b: &mut Bounded<T>, bound: T, source: Source) -> bool {
    let stricter = bound < b.value;
    if stricter {
        b.value = bound;
        b.source = source;
    }
    stricter
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    fn rate(s: &str) -> Rate {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn limits() -> Limits {
        Limits {
            default_capability_ttl: 5 * MIN,
            max_capability_ttl: 60 * MIN,
            default_uses: 10,
            max_uses: 100,
            max_rate: rate("100/min"),
            ..Limits::default()
        }
    }

    #[test]
    fn annotations_apply_when_within_the_caps() {
        let c = Constraints {
            ttl: Some((15 * MIN, "a".into())),
            uses: Some((20, "b".into())),
            rate: Some((rate("60/min"), "c".into())),
            approval: Some("d".into()),
            gates: vec![],
            gated_uses: None,
            allow_addresses: vec![],
        };
        let e = Effective::new(&c, &limits(), None);
        assert_eq!(
            (e.ttl.value, e.ttl.source),
            (15 * MIN, Source::Policy("a".into()))
        );
        assert_eq!(
            (e.uses.value, e.uses.source),
            (20, Source::Policy("b".into()))
        );
        assert_eq!(
            (e.rate.value, e.rate.source),
            (rate("60/min"), Source::Policy("c".into()))
        );
        assert_eq!(e.approval.as_deref(), Some("d"));
    }

    #[test]
    fn defaults_fill_in_and_caps_bound() {
        let e = Effective::new(&Constraints::default(), &limits(), None);
        assert_eq!(
            (e.ttl.value, &e.ttl.source),
            (5 * MIN, &Source::ServerDefault)
        );
        assert_eq!((e.uses.value, &e.uses.source), (10, &Source::ServerDefault));
        assert_eq!(
            (e.rate.value, &e.rate.source),
            (rate("100/min"), &Source::ServerCap)
        );
        assert_eq!(e.ttl.declared, None);

        let c = Constraints {
            ttl: Some((120 * MIN, "long".into())),
            uses: Some((1000, "many".into())),
            rate: Some((rate("10/s"), "fast".into())),
            approval: None,
            gates: vec![],
            gated_uses: None,
            allow_addresses: vec![],
        };
        let e = Effective::new(&c, &limits(), None);
        assert_eq!((e.ttl.value, &e.ttl.source), (60 * MIN, &Source::ServerCap));
        assert_eq!(e.ttl.declared, Some((120 * MIN, "long".into())));
        assert!(e.ttl.capped && e.uses.capped && e.rate.capped);
        // Capped, then a shorter request: the request decides, the cap is remembered.
        let e = Effective::new(&c, &limits(), Some(30 * MIN));
        assert_eq!(
            (e.ttl.value, &e.ttl.source, e.ttl.capped),
            (30 * MIN, &Source::Requested, true)
        );
        assert_eq!((e.uses.value, &e.uses.source), (100, &Source::ServerCap));
        assert_eq!(
            (e.rate.value, &e.rate.source),
            (rate("100/min"), &Source::ServerCap)
        );
        assert_eq!(e.rate.declared.map(|(_, id)| id), Some("fast".into()));
    }

    #[test]
    fn a_shorter_requested_ttl_wins_and_a_longer_one_does_not() {
        let c = Constraints {
            ttl: Some((15 * MIN, "a".into())),
            ..Constraints::default()
        };
        let e = Effective::new(&c, &limits(), Some(2 * MIN));
        assert_eq!((e.ttl.value, e.ttl.source), (2 * MIN, Source::Requested));
        let e = Effective::new(&c, &limits(), Some(30 * MIN));
        assert_eq!(
            (e.ttl.value, e.ttl.source),
            (15 * MIN, Source::Policy("a".into()))
        );
        // A tie names the earlier bound: the policy.
        let e = Effective::new(&c, &limits(), Some(15 * MIN));
        assert_eq!(e.ttl.source, Source::Policy("a".into()));
    }
}
