//! The files of a policy set as text: read from the policy directory, hashed,
//! published to the store as a version, and compiled again by every replica.
//!
//! Why a value of its own: with several replicas the policy in force is the
//! published version, not whatever one replica's directory holds, so the text
//! itself must travel through the store and compile the same everywhere.

use super::load::{build, one, Named};
use super::{PolicyEngine, PolicyLoadError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyFiles {
    pub schema: String,
    pub entities: String,
    /// `(file name, text)` of every `*.cedar` file, in name order.
    pub policies: Vec<(String, String)>,
}

impl PolicyFiles {
    /// Reads `schema.cedarschema`, `entities.json` and every `*.cedar` file of `dir`.
    pub fn read_dir(dir: &Path) -> Result<PolicyFiles, PolicyLoadError> {
        let unreadable = |what: String, e: std::io::Error| {
            one(Named::new(what, "").diag(None, format!("cannot read: {e}"), None))
        };
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|e| unreadable(path.display().to_string(), e))
        };
        let unlisted = |e: std::io::Error| {
            one(Named::new(dir.display().to_string(), "").diag(
                None,
                format!("cannot list policy directory: {e}"),
                None,
            ))
        };
        let mut names: Vec<PathBuf> = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(unlisted)? {
            let path = entry.map_err(unlisted)?.path();
            if path.extension().is_some_and(|x| x == "cedar") && path.is_file() {
                names.push(path);
            }
        }
        names.sort();
        let mut policies = Vec::with_capacity(names.len());
        for path in &names {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let text = read(&name)?;
            policies.push((name, text));
        }
        Ok(PolicyFiles {
            schema: read("schema.cedarschema")?,
            entities: read("entities.json")?,
            policies,
        })
    }

    /// Compiles the set; diagnostics name each file under `shown` (the
    /// directory it was read from, or the version it was published as).
    pub fn compile(&self, shown: &Path) -> Result<PolicyEngine, PolicyLoadError> {
        let name = |n: &str| shown.join(n).display().to_string();
        let files: Vec<(String, String)> = self
            .policies
            .iter()
            .map(|(n, t)| (name(n), t.clone()))
            .collect();
        build(
            &Named::new(name("schema.cedarschema"), &self.schema),
            &files,
            &Named::new(name("entities.json"), &self.entities),
        )
    }

    /// SHA-256 over the names and contents of the files, in name order: the
    /// same value [`fingerprint`] gives for the directory they were read from.
    pub fn sha256(&self) -> String {
        let mut all: Vec<(&str, Result<&[u8], String>)> = vec![
            ("schema.cedarschema", Ok(self.schema.as_bytes())),
            ("entities.json", Ok(self.entities.as_bytes())),
        ];
        all.extend(
            self.policies
                .iter()
                .map(|(n, t)| (n.as_str(), Ok(t.as_bytes()))),
        );
        digest(all)
    }
}

/// SHA-256 over the names and contents of the files a policy load reads
/// (`schema.cedarschema`, `entities.json`, `*.cedar`), in name order: what the
/// file watch compares. Unreadable files hash as their error, so a change to
/// or from unreadable is noticed.
pub fn fingerprint(dir: &Path) -> String {
    let names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n == "schema.cedarschema" || n == "entities.json" || n.ends_with(".cedar"))
            .collect(),
        Err(e) => return crate::ids::sha256_hex(format!("unreadable: {e}").as_bytes()),
    };
    let read: Vec<(String, Result<Vec<u8>, String>)> = names
        .into_iter()
        .map(|n| {
            let bytes = std::fs::read(dir.join(&n)).map_err(|e| format!("unreadable: {e}"));
            (n, bytes)
        })
        .collect();
    digest(
        read.iter()
            .map(|(n, b)| (n.as_str(), b.as_deref().map_err(Clone::clone)))
            .collect(),
    )
}

/// The one encoding both hashes use: for each file in name order, its name,
/// a NUL, then its length and bytes (or, unreadable, the error's text).
fn digest(mut files: Vec<(&str, Result<&[u8], String>)>) -> String {
    files.sort_by(|a, b| a.0.cmp(b.0));
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for (name, content) in files {
        ctx.update(name.as_bytes());
        ctx.update(b"\0");
        match content {
            Ok(bytes) => {
                ctx.update(&(bytes.len() as u64).to_be_bytes());
                ctx.update(bytes);
            }
            Err(e) => ctx.update(e.as_bytes()),
        }
    }
    crate::ids::hex(ctx.finish().as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_of_the_files_is_the_directory_fingerprint() {
        let dir = std::env::temp_dir().join(format!("tsr-files-{}", crate::ids::new_id()));
        crate::policy::example::write_if_missing(&dir).unwrap();
        std::fs::write(dir.join("b.cedar"), "forbid(principal, action, resource);").unwrap();
        let files = PolicyFiles::read_dir(&dir).unwrap();
        assert_eq!(files.sha256(), fingerprint(&dir));
        assert!(files.compile(&dir).is_ok());
        let json = serde_json::to_string(&files).unwrap();
        let back: PolicyFiles = serde_json::from_str(&json).unwrap();
        assert_eq!(back, files);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
