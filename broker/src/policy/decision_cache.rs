//! An exact cache of policy decisions, per policy snapshot.
//!
//! Why: Cedar evaluation is about 10–27 µs of a ~130 µs capability issuance and
//! allocates heavily (the request, its context record, the evaluator's values),
//! while agents ask for the same capability again and again: the same user,
//! action and resource, from the same run and task.
//!
//! How: when a [`PolicyEngine`](super::PolicyEngine) is built, every policy is
//! analysed statically, in its JSON form (Cedar's EST), together with its
//! wildcard variant ([`super::resource_set`]), to find which fields of `context`
//! the set can read ([`ReadSet`]). A decision is then cached under a key made of
//! the user, the action, the backend, its kind, the path and the values of
//! exactly those fields; whatever else the decision depends on (groups, action
//! groups, constraints from annotations) belongs to the snapshot, which owns
//! the cache.
//!
//! Invariants:
//! - a hit returns what an uncached evaluation of the same request against the
//!   same snapshot returns: the key holds every input the decision reads;
//! - the analysis is conservative: `context` used in any way other than a chain
//!   of attribute accesses (`context.run.labels`) or a `has` test on one
//!   (`context has run`, `context.run has labels`) counts as reading all of
//!   `context`; a chain that stops at a record (`context.run`) or names a field
//!   this module does not know reads everything under it;
//! - a set that can read `context.now` (the time: no two requests share it) has
//!   the cache off, as has a set with templates or a policy that cannot be
//!   read as JSON; the engine says why ([`DecisionCache::disabled`]);
//! - requests with `arguments` are never cached (they are rare and their
//!   canonical form is the schema's business);
//! - a reload builds a new engine, hence a new, empty cache: a decision never
//!   outlives the policy set that made it;
//! - at most [`DECISIONS_MAX`] decisions, with keys of [`KEY_BYTES_MAX`] bytes
//!   in all, are kept: two generations of half that each, the older dropped
//!   whole when the newer fills, so hot entries survive a stream of one-off
//!   requests. (A key grows with the run's labels and task attributes, which
//!   the broker bounds: [`super::admit`].)

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cedar_policy::PolicySet;
use serde_json::{Map, Value};

use super::{PolicyDecision, PolicyRequest};

/// Most decisions one policy snapshot keeps (both generations together).
pub(super) const DECISIONS_MAX: usize = 4096;
/// Most bytes of keys one policy snapshot keeps (both generations together).
/// Typical keys are a few hundred bytes; this stops runs with the largest
/// labels and attributes the broker admits from making the cache large.
pub(super) const KEY_BYTES_MAX: usize = 4 << 20;

/// The fields of the request context the broker builds (`context.rs`), as bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ReadSet(u16);

impl ReadSet {
    pub(super) const NONE: ReadSet = ReadSet(0);
    pub(super) const RUN_ID: ReadSet = ReadSet(1);
    pub(super) const RUN_LABELS: ReadSet = ReadSet(1 << 1);
    pub(super) const TASK_ID: ReadSet = ReadSet(1 << 2);
    pub(super) const TASK_KIND: ReadSet = ReadSet(1 << 3);
    pub(super) const TASK_ATTRIBUTES: ReadSet = ReadSet(1 << 4);
    pub(super) const RUNTIME: ReadSet = ReadSet(1 << 5);
    pub(super) const REQUESTED_TTL: ReadSet = ReadSet(1 << 6);
    pub(super) const NOW: ReadSet = ReadSet(1 << 7);
    pub(super) const ARGUMENTS: ReadSet = ReadSet(1 << 8);
    pub(super) const RUN: ReadSet = ReadSet(Self::RUN_ID.0 | Self::RUN_LABELS.0);
    pub(super) const TASK: ReadSet =
        ReadSet(Self::TASK_ID.0 | Self::TASK_KIND.0 | Self::TASK_ATTRIBUTES.0);
    /// Everything `context` holds.
    pub(super) const ALL: ReadSet = ReadSet(
        Self::RUN.0
            | Self::TASK.0
            | Self::RUNTIME.0
            | Self::REQUESTED_TTL.0
            | Self::NOW.0
            | Self::ARGUMENTS.0,
    );

    /// The leaf fields, in key order, with their names.
    const LEAVES: [(ReadSet, &'static str); 9] = [
        (Self::RUN_ID, "run.id"),
        (Self::RUN_LABELS, "run.labels"),
        (Self::TASK_ID, "task.id"),
        (Self::TASK_KIND, "task.kind"),
        (Self::TASK_ATTRIBUTES, "task.attributes"),
        (Self::RUNTIME, "runtime"),
        (Self::REQUESTED_TTL, "requested_ttl"),
        (Self::NOW, "now"),
        (Self::ARGUMENTS, "arguments"),
    ];

    pub(super) fn contains(self, other: ReadSet) -> bool {
        self.0 & other.0 == other.0
    }

    fn add(&mut self, other: ReadSet) {
        self.0 |= other.0;
    }

    pub(super) fn without(self, other: ReadSet) -> ReadSet {
        ReadSet(self.0 & !other.0)
    }

    /// What reading `context.<path>` reads. A path that stops at a record reads
    /// all of it; a name not known here reads all of its parent.
    fn of_path(path: &[&str]) -> ReadSet {
        match path {
            [] => Self::ALL,
            ["run"] => Self::RUN,
            ["run", "id", ..] => Self::RUN_ID,
            ["run", "labels", ..] => Self::RUN_LABELS,
            ["run", ..] => Self::RUN,
            ["task"] => Self::TASK,
            ["task", "id", ..] => Self::TASK_ID,
            ["task", "kind", ..] => Self::TASK_KIND,
            ["task", "attributes", ..] => Self::TASK_ATTRIBUTES,
            ["task", ..] => Self::TASK,
            ["runtime", ..] => Self::RUNTIME,
            ["requested_ttl", ..] => Self::REQUESTED_TTL,
            ["now", ..] => Self::NOW,
            ["arguments", ..] => Self::ARGUMENTS,
            [_, ..] => Self::ALL,
        }
    }
}

impl fmt::Display for ReadSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Self::LEAVES
            .iter()
            .filter(|(bit, _)| self.contains(*bit))
            .map(|(_, name)| *name)
            .collect();
        if names.is_empty() {
            f.write_str("nothing")
        } else {
            f.write_str(&names.join(", "))
        }
    }
}

/// What the policy `est` (one policy's JSON form) can read of `context`.
/// Annotations are not evaluated and are skipped; everything else is walked.
pub(super) fn policy_reads(est: &Value) -> ReadSet {
    let mut reads = ReadSet::NONE;
    match est {
        Value::Object(map) => {
            for (key, child) in map {
                if key != "annotations" {
                    walk(child, &mut reads);
                }
            }
        }
        other => walk(other, &mut reads),
    }
    reads
}

/// Adds to `reads` what `v` reads of `context`. Every object and array is
/// walked as if it were an expression, literals and record literals included:
/// taking data for an expression can only add reads, never lose one.
fn walk(v: &Value, reads: &mut ReadSet) {
    match v {
        Value::Object(map) => {
            if let Some(path) = context_access(map) {
                reads.add(ReadSet::of_path(&path));
            } else if is_context(map) {
                // `context` as a value, not through an access we understand.
                reads.add(ReadSet::ALL);
            } else {
                map.values().for_each(|child| walk(child, reads));
            }
        }
        Value::Array(items) => items.iter().for_each(|child| walk(child, reads)),
        _ => {}
    }
}

/// `{"Var": "context"}`.
fn is_context(map: &Map<String, Value>) -> bool {
    map.len() == 1 && map.get("Var").and_then(Value::as_str) == Some("context")
}

/// The single `(key, content)` of an expression node whose content is an object
/// with exactly the keys `left` and `attr`.
fn left_attr(map: &Map<String, Value>) -> Option<(&str, &Value, &Value)> {
    if map.len() != 1 {
        return None;
    }
    let (op, inner) = map.iter().next()?;
    let inner = inner.as_object()?;
    if inner.len() != 2 {
        return None;
    }
    Some((op.as_str(), inner.get("left")?, inner.get("attr")?))
}

/// The path `context.<path>` that `v` is, when it is exactly a chain of
/// attribute accesses on `context`.
fn context_path(v: &Value) -> Option<Vec<&str>> {
    let map = v.as_object()?;
    if is_context(map) {
        return Some(Vec::new());
    }
    match left_attr(map)? {
        (".", left, Value::String(attr)) => {
            let mut path = context_path(left)?;
            path.push(attr);
            Some(path)
        }
        _ => None,
    }
}

/// The path read by `map` when it is an attribute access or a `has` test
/// (`has` may name a path: `context has run.labels`) on a chain of accesses on
/// `context`.
fn context_access(map: &Map<String, Value>) -> Option<Vec<&str>> {
    let (op, left, attr) = left_attr(map)?;
    if op != "." && op != "has" {
        return None;
    }
    let mut path = context_path(left)?;
    match attr {
        Value::String(a) => path.push(a),
        Value::Array(items) if op == "has" && !items.is_empty() => {
            for item in items {
                path.push(item.as_str()?);
            }
        }
        _ => return None,
    }
    Some(path)
}

/// What the whole set reads, or why it must not be cached. Both the policies and
/// their wildcard variants are analysed (a variant only replaces conditions on
/// the resource by resource attributes, so it reads no more of `context` than
/// its policy; analysing it too keeps that from being an assumption).
pub(super) fn analyse(policies: &PolicySet, variants: &PolicySet) -> Result<ReadSet, String> {
    if policies.templates().next().is_some() || variants.templates().next().is_some() {
        return Err("the policy set has templates".into());
    }
    let mut all: Vec<_> = policies.policies().chain(variants.policies()).collect();
    // By id, so the reason names the same policy on every load.
    all.sort_by_key(|p| p.id().to_string());
    let mut reads = ReadSet::NONE;
    for p in all {
        let est = p
            .to_json()
            .map_err(|e| format!("policy \"{}\" cannot be analysed: {e}", p.id()))?;
        let one = policy_reads(&est);
        if one.contains(ReadSet::NOW) {
            let how = if one == ReadSet::ALL {
                "can read all of context, context.now with it"
            } else {
                "reads context.now"
            };
            return Err(format!("policy \"{}\" {how}", p.id()));
        }
        reads.add(one);
    }
    Ok(reads)
}

/// Decisions of one policy snapshot, by request (see the module doc).
pub(super) struct DecisionCache {
    /// The context fields the set reads, or why there is no caching.
    reads: Result<ReadSet, String>,
    map: Mutex<Generations>,
}

#[derive(Default)]
struct Generations {
    young: HashMap<Vec<u8>, Arc<PolicyDecision>>,
    old: HashMap<Vec<u8>, Arc<PolicyDecision>>,
    /// Bytes of the keys in each generation.
    young_bytes: usize,
    old_bytes: usize,
}

impl Generations {
    fn insert(&mut self, key: Vec<u8>, decision: Arc<PolicyDecision>) {
        if key.len() > KEY_BYTES_MAX / 2 {
            // Larger than a generation (the broker admits no such request).
            return;
        }
        if self.young.len() >= DECISIONS_MAX / 2 || self.young_bytes + key.len() > KEY_BYTES_MAX / 2
        {
            self.old = std::mem::take(&mut self.young);
            self.old_bytes = std::mem::take(&mut self.young_bytes);
        }
        let len = key.len();
        if self.young.insert(key, decision).is_none() {
            self.young_bytes += len;
        }
    }

    fn take_old(&mut self, key: &[u8]) -> Option<Arc<PolicyDecision>> {
        let hit = self.old.remove(key)?;
        self.old_bytes -= key.len();
        Some(hit)
    }
}

impl DecisionCache {
    pub(super) fn new(reads: Result<ReadSet, String>) -> DecisionCache {
        DecisionCache {
            reads,
            map: Mutex::new(Generations::default()),
        }
    }

    /// `None` when decisions are cached; otherwise why not.
    pub(super) fn disabled(&self) -> Option<&str> {
        self.reads.as_ref().err().map(String::as_str)
    }

    /// The context fields decisions are keyed on (`None`: no caching).
    pub(super) fn reads(&self) -> Option<ReadSet> {
        self.reads.as_ref().ok().copied()
    }

    /// Decisions held now.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        let map = self.lock();
        map.young.len() + map.old.len()
    }

    /// Bytes of the keys held now (counted, and checked against the keys).
    #[cfg(test)]
    pub(super) fn key_bytes(&self) -> usize {
        let map = self.lock();
        let count = |m: &HashMap<Vec<u8>, _>| m.keys().map(Vec::len).sum::<usize>();
        assert_eq!(
            (map.young_bytes, map.old_bytes),
            (count(&map.young), count(&map.old))
        );
        map.young_bytes + map.old_bytes
    }

    /// The decision for `req`: cached, or `decide()`'s, then cached.
    pub(super) fn get_or_decide(
        &self,
        req: &PolicyRequest<'_>,
        decide: impl FnOnce() -> PolicyDecision,
    ) -> PolicyDecision {
        let Some(key) = self.key(req) else {
            return decide();
        };
        let hit = {
            let mut map = self.lock();
            match map.young.get(&key) {
                Some(hit) => Some(hit.clone()),
                None => map.take_old(&key).inspect(|hit| {
                    // Still asked for: moves to the young generation.
                    map.insert(key.clone(), hit.clone());
                }),
            }
        };
        if let Some(hit) = hit {
            return PolicyDecision::clone(&hit);
        }
        let decision = decide();
        self.lock().insert(key, Arc::new(decision.clone()));
        decision
    }

    /// The key of `req`: every request field the decision reads, each part
    /// length-prefixed (or fixed-size) so no two requests share a key unless
    /// they agree on all of it. `None`: not cached.
    fn key(&self, req: &PolicyRequest<'_>) -> Option<Vec<u8>> {
        let reads = self.reads.as_ref().ok()?;
        if req.arguments.is_some() {
            return None;
        }
        let mut key = Vec::with_capacity(
            64 + [
                req.user,
                req.action,
                req.backend,
                req.backend_kind,
                req.path,
            ]
            .iter()
            .map(|p| p.len() + 8)
            .sum::<usize>(),
        );
        for part in [
            req.user,
            req.action,
            req.backend,
            req.backend_kind,
            req.path,
        ] {
            put_str(&mut key, part);
        }
        for (n, (bit, _)) in ReadSet::LEAVES.iter().enumerate() {
            if !reads.contains(*bit) {
                continue;
            }
            // The tag makes the key's layout explicit (it is the same for every
            // key of one snapshot anyway).
            key.push(u8::try_from(n).unwrap_or(u8::MAX));
            match *bit {
                ReadSet::RUN_ID => put_str(&mut key, req.run_id),
                ReadSet::RUN_LABELS => {
                    put_len(&mut key, req.run_labels.len());
                    for label in req.run_labels {
                        put_str(&mut key, label);
                    }
                }
                ReadSet::TASK_ID => put_str(&mut key, req.task_id),
                ReadSet::TASK_KIND => put_str(&mut key, req.task_kind),
                ReadSet::TASK_ATTRIBUTES => {
                    put_len(&mut key, req.task_attributes.len());
                    for (k, v) in req.task_attributes {
                        put_str(&mut key, k);
                        put_str(&mut key, v);
                    }
                }
                ReadSet::RUNTIME => put_str(&mut key, req.runtime),
                // As the context carries it (whole seconds, 0 for none).
                ReadSet::REQUESTED_TTL => {
                    key.extend_from_slice(&super::context::requested_ttl(req).to_le_bytes());
                }
                // Never cached (see `analyse`); keyed exactly all the same.
                ReadSet::NOW => key.extend_from_slice(&req.now_unix.to_le_bytes()),
                // Requests with arguments are not cached: absent in every key.
                _ => {}
            }
        }
        Some(key)
    }

    fn lock(&self) -> MutexGuard<'_, Generations> {
        // Every change is a single insert or swap: a panic while holding the
        // lock cannot leave a half-made entry, so a poisoned map is still valid.
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn put_len(key: &mut Vec<u8>, len: usize) {
    key.extend_from_slice(&u64::try_from(len).unwrap_or(u64::MAX).to_le_bytes());
}

fn put_str(key: &mut Vec<u8>, s: &str) {
    put_len(key, s.len());
    key.extend_from_slice(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use cedar_policy::Policy;

    fn reads(policy: &str) -> ReadSet {
        let p: Policy = policy.parse().unwrap_or_else(|e| panic!("{policy}: {e}"));
        policy_reads(&p.to_json().unwrap_or_else(|e| panic!("{e}")))
    }

    fn permit_when(condition: &str) -> String {
        format!("permit (principal, action, resource) when {{ {condition} }};")
    }

    #[test]
    fn each_access_reads_its_field_only() {
        for (condition, expected) in [
            ("true", ReadSet::NONE),
            ("resource.path == \"a\"", ReadSet::NONE),
            ("context.run.id == \"r\"", ReadSet::RUN_ID),
            ("context.run.labels.contains(\"x\")", ReadSet::RUN_LABELS),
            ("context.task.id == \"t\"", ReadSet::TASK_ID),
            ("context.task.kind == \"k\"", ReadSet::TASK_KIND),
            (
                "context.task.attributes.contains(\"a=b\")",
                ReadSet::TASK_ATTRIBUTES,
            ),
            ("context.runtime == \"ci\"", ReadSet::RUNTIME),
            ("context.requested_ttl > 60", ReadSet::REQUESTED_TTL),
            ("context.now > 0", ReadSet::NOW),
            (
                "context has arguments && context.arguments.environment == \"prod\"",
                ReadSet::ARGUMENTS,
            ),
            ("context.run has labels", ReadSet::RUN_LABELS),
            ("context has task.kind", ReadSet::TASK_KIND),
            ("context has runtime", ReadSet::RUNTIME),
        ] {
            assert_eq!(reads(&permit_when(condition)), expected, "{condition}");
        }
    }

    #[test]
    fn anything_else_reads_everything_under_it() {
        for (condition, expected) in [
            // A record passed whole.
            ("context.run == {id: \"r\", labels: []}", ReadSet::RUN),
            ("context.task == context.task", ReadSet::TASK),
            // `context` itself as a value.
            ("context == {}", ReadSet::ALL),
            ("{c: context}.c.runtime == \"x\"", ReadSet::ALL),
            ("[context].isEmpty()", ReadSet::ALL),
            // A chain broken by an expression: the record it yields.
            (
                "(if true then context.run else context.run).id == \"r\"",
                ReadSet::RUN,
            ),
            // Names this analysis does not know read their whole parent.
            ("context.run has colour", ReadSet::RUN),
            ("context has colour", ReadSet::ALL),
            // A record literal whose keys look like the JSON form's.
            ("{Value: context.runtime}.Value == \"x\"", ReadSet::RUNTIME),
            ("{Var: context.task.kind}.Var == \"x\"", ReadSet::TASK_KIND),
        ] {
            assert_eq!(reads(&permit_when(condition)), expected, "{condition}");
        }
        // Annotations are not evaluated.
        let annotated =
            "@description(\"context.now\")\npermit (principal, action, resource) when { context.runtime == \"x\" };";
        assert_eq!(reads(annotated), ReadSet::RUNTIME);
    }

    #[test]
    fn reads_add_up_across_conditions() {
        let p = "permit (principal, action, resource) when { context.runtime == \"x\" } \
                 unless { context.run.labels.contains(\"u\") || context.requested_ttl > 5 };";
        let mut expected = ReadSet::RUNTIME;
        expected.add(ReadSet::RUN_LABELS);
        expected.add(ReadSet::REQUESTED_TTL);
        assert_eq!(reads(p), expected);
        assert_eq!(expected.to_string(), "run.labels, runtime, requested_ttl");
    }
}
