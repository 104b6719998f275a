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
//! Invariants: an atom that cannot be analysed is unknown, never true or false;
//! treating the atoms of one policy as independent only widens "may" and narrows
//! "must", so both stay sound; a policy with more than [`MAX_UNKNOWN`] unknown atoms
//! is taken as "may hold, need not hold" without evaluation. A permit is credited
//! with the whole set through an atom only when the set is inside the pattern
//! ([`glob::covers`]) or named explicitly ([`glob::names_explicitly`]); kinds
//! whose wildcard must be named explicitly (database `*`) get only the latter,
//! and there a permit grants a set only through a condition that names it.

use std::collections::{HashMap, HashSet};

use cedar_policy::{Policy, PolicyId, PolicySet, RestrictedExpression};
use serde_json::{json, Value};

use super::glob::{self, Elem, LikeElem};

/// Most unknown atoms one policy may have and still be evaluated assignment by
/// assignment (2^8 evaluations).
pub(super) const MAX_UNKNOWN: usize = 8;

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

/// Three-valued truth of an atom over every member of a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tri {
    True,
    False,
    Unknown,
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
            let mut atoms = Vec::new();
            let forbid = est.get("effect").and_then(Value::as_str) == Some("forbid");
            rewrite_policy(&mut est, &mut atoms);
            let numbered: Vec<(usize, Atom)> = atoms
                .into_iter()
                .map(|a| {
                    next += 1;
                    (next - 1, a)
                })
                .collect();
            renumber(&mut est, &numbered);
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
/// order); this turns them into global numbers.
fn renumber(v: &mut Value, numbered: &[(usize, Atom)]) {
    match v {
        Value::Object(map) => {
            if let Some(Value::String(attr)) = map.get_mut("attr") {
                if let Some(local) = attr.strip_prefix(LOCAL_PREFIX) {
                    if let Some((global, _)) =
                        local.parse::<usize>().ok().and_then(|i| numbered.get(i))
                    {
                        *attr = atom_attr(*global);
                    }
                }
            }
            for (_, child) in map.iter_mut() {
                renumber(child, numbered);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|c| renumber(c, numbered)),
        _ => {}
    }
}

const LOCAL_PREFIX: &str = "tsr_local_";

fn atom_ref(atoms: &mut Vec<Atom>, atom: Atom) -> Value {
    atoms.push(atom);
    json!({".": {"left": {"Var": "resource"}, "attr": format!("{LOCAL_PREFIX}{}", atoms.len() - 1)}})
}

fn rewrite_policy(est: &mut Value, atoms: &mut Vec<Atom>) {
    let Some(obj) = est.as_object_mut() else {
        return;
    };
    // The resource scope becomes `resource` plus a condition on it.
    let scope_atom = match obj.get("resource") {
        Some(scope) => scope_atom(scope),
        None => None,
    };
    let mut extra = Vec::new();
    if let Some(atom) = scope_atom {
        obj.insert("resource".into(), json!({"op": "All"}));
        extra.push(json!({"kind": "when", "body": atom_ref(atoms, atom)}));
    }
    if let Some(Value::Array(conditions)) = obj.get_mut("conditions") {
        for c in conditions.iter_mut() {
            if let Some(body) = c.get_mut("body") {
                if rewrite(body, atoms) {
                    *body = atom_ref(atoms, Atom::Opaque);
                }
            }
        }
        conditions.extend(extra);
    } else if !extra.is_empty() {
        obj.insert("conditions".into(), Value::Array(extra));
    }
}

/// The atom a resource scope constraint stands for; `None` for `resource` alone or
/// `resource is Tessera::Resource`.
fn scope_atom(scope: &Value) -> Option<Atom> {
    let op = scope.get("op").and_then(Value::as_str);
    match op {
        Some("All") | Some("all") => None,
        Some("==") | Some("in") => Some(
            entity_id(scope.get("entity"))
                .map(Atom::Uid)
                .unwrap_or(Atom::Opaque),
        ),
        Some("is")
            if scope.get("in").is_none()
                && scope.get("entity_type").and_then(Value::as_str)
                    == Some("Tessera::Resource") =>
        {
            None
        }
        _ => Some(Atom::Opaque),
    }
}

/// The id of a literal entity `{"type": …, "id": …}` (or `{"__entity": …}`).
fn entity_id(v: Option<&Value>) -> Option<String> {
    let v = v?;
    let v = v.get("__entity").unwrap_or(v);
    v.get("id").and_then(Value::as_str).map(str::to_owned)
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

fn entity_value(v: &Value) -> Option<String> {
    v.get("Value")
        .and_then(|x| x.get("__entity"))
        .and_then(|e| e.get("id"))
        .and_then(Value::as_str)
        .map(str::to_owned)
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

const BOOLEAN_OPS: [&str; 13] = [
    "in",
    "<",
    "<=",
    ">",
    ">=",
    "contains",
    "containsAll",
    "containsAny",
    "isEmpty",
    "hasTag",
    "has",
    "is",
    "like",
];

/// Rewrites `e` in place, replacing path conditions by atoms. Returns true when `e`
/// still reads the resource's path or identity in a way that must be wrapped by
/// the nearest enclosing boolean expression.
fn rewrite(e: &mut Value, atoms: &mut Vec<Atom>) -> bool {
    if is_var_resource(e) {
        return true;
    }
    let Some((op, inner)) = node(e) else {
        return generic(e, atoms);
    };
    match op.as_str() {
        "Value" => false,
        "." => {
            let attr = inner
                .get("attr")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            match inner.get_mut("left") {
                Some(left) if is_var_resource(left) => !matches!(attr.as_str(), "backend" | "kind"),
                Some(left) => rewrite(left, atoms),
                None => false,
            }
        }
        "has" if inner.get("left").is_some_and(is_var_resource) => false,
        "is" if inner.get("left").is_some_and(is_var_resource) && inner.get("in").is_none() => {
            false
        }
        "==" | "!=" => {
            let atom = {
                let (l, r) = (inner.get("left"), inner.get("right"));
                match (l, r) {
                    (Some(l), Some(r)) => eq_atom(l, r).or_else(|| eq_atom(r, l)),
                    _ => None,
                }
            };
            if let Some(atom) = atom {
                let r = atom_ref(atoms, atom);
                *e = if op == "!=" {
                    json!({"!": {"arg": r}})
                } else {
                    r
                };
                return false;
            }
            wrap_if_tainted(e, atoms)
        }
        "like" => {
            if inner.get("left").is_some_and(is_resource_path) {
                let pattern = inner.get("pattern").map(like_pattern);
                let atom = pattern.flatten().map_or(Atom::Opaque, Atom::Like);
                *e = atom_ref(atoms, atom);
                return false;
            }
            wrap_if_tainted(e, atoms)
        }
        "&&" | "||" => {
            for side in ["left", "right"] {
                if let Some(child) = inner.get_mut(side) {
                    if rewrite(child, atoms) {
                        *child = atom_ref(atoms, Atom::Opaque);
                    }
                }
            }
            false
        }
        "!" => {
            if let Some(child) = inner.get_mut("arg") {
                if rewrite(child, atoms) {
                    *child = atom_ref(atoms, Atom::Opaque);
                }
            }
            false
        }
        "if-then-else" => {
            let mut tainted = false;
            if let Some(cond) = inner.get_mut("if") {
                if rewrite(cond, atoms) {
                    *cond = atom_ref(atoms, Atom::Opaque);
                }
            }
            for side in ["then", "else"] {
                if let Some(child) = inner.get_mut(side) {
                    tainted |= rewrite(child, atoms);
                }
            }
            tainted
        }
        op if BOOLEAN_OPS.contains(&op) => wrap_if_tainted(e, atoms),
        _ => generic(e, atoms),
    }
}

/// Rewrites the children of a boolean node; if any still reads the resource, the
/// whole node becomes an opaque atom.
fn wrap_if_tainted(e: &mut Value, atoms: &mut Vec<Atom>) -> bool {
    if generic(e, atoms) {
        *e = atom_ref(atoms, Atom::Opaque);
    }
    false
}

/// Rewrites every nested expression; true when one still reads the resource.
fn generic(e: &mut Value, atoms: &mut Vec<Atom>) -> bool {
    if is_var_resource(e) {
        return true;
    }
    match e {
        Value::Object(map) => {
            let mut tainted = false;
            for (k, child) in map.iter_mut() {
                if k == "Value" {
                    continue;
                }
                tainted |= match child {
                    Value::Object(_) => rewrite(child, atoms),
                    Value::Array(_) => generic(child, atoms),
                    _ => false,
                };
            }
            tainted
        }
        Value::Array(items) => {
            let mut tainted = false;
            for child in items.iter_mut() {
                tainted |= rewrite(child, atoms);
            }
            tainted
        }
        _ => false,
    }
}

fn eq_atom(path_side: &Value, other: &Value) -> Option<Atom> {
    if is_resource_path(path_side) {
        return Some(string_value(other).map_or(Atom::Opaque, |s| Atom::Eq(s.to_owned())));
    }
    if is_var_resource(path_side) {
        return Some(entity_value(other).map_or(Atom::Opaque, Atom::Uid));
    }
    None
}

/// A `like` pattern in the JSON form: `"Wildcard"` or `{"Literal": "…"}`.
fn like_pattern(v: &Value) -> Option<Vec<LikeElem>> {
    let mut out = Vec::new();
    for e in v.as_array()? {
        match e {
            Value::String(s) if s == "Wildcard" => out.push(LikeElem::Star),
            Value::Object(m) => {
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
                let covered = self.inclusion_grants && glob::covers(p, &self.elems);
                if covered || glob::names_explicitly(p, &self.elems) {
                    Tri::True
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
            Tri::True
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
    /// attributes on the resource and returns the ids of the satisfied ones.
    pub(super) fn holds(
        &self,
        set: &SetRequest<'_>,
        mut satisfied: impl FnMut(
            HashMap<String, RestrictedExpression>,
        ) -> Result<HashSet<String>, String>,
    ) -> Result<Vec<Holds>, String> {
        let mut values = vec![Tri::False; self.atom_count];
        for p in &self.policies {
            for (n, atom) in &p.atoms {
                values[*n] = set.value(atom);
            }
        }
        let unknown: Vec<usize> = self
            .policies
            .iter()
            .map(|p| {
                p.atoms
                    .iter()
                    .filter(|(n, _)| values[*n] == Tri::Unknown)
                    .count()
            })
            .collect();
        // A policy with too many unknown atoms may hold and need not.
        let mut holds: Vec<Holds> = unknown
            .iter()
            .map(|u| Holds {
                may: *u > MAX_UNKNOWN,
                must: *u <= MAX_UNKNOWN,
            })
            .collect();
        let widest = unknown.iter().copied().filter(|u| *u <= MAX_UNKNOWN).max();
        // Round t gives each policy with u unknown atoms assignment t mod 2^u (bit k
        // is its k-th unknown atom); only rounds t < 2^u are new for that policy.
        for t in 0..1usize << widest.unwrap_or(0) {
            let mut attrs = HashMap::with_capacity(self.atom_count);
            for (policy, u) in self.policies.iter().zip(&unknown) {
                let index = if *u <= MAX_UNKNOWN { t % (1 << u) } else { 0 };
                let mut k = 0;
                for (n, _) in &policy.atoms {
                    let v = match values[*n] {
                        Tri::True => true,
                        Tri::False => false,
                        Tri::Unknown => {
                            k += 1;
                            (index >> (k - 1)) & 1 == 1
                        }
                    };
                    attrs.insert(atom_attr(*n), RestrictedExpression::new_bool(v));
                }
            }
            let sat = satisfied(attrs)?;
            for ((policy, u), h) in self.policies.iter().zip(&unknown).zip(holds.iter_mut()) {
                if *u <= MAX_UNKNOWN && t < (1 << u) {
                    let yes = sat.contains(&policy.id);
                    h.may |= yes;
                    h.must &= yes;
                }
            }
        }
        // Where the wildcard must be named explicitly (database `*`), a permit
        // grants the set only through a condition that names it: one that does
        // not read the path at all ("every table of pg-main") would otherwise
        // grant every table at once.
        if !set.inclusion_grants {
            for (policy, h) in self.policies.iter().zip(holds.iter_mut()) {
                if !policy.forbid {
                    h.must &= policy.atoms.iter().any(|(n, _)| values[*n] == Tri::True);
                }
            }
        }
        Ok(holds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn atoms_of(policy_text: &str) -> Vec<Atom> {
        let p: Policy = policy_text.parse().unwrap_or_else(|e| panic!("{e}"));
        let mut est = p.to_json().unwrap_or_else(|e| panic!("{e}"));
        let mut atoms = Vec::new();
        rewrite_policy(&mut est, &mut atoms);
        let text = est.to_string();
        assert!(
            !text.contains(r#""attr":"path""#),
            "the variant still reads the path: {text}"
        );
        atoms
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
        // The backend and the kind are not the path: evaluated as they are.
        let a = atoms_of(
            r#"forbid (principal, action, resource) when { resource.kind == "token" && resource has backend };"#,
        );
        assert!(a.is_empty(), "{a:?}");
    }
}
