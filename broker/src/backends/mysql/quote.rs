//! The one place MySQL/MariaDB identifiers and literals are quoted.
//!
//! Every name and value the MySQL backend puts into a statement passes through
//! [`ident`] or [`literal`]. Backslash is refused rather than escaped: whether
//! `\` escapes inside a string depends on the server's `NO_BACKSLASH_ESCAPES`
//! mode, so no single escaping is right on every server, and nothing the broker
//! generates (names from strict grammars, hex password hashes) contains one.

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("value cannot be quoted for MySQL (NUL or backslash)")]
pub struct Unquotable;

/// `` `name` ``, with `` ` `` doubled.
pub fn ident(name: &str) -> Result<String, Unquotable> {
    if name.is_empty() || name.contains(['\0', '\\']) {
        return Err(Unquotable);
    }
    Ok(format!("`{}`", name.replace('`', "``")))
}

/// A database name as the `db` of a database-level grant (`` GRANT … ON `db`.* ``):
/// there `_` and `%` are wildcards, so a grant on `a_b`.* would also open
/// `aXb`. Each is escaped as `\_` / `\%` inside the backticks — the grant
/// tables' own escape, which `NO_BACKSLASH_ESCAPES` does not change (it
/// governs string literals, not identifiers). Any other backslash is refused.
pub fn grant_database(name: &str) -> Result<String, Unquotable> {
    if name.is_empty() || name.contains(['\0', '\\']) {
        return Err(Unquotable);
    }
    let escaped = name
        .replace('`', "``")
        .replace('_', "\\_")
        .replace('%', "\\%");
    Ok(format!("`{escaped}`"))
}

/// `'value'`, with `'` doubled.
pub fn literal(value: &str) -> Result<String, Unquotable> {
    if value.contains(['\0', '\\']) {
        return Err(Unquotable);
    }
    Ok(format!("'{}'", value.replace('\'', "''")))
}

/// An account: `'user'@'host'`. `host` is the operator's `account_host`
/// pattern, already checked by [`is_host_pattern`].
pub fn account(user: &str, host: &str) -> Result<String, Unquotable> {
    Ok(format!("{}@{}", literal(user)?, literal(host)?))
}

/// What `account_host` may be: a host name, an IP address, or a pattern of
/// them with `%`/`_` wildcards (netmask forms like `10.0.0.0/255.0.0.0` are
/// not accepted: a `/` is not in the set). 1–255 bytes.
pub fn is_host_pattern(host: &str) -> bool {
    (1..=255).contains(&host.len())
        && host
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b':' | b'_' | b'%' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_identifiers_and_literals() {
        assert_eq!(ident("orders").unwrap(), "`orders`");
        assert_eq!(ident("a`b").unwrap(), "`a``b`");
        assert_eq!(ident("a\\b"), Err(Unquotable));
        assert_eq!(literal("it's").unwrap(), "'it''s'");
        assert_eq!(literal("a\\"), Err(Unquotable));
        assert_eq!(literal("a\0"), Err(Unquotable));
        assert_eq!(account("tsr_x", "%").unwrap(), "'tsr_x'@'%'");
        assert_eq!(account("tsr_x", "10.0.%").unwrap(), "'tsr_x'@'10.0.%'");
        assert!(is_host_pattern("%") && is_host_pattern("10.0.%") && is_host_pattern("::1"));
        for bad in ["", "a b", "a'b", "a\\b", "10.0.0.0/8", "x;"] {
            assert!(!is_host_pattern(bad), "{bad}");
        }
        assert_eq!(grant_database("rt_my_main").unwrap(), "`rt\\_my\\_main`");
        assert_eq!(grant_database("a%b").unwrap(), "`a\\%b`");
        assert_eq!(grant_database("a\\_b"), Err(Unquotable));
    }
}
