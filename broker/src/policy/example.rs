//! The example policy that ships in the repository's `policy/` folder, built into
//! the binary, so `tessera serve --dev` works from any folder (like `vault server
//! -dev`): with no `policy/` to load, the dev broker writes these files to its data
//! directory once and loads them from there, where they can be read, edited and
//! reloaded like any policy folder.

use anyhow::Context;
use std::path::Path;

/// Every file of `policy/`, by its path inside the folder.
pub const FILES: &[(&str, &str)] = &[
    ("README.md", include_str!("../../../policy/README.md")),
    (
        "schema.cedarschema",
        include_str!("../../../policy/schema.cedarschema"),
    ),
    (
        "entities.json",
        include_str!("../../../policy/entities.json"),
    ),
    (
        "analysts.cedar",
        include_str!("../../../policy/analysts.cedar"),
    ),
    ("aws.cedar", include_str!("../../../policy/aws.cedar")),
    (
        "databases.cedar",
        include_str!("../../../policy/databases.cedar"),
    ),
    (
        "deploys.cedar",
        include_str!("../../../policy/deploys.cedar"),
    ),
    ("egress.cedar", include_str!("../../../policy/egress.cedar")),
    ("guards.cedar", include_str!("../../../policy/guards.cedar")),
    ("staff.cedar", include_str!("../../../policy/staff.cedar")),
    (
        "tests/analysts.toml",
        include_str!("../../../policy/tests/analysts.toml"),
    ),
    (
        "tests/aws.toml",
        include_str!("../../../policy/tests/aws.toml"),
    ),
    (
        "tests/databases.toml",
        include_str!("../../../policy/tests/databases.toml"),
    ),
    (
        "tests/deploys.toml",
        include_str!("../../../policy/tests/deploys.toml"),
    ),
    (
        "tests/egress.toml",
        include_str!("../../../policy/tests/egress.toml"),
    ),
    (
        "tests/guards.toml",
        include_str!("../../../policy/tests/guards.toml"),
    ),
    (
        "tests/staff.toml",
        include_str!("../../../policy/tests/staff.toml"),
    ),
];

/// Writes the example policy into `dir` unless `dir` exists (a folder written
/// by an earlier start, perhaps edited since, is left as it is).
pub fn write_if_missing(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        return Ok(());
    }
    for (name, text) in FILES {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The built-in copy is the whole `policy/` folder: a file added there and
    /// not here would make `--dev` outside the checkout enforce something else.
    #[test]
    fn the_built_in_copy_is_the_whole_folder() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policy");
        let mut on_disk = Vec::new();
        for sub in ["", "tests"] {
            for entry in std::fs::read_dir(root.join(sub)).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_file() {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    on_disk.push(if sub.is_empty() {
                        name
                    } else {
                        format!("{sub}/{name}")
                    });
                }
            }
        }
        on_disk.sort();
        let mut built_in: Vec<String> = FILES.iter().map(|(n, _)| (*n).to_owned()).collect();
        built_in.sort();
        assert_eq!(built_in, on_disk);
    }

    #[test]
    fn the_built_in_copy_loads() {
        let dir = std::env::temp_dir().join(format!("tessera-example-{}", crate::ids::new_id()));
        write_if_missing(&dir).unwrap();
        let engine = crate::policy::PolicyEngine::load_dir(&dir).unwrap();
        assert!(engine.policy_count() > 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
