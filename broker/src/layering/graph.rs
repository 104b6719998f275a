//! The import graph between the files of `src/`, and its circles.
//!
//! Why: Rust allows modules to import one another in a circle, and a circle is
//! where a newcomer cannot tell which file comes first; every file of the crate
//! imports only files "below" it. This reads the sources (no compiler help):
//! every `use` and every `crate::`/`super::`/`self::` path outside comments and
//! the trailing `#[cfg(test)]` module, resolved to the file that *defines* the
//! item (a `pub use` re-export is followed to its source). A module's own
//! children are its parts: its uses of them (declaring, re-exporting,
//! dispatching) are not edges; everything else is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The module path of every source file under `root` (`lib.rs` is the crate
/// root, `x/mod.rs` and `x.rs` are `x`); `bin/` is not part of the library.
pub fn modules(root: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut out = BTreeMap::new();
    for file in super::sources(root) {
        let rel = file.strip_prefix(root).unwrap();
        if rel.starts_with("bin") {
            continue;
        }
        let mut path: Vec<String> = rel
            .with_extension("")
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        if matches!(path.last().map(String::as_str), Some("mod" | "lib")) {
            path.pop();
        }
        out.insert(path, file);
    }
    out
}

/// `text` without comments and without the test module that ends a file.
fn code_of(text: &str) -> String {
    let mut code = String::with_capacity(text.len());
    for line in text.lines() {
        let line = match line.find("//") {
            // `//` inside a string literal ("https://…") is not a comment, but
            // what follows it on that line is no path this reads either.
            Some(at) => &line[..at],
            None => line,
        };
        code.push_str(line);
        code.push('\n');
    }
    match code.find("#[cfg(test)]\nmod ") {
        Some(at) => code[..at].to_owned(),
        None => code,
    }
}

/// `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e` (whitespace removed first).
fn expand(path: &str) -> Vec<String> {
    let Some(open) = path.find('{') else {
        return vec![path.to_owned()];
    };
    let (prefix, inner) = (&path[..open], &path[open + 1..path.len() - 1]);
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter(|i| !i.is_empty())
        .flat_map(|i| expand(i).into_iter().map(move |e| format!("{prefix}{e}")))
        .collect()
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Each `use` of `code`, expanded: the path it names and the name it binds
/// (`a::b as c` binds `c`).
fn uses(code: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("use ") {
        if code[..at].ends_with(is_ident) {
            continue;
        }
        let rest = &code[at + 4..];
        let Some(end) = rest.find(';') else { continue };
        let stmt: String = rest[..end]
            .replace(" as ", "@")
            .split_whitespace()
            .collect();
        for item in expand(&stmt) {
            let (path, alias) = match item.split_once('@') {
                Some((p, a)) => (p.to_owned(), Some(a.to_owned())),
                None => (item, None),
            };
            let path = path.strip_suffix("::self").unwrap_or(&path).to_owned();
            let bound = alias.unwrap_or_else(|| path.rsplit("::").next().unwrap_or("").to_owned());
            out.push((path, bound));
        }
    }
    out
}

/// The paths `code` names: each `use`, and each inline path that starts
/// `crate::`, `super::` or `self::`.
fn paths(code: &str) -> Vec<String> {
    let mut out: Vec<String> = uses(code).into_iter().map(|(p, _)| p).collect();
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(start) {
            if code[..at].ends_with(|c: char| is_ident(c) || c == ':') {
                continue;
            }
            let len = code[at..]
                .find(|c: char| !(is_ident(c) || c == ':'))
                .unwrap_or(code.len() - at);
            out.push(code[at..at + len].trim_end_matches(':').to_owned());
        }
    }
    out
}

/// Whether `code` defines an item called `name` itself.
fn defines(code: &str, name: &str) -> bool {
    [
        "fn", "struct", "enum", "trait", "type", "const", "static", "mod", "union",
    ]
    .iter()
    .any(|kw| {
        code.match_indices(&format!("{kw} {name}")).any(|(at, m)| {
            let after = code[at + m.len()..].chars().next();
            !after.is_some_and(is_ident) && !code[..at].ends_with(is_ident)
        })
    }) || code.contains(&format!("macro_rules! {name}"))
}

struct Graph {
    modules: BTreeMap<Vec<String>, PathBuf>,
    code: BTreeMap<Vec<String>, String>,
}

impl Graph {
    /// Absolute segments of `path` as written in module `me`.
    fn absolute(&self, me: &[String], path: &str) -> Option<Vec<String>> {
        let segs: Vec<String> = path
            .split("::")
            .filter(|s| !s.is_empty() && *s != "*")
            .map(str::to_owned)
            .collect();
        let first = segs.first()?;
        Some(match first.as_str() {
            "crate" => segs[1..].to_vec(),
            "self" => me
                .iter()
                .cloned()
                .chain(segs[1..].iter().cloned())
                .collect(),
            "super" => {
                let mut base = me.to_vec();
                let mut rest = &segs[..];
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
                base.into_iter().chain(rest.iter().cloned()).collect()
            }
            child => {
                let mut m = me.to_vec();
                m.push(child.to_owned());
                if !self.modules.contains_key(&m) {
                    return None; // an external crate or a local item
                }
                me.iter().cloned().chain(segs.iter().cloned()).collect()
            }
        })
    }

    /// The module (file) that defines what `segs` names, following re-exports.
    fn resolve(&self, segs: &[String], depth: usize) -> Option<Vec<String>> {
        let n = (0..=segs.len())
            .rev()
            .find(|n| self.modules.contains_key(&segs[..*n]))?;
        let module = segs[..n].to_vec();
        let (Some(name), true) = (segs.get(n), depth < 8) else {
            return Some(module);
        };
        let code = &self.code[&module];
        if defines(code, name) {
            return Some(module);
        }
        for (path, bound) in uses(code) {
            if bound == *name {
                if let Some(abs) = self.absolute(&module, &path) {
                    return self.resolve(&abs, depth + 1);
                }
            }
        }
        Some(module)
    }

    /// Every file's imports of other files, a module's own descendants left out.
    fn edges(&self) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
        let mut edges = BTreeMap::new();
        for (me, code) in &self.code {
            let to: BTreeSet<Vec<String>> = paths(code)
                .iter()
                .filter_map(|p| self.absolute(me, p))
                .filter_map(|abs| self.resolve(&abs, 0))
                .filter(|target| target != me && !target.starts_with(me))
                .collect();
            edges.insert(me.clone(), to);
        }
        edges
    }
}

/// The import circles among the files under `root`: each a list of files
/// that import one another, directly or through the others.
pub fn circles(root: &Path) -> Vec<Vec<PathBuf>> {
    let modules = modules(root);
    let code = modules
        .iter()
        .map(|(m, f)| (m.clone(), code_of(&std::fs::read_to_string(f).unwrap())))
        .collect();
    let graph = Graph { modules, code };
    let edges = graph.edges();
    strongly_connected(&edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| c.iter().map(|m| graph.modules[m].clone()).collect())
        .collect()
}

/// Tarjan's strongly connected components.
fn strongly_connected(
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
) -> Vec<Vec<Vec<String>>> {
    struct State<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on_stack: BTreeSet<&'a Vec<String>>,
        out: Vec<Vec<Vec<String>>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Vec<String>) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.edges.get(v).into_iter().flatten() {
            let Some((w, _)) = s.edges.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            s.out.push(component);
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}
