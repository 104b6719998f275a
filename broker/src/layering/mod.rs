//! The import direction between the crate's parts, checked: no circles
//! between files ([`graph`]), and the directions below.
//!
//! Why a test: `config` assembles what the backend kinds resolve, and `resource`
//! hands requests to the kinds' grammars, so the dependencies run
//! `config → backends`, `config → resource → backends`, and every kind depends only
//! on the [`crate::settings`] leaf for what settings need. An import the other way
//! compiles fine (Rust allows module cycles) and would quietly bring the cycle
//! back; this test names the file that does it.

mod graph;

use std::path::{Path, PathBuf};

/// The source files under `dir`, recursively.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// The top-level modules of this crate that `file` names (`crate::config::X`,
/// `use crate::{config, grammar}`), comments left out.
fn crate_modules(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut modules = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or("");
            for item in group.split(',') {
                modules.push(first_segment(item.trim()));
            }
        } else {
            modules.push(first_segment(rest));
        }
    }
    modules.retain(|m| !m.is_empty());
    modules
}

fn first_segment(path: &str) -> String {
    path.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `(file, module)` of `files` that imports one of `forbidden`.
fn offenders(files: &[PathBuf], forbidden: &[&str]) -> Vec<String> {
    files
        .iter()
        .flat_map(|f| {
            crate_modules(f)
                .into_iter()
                .filter(|m| forbidden.contains(&m.as_str()))
                .map(move |m| format!("{} imports crate::{m}", f.display()))
        })
        .collect()
}

#[test]
fn backends_import_neither_config_nor_resource_nor_the_store() {
    let files = sources(&src().join("backends"));
    assert!(files.len() > 10, "{files:?}");
    let bad = offenders(&files, &["config", "resource", "store"]);
    assert!(bad.is_empty(), "{bad:#?}");
}

/// The store's layers point one way: nothing in it knows the HTTP API, the
/// CLI, a backend, the jobs, policy, the server or the configuration (what it
/// needs of them — where it lives, an approval gate's grammar, the open-file
/// limit — are leaves it imports instead).
#[test]
fn the_store_imports_no_api_cli_backend_policy_server_or_config() {
    let files = sources(&src().join("store"));
    assert!(files.len() > 5, "{files:?}");
    let bad = offenders(
        &files,
        &[
            "api", "cli", "backends", "jobs", "policy", "server", "config", "app", "grant",
            "gateway",
        ],
    );
    assert!(bad.is_empty(), "{bad:#?}");
}

/// The gateway is a door like the HTTP API's, not a client of it: what both
/// need (who the run is, the decision, its record) is in [`crate::grant`].
#[test]
fn the_gateway_imports_nothing_from_the_api() {
    let files = sources(&src().join("gateway"));
    assert!(files.len() > 5, "{files:?}");
    let bad = offenders(&files, &["api"]);
    assert!(bad.is_empty(), "{bad:#?}");
}

/// Outside `policy/` (the engine) and `grant/` (the decision layer) no file
/// asks Cedar to decide or reads its decision: a door that did would be a
/// second pipeline, free to disagree with the others.
#[test]
fn only_the_decision_layer_asks_policy_to_decide() {
    let root = src();
    let files: Vec<PathBuf> = sources(&root)
        .into_iter()
        .filter(|f| {
            !f.starts_with(root.join("policy"))
                && !f.starts_with(root.join("grant"))
                && !f.starts_with(root.join("layering"))
        })
        .collect();
    assert!(files.len() > 50, "{files:?}");
    let bad: Vec<String> = files
        .iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let code: String = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            code.contains(".decide(") || code.contains("PolicyDecision")
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        bad.is_empty(),
        "ask crate::grant to decide instead: {bad:#?}"
    );
}

#[test]
fn boxed_is_a_leaf() {
    let file = src().join("boxed.rs");
    let modules = crate_modules(&file);
    assert!(modules.is_empty(), "{} imports {modules:?}", file.display());
}

#[test]
fn resource_does_not_import_config() {
    let bad = offenders(&[src().join("resource.rs")], &["config"]);
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn settings_is_a_leaf() {
    let file = src().join("settings.rs");
    let modules = crate_modules(&file);
    assert!(modules.is_empty(), "{} imports {modules:?}", file.display());
}

#[test]
fn the_check_sees_imports() {
    let dir = std::env::temp_dir().join(format!("tessera-layering-{}", crate::ids::new_id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("probe.rs");
    std::fs::write(
        &file,
        "//! crate::config in a comment is no import\n\
         use crate::{clock::Clock, config};\n\
         fn f() -> crate::resource::ResourceError { todo!() }\n",
    )
    .unwrap();
    assert_eq!(crate_modules(&file), ["clock", "config", "resource"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The audit log's format, chain and verification know nothing of the
/// application or its jobs: taking checkpoints is a job (`jobs::checkpoints`).
#[test]
fn audit_imports_neither_the_application_nor_its_jobs() {
    let files = sources(&src().join("audit"));
    assert!(files.len() > 4, "{files:?}");
    let bad = offenders(&files, &["app", "jobs", "api", "gateway", "grant"]);
    assert!(bad.is_empty(), "{bad:#?}");
}

/// The application state holds no gateway type: the gateway is one of its
/// clients (credential injection's per-run state is `crate::injection`).
#[test]
fn the_application_state_holds_no_gateway_type() {
    let bad = offenders(&[src().join("app.rs")], &["gateway", "api", "jobs"]);
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn no_file_of_the_crate_is_in_an_import_circle() {
    let circles = graph::circles(&src());
    assert!(
        circles.is_empty(),
        "files that import one another (move what both need to a file both import): {circles:#?}"
    );
    assert!(graph::modules(&src()).len() > 150);
}

#[test]
fn the_circle_check_sees_circles_and_only_circles() {
    let dir = std::env::temp_dir().join(format!("tessera-circles-{}", crate::ids::new_id()));
    let files = [
        ("lib.rs", "pub mod a;\npub mod b;\npub mod d;\npub mod p;\n"),
        // a ↔ b, one by `use`, one by an inline path.
        ("a.rs", "use crate::b::B;\npub struct A;\n"),
        ("b.rs", "pub struct B;\nfn f() -> crate::a::A { todo!() }\n"),
        // A module and its own child are not a circle: the parent re-exports,
        // the child uses what the parent defines.
        (
            "p/mod.rs",
            "mod c;\npub use c::{C as Renamed};\npub struct P;\n",
        ),
        // …but a re-export is followed to its file: d → p::Renamed is d → p/c.rs.
        ("p/c.rs", "use super::P;\nuse crate::d::D;\npub struct C;\n"),
        (
            "d.rs",
            "// use crate::b::B; is a comment\nuse crate::p::Renamed;\npub struct D;\n\
             #[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n",
        ),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let mut found: Vec<Vec<String>> = graph::circles(&dir)
        .into_iter()
        .map(|c| {
            let mut c: Vec<String> = c
                .iter()
                .map(|f| f.strip_prefix(&dir).unwrap().display().to_string())
                .collect();
            c.sort();
            c
        })
        .collect();
    found.sort();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(found, [vec!["a.rs", "b.rs"], vec!["d.rs", "p/c.rs"]]);
}

/// `lib.rs`'s `# Layout` names every top-level module, so a new one cannot
/// arrive without saying what it is for.
#[test]
fn the_layout_names_every_top_level_module() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let layout = lib
        .split("//! # Layout")
        .nth(1)
        .expect("lib.rs has a # Layout section");
    let modules: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';'))
        .collect();
    assert!(modules.len() > 30, "{modules:?}");
    let missing: Vec<&&str> = modules
        .iter()
        .filter(|m| !layout.contains(&format!("[`{m}`]")))
        .collect();
    assert!(missing.is_empty(), "not in lib.rs's # Layout: {missing:?}");
}
