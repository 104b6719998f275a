//! Where the store lives: the one setting the store takes from the
//! configuration, defined here so the store imports nothing of `config`
//! (`config` parses `store` into it and re-exports it).

use std::path::PathBuf;

/// Where the store lives.
#[derive(Clone)]
pub enum StoreUrl {
    Sqlite(PathBuf),
    Postgres(secrecy::SecretString),
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreUrl::Sqlite(p) => write!(f, "Sqlite({})", p.display()),
            StoreUrl::Postgres(_) => f.write_str("Postgres([redacted])"),
        }
    }
}
