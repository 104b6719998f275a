//! Building the Cedar request and the per-request entity slice for one evaluation.
//!
//! Why: evaluation must be fast and must not clone the entity store, so each request
//! gets an [`Entities`] holding only the entities it can reach: the user (with all
//! ancestor groups precomputed as direct parents), the resource, and the action when
//! it belongs to action groups. Slices are cached per policy snapshot
//! ([`EntitiesCache`]); the request, whose context carries the run and the time,
//! is built fresh every time.
//!
//! Invariants: the resource uid is `Tessera::Resource::"<backend>:<path>"` with string
//! attributes `backend`, `kind`, `path`; the shape and types of the request never
//! depend on its values, so checking one sample per action against the schema at load
//! (`assemble.rs`, `schema = Some`) covers every request (`schema = None`); a user
//! unknown to entities.json is a user in no group.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

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
    let request = request(engine, req, action, schema)?;
    Ok((request, entities(engine, req, action)?))
}

fn user_uid(engine: &PolicyEngine, req: &PolicyRequest<'_>) -> EntityUid {
    EntityUid::from_type_name_and_id(engine.user_type.clone(), EntityId::new(req.user))
}

fn resource_uid(engine: &PolicyEngine, req: &PolicyRequest<'_>) -> EntityUid {
    EntityUid::from_type_name_and_id(
        engine.resource_type.clone(),
        EntityId::new(format!("{}:{}", req.backend, req.path)),
    )
}

/// The entity slice for `req`. It depends only on the user, the action and the
/// resource (backend, kind, path), never on the run or the time: see [`EntitiesCache`].
pub(super) fn entities(
    engine: &PolicyEngine,
    req: &PolicyRequest<'_>,
    action: &Action,
) -> Result<Entities, String> {
    entities_with(engine, req, action, HashMap::new())
}

/// The entity slice for `req` with `extra` attributes on the resource (the atoms
/// of a wildcard request's evaluation, `resource_set`).
pub(super) fn entities_with(
    engine: &PolicyEngine,
    req: &PolicyRequest<'_>,
    action: &Action,
    extra: HashMap<String, RestrictedExpression>,
) -> Result<Entities, String> {
    let user = match engine.users.get(req.user) {
        Some(user) => user.clone(),
        None => Entity::new_no_attrs(user_uid(engine, req), HashSet::new()),
    };
    let resource = Entity::new(
        resource_uid(engine, req),
        [
            ("backend".to_string(), s(req.backend)),
            ("kind".to_string(), s(req.backend_kind)),
            ("path".to_string(), s(req.path)),
        ]
        .into_iter()
        .chain(extra)
        .collect(),
        HashSet::new(),
    )
    .map_err(|e| e.to_string())?;
    let action_entity = action.entity.iter().cloned();
    Entities::from_entities([user, resource].into_iter().chain(action_entity), None)
        .map_err(|e| e.to_string())
}

/// The Cedar request (principal, action, resource, context) for `req`.
pub(super) fn request(
    engine: &PolicyEngine,
    req: &PolicyRequest<'_>,
    action: &Action,
    schema: Option<&Schema>,
) -> Result<Request, String> {
    let labels = RestrictedExpression::new_set(req.run_labels.iter().map(|l| s(l)));
    let attributes = RestrictedExpression::new_set(
        req.task_attributes
            .iter()
            .map(|(k, v)| RestrictedExpression::new_string(format!("{k}={v}"))),
    );
    let requested_ttl = requested_ttl(req);
    if let Some(arguments) = req.arguments {
        return with_arguments(engine, req, action, requested_ttl, arguments);
    }
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

    Request::new(
        user_uid(engine, req),
        action.uid.clone(),
        resource_uid(engine, req),
        context,
        schema,
    )
    .map_err(|e| e.to_string())
}

/// `context.requested_ttl`: whole seconds, 0 when none was asked.
pub(super) fn requested_ttl(req: &PolicyRequest<'_>) -> i64 {
    req.requested_ttl
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The request with `context.arguments`: the whole context is read as Cedar JSON
/// typed by the schema's context for this action, so the arguments take the
/// types the administrator declared (an action that declares no `arguments`
/// takes none) and the request is validated against the schema whatever the
/// values. Cedar's JSON escapes (`__entity`, `__extn`, `__expr`) are refused
/// in arguments before that: an argument is data, never an entity reference.
fn with_arguments(
    engine: &PolicyEngine,
    req: &PolicyRequest<'_>,
    action: &Action,
    requested_ttl: i64,
    arguments: &serde_json::Value,
) -> Result<Request, String> {
    if let Some(key) = escape_key(arguments) {
        return Err(format!("arguments: the key {key:?} is reserved"));
    }
    let attributes: Vec<String> = req
        .task_attributes
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let json = serde_json::json!({
        "run": { "id": req.run_id, "labels": req.run_labels },
        "task": { "id": req.task_id, "kind": req.task_kind, "attributes": attributes },
        "runtime": req.runtime,
        "requested_ttl": requested_ttl,
        "now": req.now_unix,
        "arguments": arguments,
    });
    let context = Context::from_json_value(json, Some((&engine.schema, &action.uid)))
        .map_err(|e| format!("arguments: {e}"))?;
    Request::new(
        user_uid(engine, req),
        action.uid.clone(),
        resource_uid(engine, req),
        context,
        Some(&engine.schema),
    )
    .map_err(|e| format!("arguments: {e}"))
}

/// A key of `v`, at any depth, that Cedar's JSON format reads as an escape.
fn escape_key(v: &serde_json::Value) -> Option<&str> {
    match v {
        serde_json::Value::Object(m) => m.iter().find_map(|(k, v)| {
            if matches!(k.as_str(), "__entity" | "__extn" | "__expr") {
                Some(k.as_str())
            } else {
                escape_key(v)
            }
        }),
        serde_json::Value::Array(items) => items.iter().find_map(escape_key),
        _ => None,
    }
}

/// Most entity slices one policy snapshot keeps; when full it starts over.
pub(super) const ENTITIES_CACHE_MAX: usize = 4096;

/// Entity slices by (user, action, backend, kind, path), for one policy snapshot.
///
/// Why: building a slice (entities, then Cedar's transitive closure over them)
/// cost as much as the authorisation itself, and agents ask for the same
/// resources again and again. A hit is exact: the slice is a function of the key
/// and of the snapshot's entities.json, and a reload builds a new snapshot with
/// an empty cache. Bounded, so a stream of distinct resources costs memory
/// proportional to [`ENTITIES_CACHE_MAX`] at most.
#[derive(Default)]
pub(super) struct EntitiesCache {
    slices: Mutex<HashMap<String, Arc<Entities>>>,
}

impl EntitiesCache {
    /// The slice for `req`, built on a miss.
    pub(super) fn get(
        &self,
        engine: &PolicyEngine,
        req: &PolicyRequest<'_>,
        action: &Action,
    ) -> Result<Arc<Entities>, String> {
        // Length-prefixed parts: no two different keys share a string.
        let parts = [
            req.user,
            req.action,
            req.backend,
            req.backend_kind,
            req.path,
        ];
        let mut key = String::with_capacity(parts.iter().map(|p| p.len() + 8).sum());
        for part in parts {
            // Writing to a String cannot fail.
            let _ = write!(key, "{}:{part}", part.len());
        }
        if let Some(hit) = self.lock().get(&key) {
            return Ok(hit.clone());
        }
        let built = Arc::new(entities(engine, req, action)?);
        let mut slices = self.lock();
        if slices.len() >= ENTITIES_CACHE_MAX {
            slices.clear();
        }
        slices.insert(key, built.clone());
        Ok(built)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Entities>>> {
        // A panic while holding the lock cannot leave a half-built entry: inserts
        // are single calls. So a poisoned map is still a valid cache.
        self.slices
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
