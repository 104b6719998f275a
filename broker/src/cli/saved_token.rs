//! The admin token `tessera login` saves: where it lives, how it is written
//! (mode 0600, through a new file renamed over the old one) and how it is read
//! back (refused unless it is this user's with mode 0600).
//!
//! Why its own file: `login` writes the token and [`super::remote`] reads it
//! as the last place an admin token may come from. With the file's rules here,
//! both depend on this leaf and neither on the other (`init` makes its secrets
//! folder by the same rule, [`create_private_dir`]).

use anyhow::Context;
use std::path::{Path, PathBuf};

/// Where `tessera login` keeps the token: `$XDG_CONFIG_HOME/tessera/admin.token`
/// (default `~/.config/tessera/admin.token`).
/// A relative `XDG_CONFIG_HOME` or `HOME` is ignored (the XDG rule): the token
/// would land in whatever folder the command runs in, perhaps a checkout.
pub fn saved_token_file() -> Option<PathBuf> {
    let absolute = |v: String| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    let base = crate::config::process_env("XDG_CONFIG_HOME")
        .and_then(absolute)
        .or_else(|| {
            crate::config::process_env("HOME")
                .and_then(absolute)
                .map(|h| h.join(".config"))
        })?;
    Some(base.join("tessera").join("admin.token"))
}

/// Reads the token `tessera login` saved, refusing a file this user does not
/// own or that others may read (it would not be the token login wrote).
pub fn read_saved_token(path: &Path) -> anyhow::Result<secrecy::SecretString> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot read the saved admin token {}", path.display()))?;
    crate::private_fs::refuse_foreign(
        path,
        &file.metadata()?,
        0o077,
        "the saved admin token must be yours with mode 600 (run `tessera login` again)",
    )?;
    let mut text = zeroize::Zeroizing::new(String::new());
    std::io::Read::read_to_string(&mut &file, &mut text)?;
    Ok(secrecy::SecretString::from(text.trim()))
}

/// Saves `token` at `path` (from [`saved_token_file`]): its folder made (0700)
/// or accepted only if it is ours and others cannot read it, then the file
/// replaced with mode 0600.
pub fn save_token(path: &Path, token: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        create_private_dir(dir, 0o077)?;
    }
    replace_private(path, token)
}

/// `dir` made (0700) or accepted only if it is ours and has none of `forbidden`:
/// a folder another user may write to lets them swap the files in it.
pub fn create_private_dir(dir: &Path, forbidden: u32) -> anyhow::Result<()> {
    crate::private_fs::make_dir(
        dir,
        forbidden,
        "use a folder you own that others cannot write to",
    )
}

/// Writes `contents` to `path` with mode 0600 through a new file renamed over
/// the old one, so the token is never in a file others could read.
fn replace_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", crate::ids::new_id()));
    crate::private_fs::write_new(&tmp, contents)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::Error::new(e).context(format!("saving {}", path.display()))
    })
}
