//! What a `token` backend accepts as an action and as a resource path.
//!
//! Why this shape: the action becomes the token's `scope` and the path its
//! `resource`, both read by a service the broker does not know. So both are plain
//! ASCII with no quoting, spaces or control characters, and a path has one
//! spelling only ([`is_canonical`]): a service that normalises `a//b` to `a/b`
//! must not see a resource policy never decided.

use crate::backends::grammar::{is_allowed, is_canonical, Invalid, MAX_ACTION_LEN};

/// `*` in a path is a wildcard (any run of characters, `/` included).
pub const WILDCARDS: &[char] = &['*'];

/// A permit whose pattern contains a whole set grants it: `like "reports/*"`
/// grants `reports/2026/*` (`resource::inclusion_grants`).
pub const INCLUSION_GRANTS: bool = true;

/// Actions: 1-64 of `[a-z0-9_.-]`, starting with a letter.
pub fn is_action(s: &str) -> bool {
    (1..=MAX_ACTION_LEN).contains(&s.len())
        && s.as_bytes()[0].is_ascii_lowercase()
        && s.bytes().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'.' | b'-')
        })
}

/// Paths: 1-256 of `[A-Za-z0-9._~/@+=-]` plus `*` as a wildcard, in canonical
/// form ([`is_canonical`]).
pub fn is_path(s: &str) -> bool {
    (1..=256).contains(&s.len())
        && s.bytes().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(
                    c,
                    b'.' | b'_' | b'~' | b'/' | b'@' | b'+' | b'=' | b'-' | b'*'
                )
        })
        && is_canonical(s)
}

/// A request's path and action, checked in that order, then against the
/// backend's allow-list.
pub fn check_resource(
    path: &str,
    action: &str,
    allow_list: Option<&[String]>,
) -> Result<(), Invalid> {
    if !is_path(path) {
        return Err(Invalid::Path);
    }
    if !is_action(action) || !is_allowed(allow_list, action) {
        return Err(Invalid::Action);
    }
    Ok(())
}
