//! What the resource grammars of every backend kind share.
//!
//! Each kind owns its action vocabulary and path grammar (`token::grammar`,
//! `aws::grammar`, `database`); `resource` splits `BACKEND:PATH` and hands the
//! path and action to the backend's kind. The rules here are the ones no kind may
//! loosen, so they are written once.

/// Longest action accepted, of any kind.
pub const MAX_ACTION_LEN: usize = 64;

/// One spelling per resource: no empty, `.` or `..` segment between `/` (each is
/// a spelling a downstream may normalise to another path: `a//b`, `a/./b`,
/// `a/b/.`, `a/x/../b` all name `a/b` somewhere), and no `**` (the same set as
/// `*`). Every kind whose paths have `/` segments is held to this.
pub fn is_canonical(s: &str) -> bool {
    !s.split('/')
        .any(|seg| seg.is_empty() || seg == "." || seg == "..")
        && !s.contains("**")
}
