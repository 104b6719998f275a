//! Warnings about a loaded policy set: what it grants that its author may not expect.
//!
//! Why: a policy can be valid and still not say what its author meant. A permit without
//! `@ttl` silently gets the server default; an annotation above a server cap silently
//! gets the cap. Neither is an error (the broker stays safe: caps always apply), but an
//! administrator should see both before rolling the policy out (`tessera policy check`).
//!
//! Invariants: lint never fails and never changes the engine; malformed annotations are
//! load errors and never reach it; every warning points at the annotation concerned
//! (or at the policy when the annotation is missing) and says what will happen; the
//! list is sorted by file, line, column.

use super::source::Site;
use super::{PolicyDiagnostic, PolicyEngine, Severity};
use crate::config::Limits;
use crate::grammar::format_duration;

impl PolicyEngine {
    /// Whether permit `id` applies to the egress action `connect` only.
    fn only_connect(&self, id: &str) -> bool {
        use cedar_policy::{ActionConstraint, PolicyId};
        let Some(p) = self.policies.policy(&PolicyId::new(id)) else {
            return false;
        };
        let is_connect = |uid: &cedar_policy::EntityUid| uid.id().unescaped() == "connect";
        match p.action_constraint() {
            ActionConstraint::Eq(uid) => is_connect(&uid),
            ActionConstraint::In(uids) => !uids.is_empty() && uids.iter().all(is_connect),
            _ => false,
        }
    }

    /// Warnings for the permits of this policy set under the server caps `limits`:
    /// a permit without `@ttl`, and `@ttl`, `@uses` or `@rate` beyond
    /// `limits.max_capability_ttl`, `limits.max_uses` or `limits.max_rate`.
    pub fn lint(&self, limits: &Limits) -> Vec<PolicyDiagnostic> {
        let mut out = Vec::new();
        let unknown = Site::default();
        for (id, c) in &self.constraints {
            if c.end_run_on_deny || self.only_connect(id) {
                // A forbid grants nothing; a `connect` permit issues no
                // capability, so @ttl and @uses mean nothing there.
                continue;
            }
            let site = self.sites.get(id).unwrap_or(&unknown);
            let mut warn = |key: &str, message: String, hint: String| {
                let (line, column) = site.of(key);
                out.push(PolicyDiagnostic {
                    severity: Severity::Warning,
                    file: site.file.clone(),
                    line,
                    column,
                    message,
                    hint: Some(hint),
                });
            };
            match c.ttl {
                None => warn(
                    "ttl",
                    format!(
                        "permit \"{id}\" has no @ttl: unless a stricter permit also applies, \
                         its capabilities get the server default \
                         limits.default_capability_ttl = {}",
                        format_duration(limits.default_capability_ttl)
                    ),
                    "say how long its capabilities should live, e.g. @ttl(\"15m\")".into(),
                ),
                Some(ttl) if ttl > limits.max_capability_ttl => {
                    let cap = format_duration(limits.max_capability_ttl);
                    warn(
                        "ttl",
                        format!(
                            "@ttl(\"{}\") of \"{id}\" is above the server cap \
                             limits.max_capability_ttl = {cap}; the cap will bound it to {cap}",
                            format_duration(ttl)
                        ),
                        format!("lower @ttl to at most {cap}, or raise the cap in tessera.toml"),
                    );
                }
                Some(_) => {}
            }
            if let Some(uses) = c.uses.filter(|u| *u > limits.max_uses) {
                let cap = limits.max_uses;
                warn(
                    "uses",
                    format!(
                        "@uses(\"{uses}\") of \"{id}\" is above the server cap \
                         limits.max_uses = {cap}; the cap will bound it to {cap}"
                    ),
                    format!("lower @uses to at most {cap}, or raise the cap in tessera.toml"),
                );
            }
            if let Some(rate) = c.rate.filter(|r| limits.max_rate.is_stricter_than(r)) {
                let cap = limits.max_rate;
                warn(
                    "rate",
                    format!(
                        "@rate(\"{rate}\") of \"{id}\" is faster than the server cap \
                         limits.max_rate = {cap}; the cap will bound it to {cap}"
                    ),
                    format!("lower @rate to at most {cap}, or raise the cap in tessera.toml"),
                );
            }
        }
        out.sort_by(|a, b| {
            (&a.file, a.line, a.column, &a.message).cmp(&(&b.file, b.line, b.column, &b.message))
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::super::tests::{ok, SHIPPED};
    use super::*;

    fn shown(d: &[PolicyDiagnostic]) -> Vec<String> {
        d.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_shipped_policies_have_no_warnings_under_the_default_caps() {
        let e = PolicyEngine::load_dir(Path::new(SHIPPED)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(shown(&e.lint(&Limits::default())), Vec::<String>::new());
    }

    #[test]
    fn a_permit_without_ttl_is_a_warning_at_the_policy() {
        let e = ok(&[(
            "a.cedar",
            "@id(\"has\") @ttl(\"5m\")\npermit (principal, action, resource);\n\n  @id(\"lacks\") @uses(\"3\")\npermit (principal, action, resource);\nforbid (principal, action, resource) when { context.runtime == \"x\" };",
        )]);
        let w = e.lint(&Limits::default());
        assert_eq!(w.len(), 1, "{:?}", shown(&w));
        let w = w.first().map(ToString::to_string).unwrap_or_default();
        assert!(
            w.starts_with("a.cedar:4:3: warning: permit \"lacks\" has no @ttl")
                && w.contains("limits.default_capability_ttl = 5m")
                && w.contains("(hint: "),
            "{w}"
        );
    }

    #[test]
    fn annotations_above_the_caps_point_at_the_annotation() {
        let e = ok(&[(
            "a.cedar",
            "@id(\"big\")\n@ttl(\"2h\")\n@uses(\"500\")\n  @rate(\"20/s\")\npermit (principal, action, resource);",
        )]);
        let limits = Limits {
            max_capability_ttl: Duration::from_secs(3600),
            max_uses: 100,
            max_rate: "10/s".parse().unwrap_or_else(|e| panic!("{e}")),
            ..Limits::default()
        };
        let w = e.lint(&limits);
        let at: Vec<_> = w.iter().map(|d| (d.line, d.column, d.severity)).collect();
        assert_eq!(
            at,
            [
                (2, 1, Severity::Warning),
                (3, 1, Severity::Warning),
                (4, 3, Severity::Warning)
            ],
            "{:?}",
            shown(&w)
        );
        let text = shown(&w).join("\n");
        for part in [
            "@ttl(\"2h\") of \"big\" is above the server cap limits.max_capability_ttl = 1h; the cap will bound it to 1h",
            "@uses(\"500\") of \"big\" is above the server cap limits.max_uses = 100",
            "@rate(\"20/s\") of \"big\" is faster than the server cap limits.max_rate = 10/s",
        ] {
            assert!(text.contains(part), "missing {part:?} in\n{text}");
        }
    }

    #[test]
    fn values_at_the_caps_are_fine() {
        let e = ok(&[(
            "a.cedar",
            "@ttl(\"1h\") @uses(\"100\") @rate(\"600/min\")\npermit (principal, action, resource);",
        )]);
        let limits = Limits {
            max_capability_ttl: Duration::from_secs(3600),
            max_uses: 100,
            max_rate: "10/s".parse().unwrap_or_else(|e| panic!("{e}")),
            ..Limits::default()
        };
        assert_eq!(shown(&e.lint(&limits)), Vec::<String>::new());
    }
}
