//! Files and folders that hold secrets (a KEK, an admin token): created so
//! only their owner can read them, and, when found, trusted only if this user
//! owns them and no one else could have written them.
//!
//! Why one module: the dev broker's data folder, `tessera init` and `tessera
//! login` all make such files, and each must refuse the same planted folder or
//! file; one rule, said the same way, in one place.

use anyhow::{bail, Context};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Creates `path` (it must not exist) with mode 0600, holding `contents` and a
/// newline, synced to disk.
pub fn write_new(path: &Path, contents: &str) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(contents.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    Ok(())
}

/// Creates `dir` (and its parents) with mode 0700, or accepts an existing one
/// only if this user owns it and its mode has none of the `forbidden` bits;
/// otherwise an error naming its owner and mode, then `refusal`.
pub fn make_dir(dir: &Path, forbidden: u32, refusal: &str) -> anyhow::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let meta = std::fs::metadata(dir).with_context(|| format!("{}", dir.display()))?;
    refuse_foreign(dir, &meta, forbidden, refusal)
}

/// Refuses `meta` (of `path`) unless this user owns it, it is a regular file
/// or a folder, and its mode has none of the `forbidden` bits.
pub fn refuse_foreign(
    path: &Path,
    meta: &std::fs::Metadata,
    forbidden: u32,
    refusal: &str,
) -> anyhow::Result<()> {
    let kind_ok = meta.file_type().is_file() || meta.file_type().is_dir();
    if !kind_ok || meta.uid() != nix::unistd::geteuid().as_raw() || meta.mode() & forbidden != 0 {
        bail!(
            "{}: uid {}, mode {:o}: {refusal}",
            path.display(),
            meta.uid(),
            meta.mode() & 0o7777
        );
    }
    Ok(())
}
