//! Loading a policy directory into a [`PolicyEngine`] snapshot.
//!
//! Why: a bad edit must never open or close the broker by accident, so loading either
//! produces a fully checked snapshot or a list of located diagnostics and nothing else.
//!
//! Invariants: each `.cedar` file is parsed on its own so error offsets are relative to
//! that file; policy ids are `@id` or `<file stem>#<index>` and unique across files;
//! templates are rejected; policies are validated against the schema in strict mode;
//! the transitive closure of user groups is computed once here, never per request.

use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;

use cedar_policy::{Entities, PolicyId, PolicySet, Schema, ValidationMode, Validator};
use miette::Diagnostic;

use super::source::{annotation_offsets, label_offset, line_col, locate_in_order, Site};
use super::{annotations, assemble, PolicyDiagnostic, PolicyEngine, PolicyLoadError, Severity};

/// A named source text.
pub(super) struct Named<'a> {
    name: String,
    text: &'a str,
}

impl<'a> Named<'a> {
    pub(super) fn new(name: impl Into<String>, text: &'a str) -> Self {
        Named {
            name: name.into(),
            text,
        }
    }

    pub(super) fn diag(
        &self,
        offset: Option<usize>,
        message: String,
        hint: Option<String>,
    ) -> PolicyDiagnostic {
        let (line, column) = offset.map_or((0, 0), |o| line_col(self.text, o));
        PolicyDiagnostic {
            severity: Severity::Error,
            file: self.name.clone(),
            line,
            column,
            message,
            hint,
        }
    }

    fn cedar_diag(&self, d: &dyn Diagnostic, fallback: Option<usize>) -> PolicyDiagnostic {
        let hint = d.help().map(|h| h.to_string());
        let mut message = d.to_string();
        // Wrapping errors (e.g. entity deserialization) keep the useful part in sources.
        let mut cause = std::error::Error::source(d);
        while let Some(c) = cause {
            let text = c.to_string();
            if !message.contains(&text) {
                message = format!("{message}: {text}");
            }
            cause = c.source();
        }
        self.diag(label_offset(d).or(fallback), message, hint)
    }
}

pub(super) fn one(d: PolicyDiagnostic) -> PolicyLoadError {
    PolicyLoadError {
        diagnostics: vec![d],
    }
}

/// Where each policy came from, for diagnostics found after merging.
struct Origin {
    file: usize,
    offset: Option<usize>,
}

pub(super) fn build(
    schema_src: &Named<'_>,
    files: &[(String, String)],
    entities_src: &Named<'_>,
) -> Result<PolicyEngine, PolicyLoadError> {
    let mut diags = Vec::new();
    let schema = match Schema::from_cedarschema_str(schema_src.text) {
        Ok((schema, _warnings)) => Some(schema),
        Err(e) => {
            diags.push(schema_src.cedar_diag(&e, None));
            None
        }
    };

    let sources: Vec<Named<'_>> = files
        .iter()
        .map(|(n, t)| Named::new(n.clone(), t))
        .collect();
    let mut merged = PolicySet::new();
    let mut constraints = HashMap::new();
    let mut origins: HashMap<String, Origin> = HashMap::new();
    let mut sites: HashMap<String, Site> = HashMap::new();
    for (file_idx, src) in sources.iter().enumerate() {
        let set = match PolicySet::from_str(src.text) {
            Ok(set) => set,
            Err(errs) => {
                diags.extend(errs.iter().map(|e| src.cedar_diag(e, None)));
                continue;
            }
        };
        // Cedar names policies and templates "policy<N>" in source order.
        let mut items: Vec<(usize, String, Option<&cedar_policy::Policy>)> = set
            .policies()
            .map(|p| (index_of(p.id()), p.to_string(), Some(p)))
            .chain(
                set.templates()
                    .map(|t| (index_of(t.id()), t.to_string(), None)),
            )
            .collect();
        items.sort_by_key(|(n, _, _)| *n);
        let offsets = locate_in_order(src.text, items.iter().map(|(_, t, _)| t.as_str()));
        let stem = Path::new(&src.name)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        for ((n, text, policy), offset) in items.iter().zip(offsets) {
            let Some(policy) = policy else {
                diags.push(src.diag(
                    offset,
                    "templates are not supported".into(),
                    Some("write a static policy, without ?principal or ?resource slots".into()),
                ));
                continue;
            };
            let parsed = annotations::parse(policy.effect(), policy.annotations());
            let ann_offsets = annotation_offsets(text);
            let mut located: Vec<_> = parsed
                .errors
                .into_iter()
                .map(|err| {
                    let at = ann_offsets.iter().find(|(k, _)| *k == err.key);
                    (offset.map(|o| o + at.map_or(0, |(_, a)| *a)), err)
                })
                .collect();
            located.sort_by_key(|(pos, _)| *pos);
            for (pos, err) in located {
                diags.push(src.diag(pos, err.message, err.hint));
            }
            let id = parsed.id.unwrap_or_else(|| format!("{stem}#{n}"));
            if let Some(prev) = origins.get(&id) {
                let prev_file = sources.get(prev.file).map_or("?", |s| s.name.as_str());
                diags.push(src.diag(
                    offset,
                    format!("duplicate policy id \"{id}\" (also in {prev_file})"),
                    Some("policy ids must be unique across all files".into()),
                ));
                continue;
            }
            if let Err(e) = merged.add(policy.new_id(PolicyId::new(&id))) {
                diags.push(src.diag(offset, e.to_string(), None));
                continue;
            }
            if policy.effect() == cedar_policy::Effect::Permit || parsed.constraints.end_run_on_deny
            {
                constraints.insert(id.clone(), parsed.constraints);
            }
            sites.insert(id.clone(), Site::new(&src.name, src.text, offset, text));
            origins.insert(
                id,
                Origin {
                    file: file_idx,
                    offset,
                },
            );
        }
    }

    let (Some(schema), true) = (schema, diags.is_empty()) else {
        return Err(PolicyLoadError { diagnostics: diags });
    };
    let validation = Validator::new(schema.clone()).validate(&merged, ValidationMode::Strict);
    let mut invalid: Vec<PolicyDiagnostic> = validation
        .validation_errors()
        .map(|err| {
            let origin = origins.get(AsRef::<str>::as_ref(err.policy_id()));
            let src = origin
                .and_then(|o| sources.get(o.file))
                .unwrap_or(schema_src);
            src.cedar_diag(err, origin.and_then(|o| o.offset))
        })
        .collect();
    // Cedar checks each policy once per applicable action, in no fixed order: report
    // each location once, deterministically.
    invalid.sort_by(|a, b| {
        (&a.file, a.line, a.column, &a.message).cmp(&(&b.file, b.line, b.column, &b.message))
    });
    invalid.dedup_by(|a, b| (&a.file, a.line, a.column) == (&b.file, b.line, b.column));
    diags.extend(invalid);

    let store = Entities::from_json_str(entities_src.text, Some(&schema))
        .map_err(|e| diags.push(entities_src.cedar_diag(&e, None)))
        .ok();
    match store {
        Some(store) if diags.is_empty() => assemble::engine(schema, merged, constraints, &store)
            .map(|engine| PolicyEngine { sites, ..engine })
            .map_err(|messages| PolicyLoadError {
                diagnostics: messages
                    .into_iter()
                    .map(|m| schema_src.diag(None, m, None))
                    .collect(),
            }),
        _ => Err(PolicyLoadError { diagnostics: diags }),
    }
}

/// N of a Cedar-generated "policy<N>" id (source order within one file).
fn index_of(id: &PolicyId) -> usize {
    id.to_string()
        .strip_prefix("policy")
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX)
}
