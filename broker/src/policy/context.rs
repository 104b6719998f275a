//! Building the Cedar request and the per-request entity slice for one evaluation.
//!
//! Why: evaluation must be fast and must not clone the entity store, so each request
//! gets an [`Entities`] holding only the entities it can reach: the user (with all
//! ancestor groups precomputed as direct parents), the resource, and the action when
//! it belongs to action groups.
//!
//! Invariants: the resource uid is `Tessera::Resource::"<backend>:<path>"` with string
//! attributes `backend`, `kind`, `path`; the shape and types of the request never
//! depend on its values, so checking one sample per action against the schema at load
//! (`assemble.rs`, `schema = Some`) covers every request (`schema = None`); a user
//! unknown to entities.json is a user in no group.

use std::collections::HashSet;

use cedar_policy::{
    Context, Entities, Entity, EntityId, EntityUid, Request, RestrictedExpression, Schema,
};

use super::{PolicyEngine, PolicyRequest};

fn s(v: &str) -> RestrictedExpression {
    RestrictedExpression::new_string(v.to_string())
}

fn record(fields: Vec<(&str, RestrictedExpression)>) -> Result<RestrictedExpression, String> {
    RestrictedExpression::new_record(fields.into_iter().map(|(k, v)| (k.to_string(), v)))
        .map_err(|e| e.to_string())
}

/// A requestable action.
pub(super) struct Action {
    pub uid: EntityUid,
    /// The action entity, only when it is in action groups (needed for `action in`).
    pub entity: Option<Entity>,
}

/// The Cedar request and entities for `req`; errors are messages for a `Deny`.
pub(super) fn build(
    engine: &PolicyEngine,
    req: &PolicyRequest<'_>,
    action: &Action,
    schema: Option<&Schema>,
) -> Result<(Request, Entities), String> {
    let user_uid =
        EntityUid::from_type_name_and_id(engine.user_type.clone(), EntityId::new(req.user));
    let user = match engine.users.get(req.user) {
        Some(user) => user.clone(),
        None => Entity::new_no_attrs(user_uid.clone(), HashSet::new()),
    };

    let resource_uid = EntityUid::from_type_name_and_id(
        engine.resource_type.clone(),
        EntityId::new(format!("{}:{}", req.backend, req.path)),
    );
    let resource = Entity::new(
        resource_uid.clone(),
        [
            ("backend".to_string(), s(req.backend)),
            ("kind".to_string(), s(req.backend_kind)),
            ("path".to_string(), s(req.path)),
        ]
        .into_iter()
        .collect(),
        HashSet::new(),
    )
    .map_err(|e| e.to_string())?;

    let labels = RestrictedExpression::new_set(req.run_labels.iter().map(|l| s(l)));
    let attributes = RestrictedExpression::new_set(
        req.task_attributes
            .iter()
            .map(|(k, v)| RestrictedExpression::new_string(format!("{k}={v}"))),
    );
    let requested_ttl = req
        .requested_ttl
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let context = Context::from_pairs([
        (
            "run".to_string(),
            record(vec![("id", s(req.run_id)), ("labels", labels)])?,
        ),
        (
            "task".to_string(),
            record(vec![
                ("id", s(req.task_id)),
                ("kind", s(req.task_kind)),
                ("attributes", attributes),
            ])?,
        ),
        ("runtime".to_string(), s(req.runtime)),
        (
            "requested_ttl".to_string(),
            RestrictedExpression::new_long(requested_ttl),
        ),
        (
            "now".to_string(),
            RestrictedExpression::new_long(req.now_unix),
        ),
    ])
    .map_err(|e| e.to_string())?;

    let request = Request::new(user_uid, action.uid.clone(), resource_uid, context, schema)
        .map_err(|e| e.to_string())?;
    let action_entity = action.entity.iter().cloned();
    let entities = Entities::from_entities([user, resource].into_iter().chain(action_entity), None)
        .map_err(|e| e.to_string())?;
    Ok((request, entities))
}
