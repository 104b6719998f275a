//! What the resource grammars of every backend kind share.
//!
//! Each kind owns its action vocabulary and path grammar (`token::grammar`,
//! `aws::grammar`, `database`); `resource` splits `BACKEND:PATH` and hands the
//! path and action to the backend's kind, whose `check_resource` answers with
//! an [`Invalid`]. The rules here are the ones no kind may
//! loosen, so they are written once.

/// What a kind refuses in a request, before policy; `resource::ResourceError`
/// says it to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// The path is not in the kind's grammar.
    Path,
    /// The action is not in the kind's vocabulary or not on the backend's
    /// allow-list.
    Action,
    /// A database kind's path names another database than the backend's one.
    Database,
}

/// Whether the backend's allow-list (`actions = [...]`; `None`: every action of
/// the kind's grammar) names `action`.
pub fn is_allowed(allow_list: Option<&[String]>, action: &str) -> bool {
    allow_list.is_none_or(|allowed| allowed.iter().any(|a| a == action))
}

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
