//! Deciding a request whose resource is a *set*: a path with wildcards
//! (`reports/*`, `arn:aws:s3:::bucket/2026/*`, `analytics.public.*`).
//!
//! Why: Cedar evaluates a policy against one string. Asked about the literal
//! `reports/*`, a `forbid … resource.path == "reports/secret.csv"` does not match,
//! so the set that contains the secret would be issued. The rule here is sound
//! without enumerating members: the request is issued only when a permit holds for
//! *every* member and no forbid and no `@approval` permit could hold for *any*.
//!
//! How: at load, every policy is rewritten once into a *variant* in which each
//! condition on the resource's path or identity (an *atom*: `resource.path == "…"`,
//! `resource.path like "…"`, `resource == …`, anything else that reads the path)
//! is replaced by a boolean attribute of the resource. For a set request each atom
//! is decided three-valued against the pattern ([`super::glob`]): true for every
//! member, false for every member, or unknown. Cedar then evaluates the variants
//! under every assignment of the unknown atoms (in practice one to four); a policy
//! *may* hold if some assignment satisfies it and *must* hold if all do. Everything
//! that does not read the path (principal, action, context, backend, kind) is
//! evaluated by Cedar exactly as for a concrete request.
//!
//! The rewriting walks Cedar's JSON form by its structure: a `Value` is data (but
//! an entity literal of the resource's type reads the resource: its attributes
//! are the resource's when it is the resource, an error otherwise), a record or
//! set literal (`Record`, `Set`) and an extension call hold expressions, and
//! `resource has …` reads the resource unless it names an attribute the broker
//! always sets (a variant's resource also carries the atoms). A node it does not
//! know, or of a shape it does not expect, reads the resource as far as it can
//! tell: the nearest boolean expression around it becomes an opaque atom.
//!
//! Invariants: an atom that cannot be analysed is unknown, never true or false;
//! every reading of the resource in a variant is an atom, `resource.backend`,
//! `resource.kind`, or a test that holds alike for every resource; for a
//! permit, an unknown opaque atom may also fail (Cedar skips a policy whose
//! condition errors), so `opaque || covering` does not grant a set; treating
//! the atoms of one policy as independent only widens "may" and narrows "must",
//! so both stay sound; a policy with more than [`MAX_ASSIGNMENTS`] assignments
//! of its unknown atoms is taken as "may hold, need not hold" without
//! evaluation. A permit is credited
//! with the whole set through an atom only when the set is inside the pattern
//! ([`glob::covers`]) or named explicitly ([`glob::names_explicitly`]); kinds
//! whose wildcard must be named explicitly (database `*`) get only the latter,
//! and there a permit grants a set only through a condition that names it.
//! Naming is a permit's credit only: a naming atom ([`Tri::Named`]) is false for
//! every member, so a policy is also evaluated with its naming atoms false (what
//! Cedar sees for each member) and "may hold" takes them either way. A forbid or
//! an `@approval` permit that holds for the members is never turned off by a
//! negated name (`unless { resource.path == "reports/*" }`), and a permit that
//! holds for them binds its constraints.

use std::collections::{HashMap, HashSet};

use cedar_policy::{Policy, PolicyId, PolicySet, RestrictedExpression};
use serde_json::{json, Value};

use super::glob::{self, Elem, LikeElem};

/// Most assignments of its unknown atoms one policy may have and still be
/// evaluated assignment by assignment (eight atoms of two values, or five of three).
pub(super) const MAX_ASSIGNMENTS: usize = 1 << 8;

/// The attribute of the resource that stands for atom `n` in the variants.
pub(super) fn atom_attr(n: usize) -> String {
    format!("tsr_atom_{n}")
}

/// A condition on the resource's path or identity, as written in a policy.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Atom {
    /// `resource.path == "…"`.
    Eq(String),
    /// `resource.path like "…"`.
    Like(Vec<LikeElem>),
    /// `resource == Tessera::Resource::"BACKEND:PATH"` (or `in`, the same here).
    Uid(String),
    /// Anything else that reads the path: never decided.
    Opaque,
}

/// Three-valued truth of an atom over every member of a set, and a fourth value
/// for an atom that names the set itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tri {
    True,
    False,
    Unknown,
    /// The atom *names* the set: a literal spelled exactly as the request, or a
    /// pattern matching it with a literal `*` (or `?`) at each of its wildcards.
    /// It holds for the request as written and is false for every member (a
    /// member never contains a wildcard character, or it would be a set itself).
    /// Only a permit is credited with it (a permit that names a set grants the
    /// set); for everything else it is what it is for the members.
    Named,
}

/// One policy as the set evaluator sees it.
#[derive(Debug, Clone)]
pub(super) struct SetPolicy {
    pub id: String,
    pub forbid: bool,
    /// Global numbers of its atoms, and the atoms.
    pub atoms: Vec<(usize, Atom)>,
}

/// Every policy's variant, ready to evaluate.
pub(super) struct SetEvaluator {
    pub variants: PolicySet,
    pub policies: Vec<SetPolicy>,
    pub atom_count: usize,
}

/// Whether a policy may and must hold for a set.
///
/// `may`: some member could satisfy it, or the set as named could (its naming
/// atoms taken either way): a forbid or an `@approval` permit that may hold
/// refuses the set, and a permit that may hold binds its constraints.
/// `must`: for a forbid, it holds for every member (its naming atoms false, as
/// they are for each member) or for the set as named (it names the set); for a
/// permit, it grants the set: it holds for every member or for the set as named,
/// and where the wildcard must be named (database `*`), for the set as named
/// only because of the naming (not for every member anyway).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Holds {
    pub may: bool,
    pub must: bool,
}

impl SetEvaluator {
    /// Rewrites every policy of `policies` into its variant.
    pub(super) fn build(policies: &PolicySet) -> Result<SetEvaluator, String> {
        let mut variants = PolicySet::new();
        let mut out = Vec::new();
        let mut next = 0usize;
        for p in policies.policies() {
            let id = p.id().to_string();
            let mut est = p
                .to_json()
                .map_err(|e| format!("policy {id}: cannot read it as JSON: {e}"))?;
            let forbid = match est.get("effect").and_then(Value::as_str) {
                Some("forbid") => true,
                Some("permit") => false,
                other => return Err(format!("policy {id}: unknown effect {other:?}")),
            };
            let mut atoms = Vec::new();
            rewrite_policy(&mut est, &mut atoms)
                .map_err(|e| format!("policy {id}: cannot build its set variant: {e}"))?;
            let numbered = renumber(&mut est, atoms, &mut next);
            if let Some(obj) = est.as_object_mut() {
                obj.insert("effect".into(), json!("permit"));
            }
            let variant = Policy::from_json(Some(PolicyId::new(&id)), est)
                .map_err(|e| format!("policy {id}: cannot build its set variant: {e}"))?;
            variants
                .add(variant)
                .map_err(|e| format!("policy {id}: {e}"))?;
            out.push(SetPolicy {
                id,
                forbid,
                atoms: numbered,
            });
        }
        Ok(SetEvaluator {
            variants,
            policies: out,
            atom_count: next,
        })
    }
}

/// Atom numbers are local while rewriting (a placeholder attribute per atom in
/// order); this turns the ones the variant still refers to into global numbers
/// (from `next` on) and returns them with their atoms. An atom that a wider
/// opaque atom swallowed afterwards is dropped: it would only be enumerated.
fn renumber(v: &mut Value, atoms: Vec<Atom>, next: &mut usize) -> Vec<(usize, Atom)> {
    let mut used = vec![false; atoms.len()];
    renumber_refs(v, &mut |local| {
        if let Some(u) = used.get_mut(local) {
            *u = true;
        }
        format!("{LOCAL_PREFIX}{local}")
    });
    let mut global = vec![None; atoms.len()];
    let mut numbered = Vec::new();
    for (local, atom) in atoms.into_iter().enumerate() {
        if used[local] {
            global[local] = Some(*next);
            numbered.push((*next, atom));
            *next += 1;
        }
    }
    renumber_refs(v, &mut |local| match global.get(local).copied().flatten() {
        Some(n) => atom_attr(n),
        // Not an atom of this policy: never read as one.
        None => format!("{LOCAL_PREFIX}{local}"),
    });
    numbered
}

/// Calls `rename` on the local number of every atom reference (`resource.<local
/// attribute>`, as [`atom_ref`] writes it) and puts its answer as the attribute.
fn renumber_refs(v: &mut Value, rename: &mut impl FnMut(usize) -> String) {
    match v {
        Value::Object(map) => {
            if let Some(Value::Object(get)) = map.get_mut(".") {
                if get.get("left").is_some_and(is_var_resource) {
                    if let Some(Value::String(attr)) = get.get_mut("attr") {
                        if let Some(local) = attr
                            .strip_prefix(LOCAL_PREFIX)
                            .and_then(|l| l.parse::<usize>().ok())
                        {
                            *attr = rename(local);
                        }
                    }
                    return;
                }
            }
            for (_, child) in map.iter_mut() {
                renumber_refs(child, rename);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|c| renumber_refs(c, rename)),
        _ => {}
    }
}

const LOCAL_PREFIX: &str = "tsr_local_";

/// The entity type of the resource.
const RESOURCE_TYPE: &str = "Tessera::Resource";

/// The attributes the broker sets on the resource: `has` on them always holds,
/// for a concrete request and for a variant alike. (A variant's resource also
/// carries the atoms, which a concrete one does not.)
const RESOURCE_ATTRS: [&str; 3] = ["backend", "kind", "path"];

fn atom_ref(atoms: &mut Vec<Atom>, atom: Atom) -> Value {
    atoms.push(atom);
    json!({".": {"left": {"Var": "resource"}, "attr": format!("{LOCAL_PREFIX}{}", atoms.len() - 1)}})
}

fn rewrite_policy(est: &mut Value, atoms: &mut Vec<Atom>) -> Result<(), String> {
    let obj = est
        .as_object_mut()
        .ok_or("the policy's JSON form is not an object")?;
    // The resource scope becomes `resource` plus a condition on it.
    let scope_atom = match obj.get("resource") {
        Some(scope) => scope_atom(scope),
        None => Some(Atom::Opaque),
    };
    let mut extra = Vec::new();
    if let Some(atom) = scope_atom {
        obj.insert("resource".into(), json!({"op": "All"}));
        extra.push(json!({"kind": "when", "body": atom_ref(atoms, atom)}));
    }
    let conditions = obj
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    let Value::Array(conditions) = conditions else {
        return Err("its conditions are not a list".into());
    };
    for c in conditions.iter_mut() {
        let body = c.get_mut("body").ok_or("a condition without a body")?;
        condition(body, atoms);
    }
    conditions.extend(extra);
    Ok(())
}

/// The atom a resource scope constraint stands for; `None` for `resource` alone or
/// `resource is Tessera::Resource`.
fn scope_atom(scope: &Value) -> Option<Atom> {
    let op = scope.get("op").and_then(Value::as_str);
    match op {
        Some("All") | Some("all") => None,
        Some("==") | Some("in") => Some(
            // Resources have no parents: `in` an entity is `==` it.
            scope
                .get("entity")
                .and_then(|e| resource_uid(e.get("__entity").unwrap_or(e)))
                .map(Atom::Uid)
                .unwrap_or(Atom::Opaque),
        ),
        Some("is")
            if scope.get("in").is_none()
                && scope.get("entity_type").and_then(Value::as_str) == Some(RESOURCE_TYPE) =>
        {
            None
        }
        _ => Some(Atom::Opaque),
    }
}

/// The id of the entity `{"type": "Tessera::Resource", "id": …}` (as a scope
/// writes it, or inside a literal's `__entity`); `None` for any other type.
fn resource_uid(uid: &Value) -> Option<String> {
    if uid.get("type").and_then(Value::as_str) != Some(RESOURCE_TYPE) {
        return None;
    }
    uid.get("id").and_then(Value::as_str).map(str::to_owned)
}

fn is_var_resource(v: &Value) -> bool {
    v.get("Var").and_then(Value::as_str) == Some("resource")
}

fn is_resource_path(v: &Value) -> bool {
    v.get(".").is_some_and(|g| {
        g.get("left").is_some_and(is_var_resource)
            && g.get("attr").and_then(Value::as_str) == Some("path")
    })
}

fn string_value(v: &Value) -> Option<&str> {
    v.get("Value").and_then(Value::as_str)
}

/// Whether a literal (the content of a `Value` node) can stand for the resource:
/// it holds an entity of the resource's type (whose attributes are the resource's
/// when it is the resource, and an error otherwise), or something this module
/// does not read (`__expr`, an entity without a plain type).
fn literal_reads_resource(v: &Value) -> bool {
    match v {
        Value::Object(map) => {
            if let Some(entity) = map.get("__entity") {
                return entity.get("type").and_then(Value::as_str) == Some(RESOURCE_TYPE)
                    || entity.get("type").and_then(Value::as_str).is_none();
            }
            map.contains_key("__expr") || map.values().any(literal_reads_resource)
        }
        Value::Array(items) => items.iter().any(literal_reads_resource),
        _ => false,
    }
}

/// The single key of an expression node and its content.
fn node(v: &mut Value) -> Option<(String, &mut Value)> {
    let map = v.as_object_mut()?;
    if map.len() != 1 {
        return None;
    }
    let (k, inner) = map.iter_mut().next()?;
    Some((k.clone(), inner))
}

/// The operands of a node whose content is an object with exactly the keys
/// `keys` (an optional key is listed with a leading `?`), by key; `None` when
/// the content has any other shape.
fn operands<'a>(inner: &'a mut Value, keys: &[&str]) -> Option<Vec<(&'a str, &'a mut Value)>> {
    let map = inner.as_object_mut()?;
    let required = keys.iter().filter(|k| !k.starts_with('?')).count();
    let known = |k: &str| keys.iter().any(|key| key.trim_start_matches('?') == k);
    if map.len() < required || map.len() > keys.len() || map.keys().any(|k| !known(k)) {
        return None;
    }
    if keys
        .iter()
        .filter(|k| !k.starts_with('?'))
        .any(|k| !map.contains_key(*k))
    {
        return None;
    }
    Some(map.iter_mut().map(|(k, v)| (k.as_str(), v)).collect())
}

/// Operators whose result is a boolean and whose operands are expressions under
/// the keys listed: such a node that still reads the resource becomes one
/// opaque atom as a whole.
const BOOLEAN_OPS: [(&str, &[&str]); 10] = [
    ("in", &["left", "right"]),
    ("<", &["left", "right"]),
    ("<=", &["left", "right"]),
    (">", &["left", "right"]),
    (">=", &["left", "right"]),
    ("contains", &["left", "right"]),
    ("containsAll", &["left", "right"]),
    ("containsAny", &["left", "right"]),
    ("hasTag", &["left", "right"]),
    ("isEmpty", &["arg"]),
];

/// Operators with other results: a reading of the resource under one is left to
/// the nearest boolean expression around it.
const VALUE_OPS: [(&str, &[&str]); 5] = [
    ("+", &["left", "right"]),
    ("-", &["left", "right"]),
    ("*", &["left", "right"]),
    ("getTag", &["left", "right"]),
    ("neg", &["arg"]),
];

/// Rewrites a boolean expression in place (a condition's body, an operand of
/// `&&`, `||`, `!`, the test of an `if`): if it still reads the resource after
/// rewriting, it becomes an opaque atom as a whole.
fn condition(e: &mut Value, atoms: &mut Vec<Atom>) {
    if rewrite(e, atoms) {
        *e = atom_ref(atoms, Atom::Opaque);
    }
}

/// Rewrites the expression `e` in place, replacing conditions on the path or the
/// identity of the resource by atoms. Returns true when `e` still reads the
/// resource in a way that the nearest enclosing boolean expression must hide
/// behind an opaque atom, and also for anything that is not an expression of
/// Cedar's JSON form as this module knows it: what cannot be read cannot be
/// trusted not to read the resource, and an opaque atom is never decided.
///
/// Every expression node is walked by its structure: literals (`Value`) hold
/// data only, record (`Record`) and set (`Set`) literals hold expressions, an
/// extension function's arguments are expressions.
fn rewrite(e: &mut Value, atoms: &mut Vec<Atom>) -> bool {
    let Some((op, inner)) = node(e) else {
        return true;
    };
    match op.as_str() {
        "Value" => literal_reads_resource(inner),
        "Var" => !matches!(inner.as_str(), Some("principal" | "action" | "context")),
        "." => {
            let Some(ops) = operands(inner, &["left", "attr"]) else {
                return true;
            };
            let attr = ops
                .iter()
                .find(|(k, _)| *k == "attr")
                .and_then(|(_, v)| v.as_str())
                .map(str::to_owned);
            let Some(attr) = attr else {
                return true;
            };
            ops.into_iter()
                .filter(|(k, _)| *k == "left")
                .fold(false, |t, (_, left)| {
                    t | if is_var_resource(left) {
                        !matches!(attr.as_str(), "backend" | "kind")
                    } else {
                        rewrite(left, atoms)
                    }
                })
        }
        "has" => {
            let tainted = match operands(inner, &["left", "attr"]) {
                None => true,
                Some(ops) => {
                    let (mut left, mut attrs) = (None, None);
                    for (k, v) in ops {
                        match k {
                            "attr" => attrs = has_attrs(v),
                            _ => left = Some(v),
                        }
                    }
                    match (left, attrs) {
                        // `resource has path`: always true, for a variant too;
                        // any other attribute (the variant's atoms!) is not.
                        (Some(left), Some(attrs)) if is_var_resource(left) => {
                            !matches!(attrs.as_slice(), [a] if RESOURCE_ATTRS.contains(&a.as_str()))
                        }
                        (Some(left), Some(_)) => rewrite(left, atoms),
                        _ => true,
                    }
                }
            };
            wrap(e, tainted, atoms)
        }
        "==" | "!=" => match equality(inner, atoms) {
            Equality::Atom(r) => {
                *e = if op == "!=" {
                    json!({"!": {"arg": r}})
                } else {
                    r
                };
                false
            }
            Equality::Other(tainted) => wrap(e, tainted, atoms),
        },
        "like" => {
            let tainted = match operands(inner, &["left", "pattern"]) {
                None => true,
                Some(ops) => {
                    let (mut left, mut pattern) = (None, None);
                    for (k, v) in ops {
                        match k {
                            "pattern" => pattern = Some(like_pattern(v)),
                            _ => left = Some(v),
                        }
                    }
                    match (left, pattern) {
                        (Some(left), Some(Some(p))) if is_resource_path(left) => {
                            *e = atom_ref(atoms, Atom::Like(p));
                            return false;
                        }
                        (Some(left), Some(Some(_))) => rewrite(left, atoms),
                        _ => true,
                    }
                }
            };
            wrap(e, tainted, atoms)
        }
        "is" => {
            let tainted = match operands(inner, &["left", "entity_type", "?in"]) {
                None => true,
                Some(ops) => {
                    let has_in = ops.iter().any(|(k, _)| *k == "in");
                    ops.into_iter().fold(false, |t, (k, v)| {
                        t | match k {
                            "entity_type" => !v.is_string(),
                            // `resource is T` alone is decided by the type, which
                            // a variant's resource shares.
                            "left" if is_var_resource(v) && !has_in => false,
                            _ => rewrite(v, atoms),
                        }
                    })
                }
            };
            wrap(e, tainted, atoms)
        }
        "&&" | "||" => {
            let Some(ops) = operands(inner, &["left", "right"]) else {
                return true;
            };
            for (_, side) in ops {
                condition(side, atoms);
            }
            false
        }
        "!" => {
            let Some(ops) = operands(inner, &["arg"]) else {
                return true;
            };
            for (_, arg) in ops {
                condition(arg, atoms);
            }
            false
        }
        "if-then-else" => {
            let Some(ops) = operands(inner, &["if", "then", "else"]) else {
                return true;
            };
            let mut tainted = false;
            for (k, v) in ops {
                if k == "if" {
                    condition(v, atoms);
                } else {
                    tainted |= rewrite(v, atoms);
                }
            }
            tainted
        }
        "Set" => match inner {
            Value::Array(items) => items.iter_mut().fold(false, |t, c| rewrite(c, atoms) | t),
            _ => true,
        },
        "Record" => match inner {
            Value::Object(fields) => fields
                .values_mut()
                .fold(false, |t, c| rewrite(c, atoms) | t),
            _ => true,
        },
        op => {
            if let Some((_, keys)) = BOOLEAN_OPS.iter().find(|(o, _)| *o == op) {
                let tainted = match operands(inner, keys) {
                    None => true,
                    Some(ops) => ops
                        .into_iter()
                        .fold(false, |t, (_, c)| rewrite(c, atoms) | t),
                };
                return wrap(e, tainted, atoms);
            }
            if let Some((_, keys)) = VALUE_OPS.iter().find(|(o, _)| *o == op) {
                return match operands(inner, keys) {
                    None => true,
                    Some(ops) => ops
                        .into_iter()
                        .fold(false, |t, (_, c)| rewrite(c, atoms) | t),
                };
            }
            match inner {
                // An extension function or method: its arguments are expressions.
                Value::Array(args) => args.iter_mut().fold(false, |t, c| rewrite(c, atoms) | t),
                // `Slot`, `Unknown`, `Error`, or anything newer than this module.
                _ => true,
            }
        }
    }
}

/// Replaces `e` by an opaque atom when `tainted` (a boolean expression that still
/// reads the resource); never leaves anything for the enclosing expression.
fn wrap(e: &mut Value, tainted: bool, atoms: &mut Vec<Atom>) -> bool {
    if tainted {
        *e = atom_ref(atoms, Atom::Opaque);
    }
    false
}

/// The attributes a `has` tests: `"a"` or, for `e has a.b`, `["a", "b"]`.
fn has_attrs(v: &Value) -> Option<Vec<String>> {
    match v {
        Value::String(a) => Some(vec![a.clone()]),
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .map(|i| i.as_str().map(str::to_owned))
            .collect(),
        _ => None,
    }
}

enum Equality {
    /// A condition on the path or the identity, as an atom reference.
    Atom(Value),
    /// Anything else; true when it still reads the resource.
    Other(bool),
}

/// The content of `==` or `!=`.
fn equality(inner: &mut Value, atoms: &mut Vec<Atom>) -> Equality {
    let Some(ops) = operands(inner, &["left", "right"]) else {
        return Equality::Other(true);
    };
    let mut sides: Vec<&mut Value> = ops.into_iter().map(|(_, v)| v).collect();
    let atom = match sides.as_slice() {
        [l, r] => eq_atom(l, r).or_else(|| eq_atom(r, l)),
        _ => return Equality::Other(true),
    };
    match atom {
        Some(atom) => Equality::Atom(atom_ref(atoms, atom)),
        None => Equality::Other(
            sides
                .iter_mut()
                .fold(false, |t, side| rewrite(side, atoms) | t),
        ),
    }
}

fn eq_atom(path_side: &Value, other: &Value) -> Option<Atom> {
    if is_resource_path(path_side) {
        return Some(string_value(other).map_or(Atom::Opaque, |s| Atom::Eq(s.to_owned())));
    }
    if is_var_resource(path_side) {
        let uid = other
            .get("Value")
            .and_then(|v| v.get("__entity"))
            .and_then(resource_uid);
        return Some(uid.map_or(Atom::Opaque, Atom::Uid));
    }
    None
}

/// A `like` pattern in the JSON form: `"Wildcard"` or `{"Literal": "…"}`.
fn like_pattern(v: &Value) -> Option<Vec<LikeElem>> {
    let mut out = Vec::new();
    for e in v.as_array()? {
        match e {
            Value::String(s) if s == "Wildcard" => out.push(LikeElem::Star),
            Value::Object(m) if m.len() == 1 => {
                let lit = m.get("Literal")?.as_str()?;
                out.extend(lit.chars().map(LikeElem::Lit));
            }
            _ => return None,
        }
    }
    Some(out)
}

/// What a set request looks like to the atoms.
pub(super) struct SetRequest<'a> {
    pub backend: &'a str,
    /// The path as requested (with its wildcards).
    pub path: &'a str,
    pub elems: Vec<Elem>,
    /// Whether a pattern that contains the whole set grants it (false: only a
    /// policy naming the wildcard exactly does).
    pub inclusion_grants: bool,
    /// Tests only: read the path as one concrete string and decide every atom
    /// exactly as Cedar would, so the variants can be checked against Cedar.
    #[cfg(test)]
    pub exact: bool,
}

impl SetRequest<'_> {
    /// The truth of `atom` over every member of the set.
    pub(super) fn value(&self, atom: &Atom) -> Tri {
        #[cfg(test)]
        if self.exact {
            let b = |v: bool| if v { Tri::True } else { Tri::False };
            return match atom {
                Atom::Opaque => Tri::Unknown,
                Atom::Eq(lit) => b(lit == self.path),
                Atom::Uid(id) => b(*id == format!("{}:{}", self.backend, self.path)),
                Atom::Like(p) => b(glob::like_matches(p, self.path)),
            };
        }
        match atom {
            Atom::Opaque => Tri::Unknown,
            Atom::Eq(lit) => self.literal(lit),
            Atom::Uid(id) => match id.split_once(':') {
                Some((backend, path)) if backend == self.backend => self.literal(path),
                _ => Tri::False,
            },
            Atom::Like(p) => {
                if self.inclusion_grants && glob::covers(p, &self.elems) {
                    Tri::True
                } else if glob::names_explicitly(p, &self.elems) {
                    Tri::Named
                } else if glob::meets(p, &self.elems) {
                    Tri::Unknown
                } else {
                    Tri::False
                }
            }
        }
    }

    fn literal(&self, lit: &str) -> Tri {
        if lit == self.path {
            Tri::Named
        } else if glob::meets(&glob::literal_as_like(lit), &self.elems) {
            Tri::Unknown
        } else {
            Tri::False
        }
    }
}

impl SetEvaluator {
    /// Whether each policy (in [`SetEvaluator::policies`] order) may and must hold
    /// for `set`. `satisfied` evaluates the variants once with the given atom
    /// attributes on the resource and returns the ids of the satisfied ones; the
    /// second argument names the policies for which that evaluation leaves an
    /// atom out on purpose (an opaque reading that fails), whose evaluation
    /// errors are therefore not errors of the policy set.
    pub(super) fn holds(
        &self,
        set: &SetRequest<'_>,
        mut satisfied: impl FnMut(
            HashMap<String, RestrictedExpression>,
            &HashSet<String>,
        ) -> Result<HashSet<String>, String>,
    ) -> Result<Vec<Holds>, String> {
        let mut values = vec![Tri::False; self.atom_count];
        for p in &self.policies {
            for (n, atom) in &p.atoms {
                values[*n] = set.value(atom);
            }
        }
        // How many assignments each policy's unknown and naming atoms have;
        // `None` when more than MAX_ASSIGNMENTS.
        let counts: Vec<Option<usize>> = self
            .policies
            .iter()
            .map(|p| {
                p.atoms
                    .iter()
                    .filter(|(n, _)| matches!(values[*n], Tri::Unknown | Tri::Named))
                    .try_fold(1usize, |count, (n, atom)| {
                        count
                            .checked_mul(radix(p, atom, values[*n]))
                            .filter(|c| *c <= MAX_ASSIGNMENTS)
                    })
            })
            .collect();
        // A policy with too many unknown atoms may hold and need not. Per policy:
        // may hold (any assignment), must hold for every member (every
        // assignment with its naming atoms false), must hold for the set as
        // named (every assignment with its naming atoms true).
        let mut views: Vec<(bool, bool, bool)> = counts
            .iter()
            .map(|c| (c.is_none(), c.is_some(), c.is_some()))
            .collect();
        let rounds = counts.iter().flatten().copied().max().unwrap_or(1);
        // Round t gives each policy with c assignments assignment t mod c (digit k,
        // in the radix of its k-th unknown atom, is that atom's value: false, true,
        // or failing); only rounds t < c are new for that policy.
        for t in 0..rounds {
            let mut attrs = HashMap::with_capacity(self.atom_count);
            let mut failing = HashSet::new();
            // Per policy: whether this round's naming atoms are all false (the
            // members' view) and all true (the set as named).
            let mut named_as = Vec::with_capacity(self.policies.len());
            for (policy, count) in self.policies.iter().zip(&counts) {
                let mut index = count.map_or(0, |c| t % c);
                let (mut all_false, mut all_true) = (true, true);
                for (n, atom) in &policy.atoms {
                    let v = match values[*n] {
                        Tri::True => Some(true),
                        Tri::False => Some(false),
                        tri @ (Tri::Unknown | Tri::Named) => {
                            let r = radix(policy, atom, tri);
                            let digit = index % r;
                            index /= r;
                            if tri == Tri::Named {
                                all_false &= digit == 0;
                                all_true &= digit == 1;
                            }
                            match digit {
                                0 => Some(false),
                                1 => Some(true),
                                // No attribute: reading it is an evaluation error.
                                _ => None,
                            }
                        }
                    };
                    match v {
                        Some(v) => {
                            attrs.insert(atom_attr(*n), RestrictedExpression::new_bool(v));
                        }
                        None => {
                            failing.insert(policy.id.clone());
                        }
                    }
                }
                named_as.push((all_false, all_true));
            }
            let sat = satisfied(attrs, &failing)?;
            for (((policy, count), view), (all_false, all_true)) in self
                .policies
                .iter()
                .zip(&counts)
                .zip(views.iter_mut())
                .zip(named_as)
            {
                if count.is_some_and(|c| t < c) {
                    let yes = sat.contains(&policy.id);
                    view.0 |= yes;
                    if all_false {
                        view.1 &= yes;
                    }
                    if all_true {
                        view.2 &= yes;
                    }
                }
            }
        }
        let holds = self
            .policies
            .iter()
            .zip(views)
            .map(|(policy, (may, members, named))| Holds {
                may,
                must: if policy.forbid || set.inclusion_grants {
                    members || named
                } else {
                    // Where the wildcard must be named explicitly (database
                    // `*`), a permit grants the set only because a condition
                    // names it: not one that holds for every member anyway
                    // ("every table of pg-main", whatever a negated name next
                    // to it says), which would grant every table at once.
                    named && !members
                },
            })
            .collect();
        Ok(holds)
    }
}

/// The values an unknown or naming atom of `policy` takes: false and true; for
/// an unknown opaque atom of a permit, also "fails". An opaque reading may fail
/// for some member (`Tessera::Resource::"svc:a".path` is an error for every
/// resource but that one), and Cedar then skips the permit for that member: a
/// permit must not be credited with the whole set through `opaque || covering`.
/// (A failure never makes a policy hold, so for a forbid it changes nothing that
/// matters.) A naming atom is never opaque: false for the members, true for the
/// set as named.
fn radix(policy: &SetPolicy, atom: &Atom, value: Tri) -> usize {
    if value == Tri::Unknown && !policy.forbid && *atom == Atom::Opaque {
        3
    } else {
        2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The atoms of a policy's variant; the variant reads the resource only
    /// through them, its backend and its kind.
    fn atoms_of(policy_text: &str) -> Vec<Atom> {
        let p: Policy = policy_text.parse().unwrap_or_else(|e| panic!("{e}"));
        let mut est = p.to_json().unwrap_or_else(|e| panic!("{e}"));
        let mut atoms = Vec::new();
        rewrite_policy(&mut est, &mut atoms).unwrap_or_else(|e| panic!("{e}"));
        let atoms = renumber(&mut est, atoms, &mut 0);
        assert_reads_resource_only_through_atoms(&est, atoms.len());
        atoms.into_iter().map(|(_, a)| a).collect()
    }

    fn assert_reads_resource_only_through_atoms(est: &Value, count: usize) {
        let atoms: Vec<String> = (0..count).map(atom_attr).collect();
        let mut ok = |v: &Value| {
            let Some(g) = v
                .get(".")
                .filter(|g| g.get("left").is_some_and(is_var_resource))
            else {
                return false;
            };
            let attr = g.get("attr").and_then(Value::as_str).unwrap_or("");
            assert!(
                attr == "backend" || attr == "kind" || atoms.iter().any(|a| a == attr),
                "the variant reads resource.{attr}: {est}"
            );
            true
        };
        fn walk(v: &Value, ok: &mut impl FnMut(&Value) -> bool, est: &Value) {
            if ok(v) {
                return;
            }
            if is_var_resource(v) {
                panic!("the variant reads the resource: {est}");
            }
            if let Some(e) = v.get("Value") {
                assert!(
                    !literal_reads_resource(e),
                    "the variant names a resource: {est}"
                );
                return;
            }
            if let Some(h) = v
                .get("has")
                .filter(|h| h.get("left").is_some_and(is_var_resource))
            {
                let attr = h.get("attr").and_then(Value::as_str).unwrap_or("");
                assert!(
                    RESOURCE_ATTRS.contains(&attr),
                    "the variant tests resource has {attr}: {est}"
                );
                return;
            }
            if let Some(i) = v
                .get("is")
                .filter(|i| i.get("left").is_some_and(is_var_resource))
            {
                assert!(i.get("in").is_none(), "{est}");
                return;
            }
            match v {
                Value::Object(m) => m.values().for_each(|c| walk(c, ok, est)),
                Value::Array(a) => a.iter().for_each(|c| walk(c, ok, est)),
                _ => {}
            }
        }
        for c in est
            .get("conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            walk(&c["body"], &mut ok, est);
        }
    }

    #[test]
    fn every_reading_of_the_path_becomes_an_atom() {
        use LikeElem::{Lit, Star};
        let a = atoms_of(
            r#"permit (principal, action, resource) when { resource.path like "r/*" && resource.backend == "svc" };"#,
        );
        assert_eq!(a, [Atom::Like(vec![Lit('r'), Lit('/'), Star])]);
        let a = atoms_of(
            r#"forbid (principal, action, resource == Tessera::Resource::"svc:a/b") when { resource.path != "x" };"#,
        );
        assert_eq!(a, [Atom::Uid("svc:a/b".into()), Atom::Eq("x".into())]);
        // Readings that cannot be analysed are opaque, never dropped.
        for text in [
            r#"forbid (principal, action, resource) when { ["a", "b"].contains(resource.path) };"#,
            r#"forbid (principal, action, resource) when { resource.path == context.task.id };"#,
            r#"forbid (principal, action, resource) when { if resource.path == context.runtime then true else false };"#,
            r#"forbid (principal, action, resource) when { resource == principal };"#,
            r#"forbid (principal, action, resource) when { context.task.id like "*" && ip("127.0.0.1").isLoopback() && resource.path > "a" };"#,
        ] {
            let a = atoms_of(text);
            assert!(a.contains(&Atom::Opaque), "{text}: {a:?}");
        }
        // Readings through literals, whatever their keys look like.
        for cond in [
            r#"{Value: resource.path}.Value == "a""#,
            r#"{Value: resource.path, x: 1}["Value"] like "a*""#,
            r#"{"==": resource.path}["=="] == "a""#,
            r#"{".": {"!": resource.path}}["."]["!"] == "a""#,
            r#"{"&&": resource.path, "||": 1}["&&"] == "a""#,
            r#"{"like": resource.path, "is": resource}["like"] == "a""#,
            r#"{"if-then-else": resource.path}["if-then-else"] == "a""#,
            r#"{Set: [resource.path]}.Set.contains("a")"#,
            r#"[{Value: resource}].contains({Value: principal})"#,
            r#"Tessera::Resource::"svc:a".path == "a""#,
            r#"Tessera::Resource::"svc:a" has path"#,
            r#"{x: Tessera::Resource::"svc:a"}.x.kind == "token""#,
            r#"resource == Tessera::User::"svc:a""#,
            r#"resource has tsr_atom_0"#,
            r#"resource has tsr_local_0"#,
            r#"resource is Tessera::Resource in Tessera::Resource::"svc:a""#,
            r#"(if resource.path == "a" then resource.path else "b") == "c""#,
        ] {
            let text = format!("forbid (principal, action, resource) when {{ {cond} }};");
            let a = atoms_of(&text);
            assert!(a.contains(&Atom::Opaque), "{text}: {a:?}");
        }
        // A reading swallowed by a wider opaque one is not an atom of its own.
        let a = atoms_of(
            r#"forbid (principal, action, resource) when { (if resource.path == "a" then resource.path else "b") == "c" };"#,
        );
        assert_eq!(a, [Atom::Opaque]);
        // The backend and the kind are not the path: evaluated as they are; nor
        // is a test that every resource passes alike.
        let a = atoms_of(
            r#"forbid (principal, action, resource) when { resource.kind == "token" && resource has backend && resource has path && resource is Tessera::Resource && {k: resource.backend}.k == "svc" };"#,
        );
        assert!(a.is_empty(), "{a:?}");
    }

    /// What the rewriter does not know reads the resource as far as it can tell:
    /// the nearest boolean expression around it is opaque, never evaluated.
    #[test]
    fn what_is_not_understood_is_opaque() {
        let base: Policy = r#"forbid (principal, action, resource) when { context.runtime == "x" && context.runtime == "y" };"#
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        let base = base.to_json().unwrap_or_else(|e| panic!("{e}"));
        let strange = [
            json!({"Unknown": {"name": "x"}}),
            json!({"Slot": "?resource"}),
            json!({"Error": "x"}),
            json!({"futureOp": {"left": {"Var": "context"}}}),
            json!({"==": {"left": {"Var": "context"}, "right": {"Value": 1}, "extra": {"Var": "resource"}}}),
            json!({"==": {"left": {"Var": "context"}}}),
            json!({"Var": "future"}),
            json!({"Value": {"__expr": "resource"}}),
            json!({"Value": {"__entity": {"type": "Tessera::Resource", "id": "svc:a"}}}),
            json!({"Record": [{"Var": "resource"}]}),
            json!({"Set": {"a": {"Var": "resource"}}}),
            json!({"like": {"left": {"Var": "context"}, "pattern": ["Wild"]}}),
            json!({"has": {"left": {"Var": "resource"}, "attr": ["path", "x"]}}),
            json!({"Var": "resource", "Value": 1}),
            json!("resource"),
        ];
        for s in strange {
            let mut est = base.clone();
            est["conditions"][0]["body"]["&&"]["left"] =
                json!({"==": {"left": s.clone(), "right": {"Value": 1}}});
            let mut atoms = Vec::new();
            rewrite_policy(&mut est, &mut atoms).unwrap_or_else(|e| panic!("{e}"));
            let atoms = renumber(&mut est, atoms, &mut 0);
            assert_eq!(atoms, [(0, Atom::Opaque)], "{s}: {est}");
            assert_reads_resource_only_through_atoms(&est, 1);
            // Gone, replaced by the atom (itself, or the comparison around it).
            let left = est["conditions"][0]["body"]["&&"]["left"].to_string();
            assert!(
                !s.is_object() || !left.contains(&s.to_string()),
                "{s}: {est}"
            );
            assert!(left.contains("tsr_atom_0"), "{s}: {est}");
            // The rest is left as it was.
            assert_eq!(
                est["conditions"][0]["body"]["&&"]["right"],
                base["conditions"][0]["body"]["&&"]["right"]
            );
        }
    }
}
