//! What an `oauth-resource` backend accepts: its scopes as actions, and as a
//! resource path only its own resource URL.
//!
//! Why the path is the whole URL: a token is for exactly one resource server
//! (its `aud`), so the Cedar resource `NAME:URL` names exactly what the token
//! reaches, and there is no other spelling — the URL is compared byte for
//! byte with the configured one, never normalised, and a wildcard is never a
//! path here.

use crate::backends::grammar::{Invalid, MAX_ACTION_LEN};

/// No path is a set: a token is for one resource.
pub const WILDCARDS: &[char] = &[];
pub const INCLUSION_GRANTS: bool = false;

/// Scopes: 1-64 of `[A-Za-z0-9_.:-]`, starting with a letter (`notes:read`,
/// `tools.call`): what OAuth clients and MCP servers use, nothing that needs
/// quoting in a space-separated `scope`.
pub fn is_scope(s: &str) -> bool {
    (1..=MAX_ACTION_LEN).contains(&s.len())
        && s.as_bytes()[0].is_ascii_alphabetic()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b':' | b'-'))
}

/// An absolute `https://` URL (or `http://` to loopback), without
/// credentials, query or fragment, at most 256 bytes, of visible ASCII.
pub fn is_resource_url(s: &str) -> bool {
    s.len() <= 256
        && s.bytes().all(|c| c.is_ascii_graphic())
        && !s.contains(['?', '#'])
        && crate::settings::is_safe_destination(s)
        && reqwest::Url::parse(s).is_ok_and(|u| u.username().is_empty() && u.password().is_none())
}

/// The path must be the backend's resource URL; the action one of its scopes.
/// With no scopes (a backend the policy tools model without a configuration,
/// [`super::OAuthResourceConfig::unconfigured`]) any resource URL and scope of
/// the grammar is admitted.
pub fn check_resource(
    path: &str,
    action: &str,
    resource: &str,
    scopes: &[String],
) -> Result<(), Invalid> {
    if scopes.is_empty() {
        return match (is_resource_url(path), is_scope(action)) {
            (false, _) => Err(Invalid::Path),
            (true, false) => Err(Invalid::Action),
            (true, true) => Ok(()),
        };
    }
    if path != resource {
        return Err(Invalid::Path);
    }
    if !is_scope(action) || !scopes.iter().any(|s| s == action) {
        return Err(Invalid::Action);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_registered_url_in_its_one_spelling() {
        let scopes = vec!["notes:read".to_owned()];
        let url = "https://notes.example/mcp";
        assert!(check_resource(url, "notes:read", url, &scopes).is_ok());
        for other in [
            "https://NOTES.example/mcp",
            "https://notes.example/mcp/",
            "https://notes.example:443/mcp",
            "https://notes.example/MCP",
            "https://notes.example/*",
        ] {
            assert_eq!(
                check_resource(other, "notes:read", url, &scopes),
                Err(Invalid::Path)
            );
        }
        assert_eq!(
            check_resource(url, "notes:write", url, &scopes),
            Err(Invalid::Action)
        );
    }

    #[test]
    fn unconfigured_backends_admit_any_url_and_scope_of_the_grammar() {
        let url = "https://notes.example/mcp";
        assert!(check_resource(url, "notes:read", "", &[]).is_ok());
        assert_eq!(
            check_resource("notes.example", "notes:read", "", &[]),
            Err(Invalid::Path)
        );
        assert_eq!(
            check_resource("http://notes.example/", "notes:read", "", &[]),
            Err(Invalid::Path)
        );
        assert_eq!(
            check_resource(url, "notes read", "", &[]),
            Err(Invalid::Action)
        );
    }
}
