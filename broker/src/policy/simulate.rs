//! A request described by an administrator (a `tessera policy test` case, or
//! `tessera policy explain`), checked the way the broker checks a real one and turned
//! into a [`PolicyRequest`].
//!
//! Why: a simulation is only worth something if it matches what the broker does. A
//! request the broker refuses before policy runs — a malformed resource, an action the
//! backend kind or the schema does not know, a user, task or label outside the run
//! grammar — must be refused here too, with the broker's reason, instead of letting a
//! test pass against a request that can never happen.
//!
//! Invariants: the run and the request pass [`admit`]'s checks, the very functions
//! the broker calls, against the same backend map the broker uses; run ids are
//! random in the broker, so a simulated run has a fixed placeholder id ([`RUN_ID`]).

use std::collections::BTreeMap;
use std::time::Duration;

use super::{admit, PolicyEngine, PolicyRequest};
use crate::config::BackendConfig;
use crate::grammar::quote;

/// The run id every simulated request carries.
pub const RUN_ID: &str = "00000000-0000-0000-0000-000000000000";
/// Task id when none is given.
pub const DEFAULT_TASK_ID: &str = "test-task";
/// Runtime name when none is given.
pub const DEFAULT_RUNTIME: &str = "policy-test";

/// What an administrator says about the request to simulate.
#[derive(Debug, Clone, Default)]
pub struct RequestSpec {
    pub user: String,
    pub action: String,
    /// `BACKEND:PATH`.
    pub resource: String,
    pub task_kind: String,
    pub task_id: String,
    pub task_attributes: BTreeMap<String, String>,
    pub labels: Vec<String>,
    pub runtime: String,
    pub requested_ttl: Option<Duration>,
    pub now_unix: i64,
    /// The request's `arguments` (a JSON object).
    pub arguments: Option<serde_json::Value>,
}

/// A request the broker would hand to policy.
#[derive(Debug, Clone)]
pub struct Simulated {
    pub spec: RequestSpec,
    pub backend: String,
    pub backend_kind: &'static str,
    pub path: String,
}

impl Simulated {
    /// The request as [`PolicyEngine::evaluate`] takes it.
    pub fn request(&self) -> PolicyRequest<'_> {
        let s = &self.spec;
        PolicyRequest {
            user: &s.user,
            action: &s.action,
            backend: &self.backend,
            backend_kind: self.backend_kind,
            path: &self.path,
            run_id: RUN_ID,
            run_labels: &s.labels,
            task_id: &s.task_id,
            task_kind: &s.task_kind,
            task_attributes: &s.task_attributes,
            runtime: &s.runtime,
            requested_ttl: s.requested_ttl,
            now_unix: s.now_unix,
            arguments: s.arguments.as_ref(),
        }
    }
}

/// A backend of `kind` as a simulation without a configuration sees it, as the
/// kind models itself ([`BackendConfig::unconfigured`]): no action allow-list
/// (any action of the kind's grammar), placeholders for what names a downstream,
/// no URL or credentials (nothing is connected to). `None`: this build has no
/// such kind.
pub fn unconfigured_backend(kind: &str) -> Option<BackendConfig> {
    BackendConfig::unconfigured(kind)
}

impl PolicyEngine {
    /// Checks `spec` as the broker checks a run and a capability request, against the
    /// configured `backends` ([`admit`], the broker's own checks). The error names
    /// the field and the broker's error code.
    pub fn simulate(
        &self,
        spec: RequestSpec,
        backends: &BTreeMap<String, BackendConfig>,
    ) -> Result<Simulated, String> {
        let shown = |r: admit::Refused, value: &str| {
            format!("{} {}: {} ({})", r.field, quote(value), r.message, r.code)
        };
        admit::check_run(&admit::RunFields {
            user: &spec.user,
            task_id: &spec.task_id,
            task_kind: &spec.task_kind,
            task_attributes: &spec.task_attributes,
            labels: &spec.labels,
        })
        .map_err(|r| {
            let value = match r.field {
                "user" => spec.user.clone(),
                "task.id" => spec.task_id.clone(),
                "task.kind" => spec.task_kind.clone(),
                "labels" => spec.labels.join(","),
                _ => String::new(),
            };
            shown(r, &value)
        })?;
        let res =
            admit::check_capability(self, backends, &spec.action, &spec.resource).map_err(|r| {
                let value = if r.field == "action" {
                    spec.action.clone()
                } else {
                    spec.resource.clone()
                };
                shown(r, &value)
            })?;
        let (backend, backend_kind, path) =
            (res.backend.to_string(), res.kind, res.path.to_string());
        if let Some(arguments) = &spec.arguments {
            tessera_client::arguments::canonical(arguments)
                .map_err(|e| format!("arguments: {e} (invalid_arguments)"))?;
        }
        let simulated = Simulated {
            spec,
            backend,
            backend_kind,
            path,
        };
        self.check_arguments(&simulated.request())
            .map_err(|e| format!("{e} (invalid_arguments)"))?;
        Ok(simulated)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::tests::SHIPPED;
    use super::super::PolicyDecision;
    use super::*;

    fn backends() -> BTreeMap<String, BackendConfig> {
        BTreeMap::from([(
            "svc-reports".to_string(),
            BackendConfig::Token(crate::backends::token::TokenConfig {
                audience: "a".into(),
                actions: Some(vec!["read".into(), "invoke".into()]),
            }),
        )])
    }

    fn spec(resource: &str, action: &str) -> RequestSpec {
        RequestSpec {
            user: "alice".into(),
            action: action.into(),
            resource: resource.into(),
            task_kind: "summarize".into(),
            task_id: DEFAULT_TASK_ID.into(),
            runtime: DEFAULT_RUNTIME.into(),
            ..RequestSpec::default()
        }
    }

    fn engine() -> PolicyEngine {
        PolicyEngine::load_dir(Path::new(SHIPPED)).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_valid_request_is_evaluated_with_its_backend_kind() {
        let e = engine();
        let sim = e
            .simulate(spec("svc-reports:reports/q1", "read"), &backends())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (sim.backend.as_str(), sim.backend_kind),
            ("svc-reports", "token")
        );
        assert!(matches!(
            e.decide(&sim.request()),
            PolicyDecision::Allow { .. }
        ));
    }

    #[test]
    fn what_the_broker_refuses_before_policy_is_refused() {
        let e = engine();
        let cases = [
            (spec("nope:reports/q1", "read"), "unknown_backend"),
            (spec("svc-reports:../x", "read"), "invalid_resource"),
            (spec("svc-reports", "read"), "invalid_resource"),
            (spec("svc-reports:reports/q1", "write"), "invalid_action"),
            (spec("svc-reports:reports/q1", "re ad"), "invalid_action"),
            (
                RequestSpec {
                    user: "a b".into(),
                    ..spec("svc-reports:x", "read")
                },
                "invalid_user",
            ),
            (
                RequestSpec {
                    labels: vec!["Untrusted".into()],
                    ..spec("svc-reports:x", "read")
                },
                "invalid_labels",
            ),
            (
                RequestSpec {
                    task_kind: String::new(),
                    ..spec("svc-reports:x", "read")
                },
                "invalid_task",
            ),
        ];
        for (s, code) in cases {
            let shown = format!("{s:?}");
            match e.simulate(s, &backends()) {
                Ok(_) => panic!("accepted {shown}"),
                Err(msg) => assert!(msg.contains(code), "{msg} (expected {code})"),
            }
        }
        // Valid for the backend kind, but not declared in the schema.
        let mut b = backends();
        b.insert(
            "svc-other".into(),
            BackendConfig::Token(crate::backends::token::TokenConfig {
                audience: "a".into(),
                actions: None,
            }),
        );
        let err = e
            .simulate(spec("svc-other:x", "frobnicate"), &b)
            .err()
            .unwrap_or_default();
        assert!(err.contains("unknown_action"), "{err}");
    }
}
