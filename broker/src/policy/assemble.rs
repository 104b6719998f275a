//! Assembling a [`PolicyEngine`] snapshot from a validated policy set, the schema and
//! the entity store: everything evaluation needs is precomputed here, once.
//!
//! Why: evaluation must not walk or clone the entity store, nor re-validate what cannot
//! change between requests.
//!
//! Invariants: each user maps to an entity whose parents are ALL its ancestor groups
//! (the transitive closure from entities.json); every requestable action has been
//! checked once, with a sample request, to accept a `User` principal, a `Resource`
//! resource and the context the broker builds, so per-request schema validation is
//! unnecessary (the context's shape and types never depend on the request); action
//! groups that cannot be requested are not requestable, and any other action that
//! fails the check is a load error.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::str::FromStr;

use cedar_policy::{Authorizer, Entities, Entity, EntityTypeName, PolicySet, Schema};

use super::annotations::PolicyConstraints;
use super::context::{self, Action};
use super::decision_cache;
use super::{PolicyEngine, PolicyRequest};

pub(super) fn engine(
    schema: Schema,
    policies: PolicySet,
    constraints: HashMap<String, PolicyConstraints>,
    store: &Entities,
) -> Result<PolicyEngine, Vec<String>> {
    let ty = |name: &str| EntityTypeName::from_str(name).map_err(|e| vec![e.to_string()]);
    let (user_type, resource_type, action_type) = (
        ty("Tessera::User")?,
        ty("Tessera::Resource")?,
        ty("Tessera::Action")?,
    );

    let users = store
        .iter()
        .filter(|e| e.uid().type_name() == &user_type)
        .map(|e| {
            let uid = e.uid();
            let groups: HashSet<_> = store
                .ancestors(&uid)
                .map(|a| a.cloned().collect())
                .unwrap_or_default();
            let name = uid.id().unescaped().to_string();
            (name, Entity::new_no_attrs(uid, groups))
        })
        .collect();

    let action_store = schema.action_entities().map_err(|e| vec![e.to_string()])?;
    let mut groups = HashSet::new();
    let mut actions = HashMap::new();
    for e in action_store.iter() {
        let uid = e.uid();
        let ancestors: HashSet<_> = action_store
            .ancestors(&uid)
            .map(|a| a.cloned().collect())
            .unwrap_or_default();
        groups.extend(ancestors.iter().cloned());
        if uid.type_name() == &action_type {
            // Only an action in an action group needs its entity at evaluation
            // (for `action in ...`); leaving it out otherwise saves a clone and
            // a transitive-closure pass per request.
            let entity = (!ancestors.is_empty()).then(|| e.clone());
            actions.insert(uid.id().unescaped().to_string(), Action { uid, entity });
        }
    }

    let sets = super::resource_set::SetEvaluator::build(&policies).map_err(|e| vec![e])?;
    let reads = decision_cache::analyse(&policies, &sets.variants);
    let mut engine = PolicyEngine {
        sets,
        schema,
        policies,
        authorizer: Authorizer::new(),
        constraints,
        sites: HashMap::new(),
        users,
        actions,
        user_type,
        resource_type,
        entities: context::EntitiesCache::default(),
        decisions: decision_cache::DecisionCache::new(reads),
    };
    let mut errors = Vec::new();
    let mut not_requestable = Vec::new();
    // Non-empty sets, so the sample exercises the element types.
    let labels = vec!["sample".to_string()];
    let attributes = BTreeMap::from([("key".to_string(), "value".to_string())]);
    for (name, action) in &engine.actions {
        let sample = sample_request(name, &labels, &attributes);
        if let Err(e) = context::build(&engine, &sample, action, Some(&engine.schema)) {
            if groups.contains(&action.uid) {
                not_requestable.push(name.clone());
            } else {
                errors.push(format!(
                    "action \"{name}\" does not accept the broker's requests \
                     (principal Tessera::User, resource Tessera::Resource, context \
                     Tessera::RequestContext): {e}"
                ));
            }
        }
    }
    for name in not_requestable {
        engine.actions.remove(&name);
    }
    if errors.is_empty() {
        Ok(engine)
    } else {
        errors.sort();
        Err(errors)
    }
}

fn sample_request<'a>(
    action: &'a str,
    labels: &'a [String],
    attributes: &'a BTreeMap<String, String>,
) -> PolicyRequest<'a> {
    PolicyRequest {
        user: "",
        action,
        backend: "",
        backend_kind: "",
        path: "",
        run_id: "",
        run_labels: labels,
        task_id: "",
        task_kind: "",
        task_attributes: attributes,
        runtime: "",
        requested_ttl: None,
        now_unix: 0,
        arguments: None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{PolicyDecision, PolicyEngine};
    use super::*;

    const CONTEXT: &str = "type RequestContext = {
        run: { id: String, labels: Set<String> },
        task: { id: String, kind: String, attributes: Set<String> },
        runtime: String, requested_ttl: Long, now: Long };";

    fn schema(context: &str, actions: &str) -> String {
        format!(
            "namespace Tessera {{ entity Group in [Group]; entity User in [Group];
             entity Resource {{ backend: String, kind: String, path: String }};
             {context} {actions} }}"
        )
    }

    fn files(policy: &str) -> Vec<(String, String)> {
        vec![("a.cedar".to_string(), policy.to_string())]
    }

    #[test]
    fn action_groups_work_and_are_not_requestable() {
        let actions = r#"action "readonly";
            action "read" in ["readonly"]
              appliesTo { principal: [User], resource: [Resource], context: RequestContext };"#;
        let policy = r#"permit (principal, action in Tessera::Action::"readonly", resource);"#;
        let engine = PolicyEngine::from_sources(&schema(CONTEXT, actions), &files(policy), "[]")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(engine.is_known_action("read"));
        assert!(!engine.is_known_action("readonly"));
        let attrs = BTreeMap::new();
        let req = PolicyRequest {
            user: "u",
            action: "read",
            backend: "b",
            backend_kind: "k",
            path: "p",
            run_id: "r",
            run_labels: &[],
            task_id: "t",
            task_kind: "k",
            task_attributes: &attrs,
            runtime: "rt",
            requested_ttl: None,
            now_unix: 0,
            arguments: None,
        };
        assert!(matches!(engine.decide(&req), PolicyDecision::Allow { .. }));
    }

    #[test]
    fn a_context_the_broker_cannot_supply_is_a_load_error() {
        let context = CONTEXT.replace("runtime: String", "runtime: Long");
        let actions = r#"action "read"
              appliesTo { principal: [User], resource: [Resource], context: RequestContext };"#;
        let policy = r#"permit (principal, action, resource) when { context.runtime > 0 };"#;
        let err = PolicyEngine::from_sources(&schema(&context, actions), &files(policy), "[]")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.starts_with("schema.cedarschema:0:0: error: action \"read\""),
            "{err}"
        );
    }
}
