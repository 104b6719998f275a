//! `[backends.NAME]` with `kind = "oauth-resource"`: a protected resource (an
//! MCP server, any OAuth resource server) that runs obtain access tokens for at
//! `POST /oauth/token`.
//!
//! `resource` is the RFC 8707 resource indicator: the URL a token request must
//! name, byte for byte, and every token's `aud`. `scopes` are the actions
//! tokens may carry. The introspection secret is the resource server's
//! credential at `POST /oauth/introspect`, read when `serve` starts.

use super::grammar;
use crate::backends::secret::{self, SecretSource};
use crate::grammar::parse_duration;
use crate::settings::{err, parse_table, ConfigError, EnvLookup, RawTable};
use secrecy::SecretString;
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOAuthResource {
    #[allow(dead_code)]
    kind: String,
    resource: Option<String>,
    scopes: Option<Vec<String>>,
    max_ttl: Option<String>,
    introspection_secret_env: Option<String>,
    introspection_secret_file: Option<PathBuf>,
}

/// Longest lifetime an access token gets when `max_ttl` is not set.
pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(15 * 60);

/// A validated `oauth-resource` backend.
#[derive(Debug, Clone)]
pub struct OAuthResourceConfig {
    /// The resource indicator and audience (an absolute `https://` URL, or
    /// `http://` on loopback), without fragment.
    pub resource: String,
    /// The scopes (actions) tokens for it may carry.
    pub scopes: Vec<String>,
    /// No token for it lives longer.
    pub max_ttl: Duration,
    /// Where the resource server's introspection secret comes from; `None`:
    /// it cannot introspect.
    pub introspection: Option<SecretSource>,
    /// Read by [`resolve_credentials`] (`serve` only).
    pub introspection_secret: Option<Arc<SecretString>>,
}

impl OAuthResourceConfig {
    /// As policy simulation models one without a configuration: any resource
    /// URL and any scope of the grammar (no scopes listed).
    pub fn unconfigured() -> OAuthResourceConfig {
        OAuthResourceConfig {
            resource: "https://resource.invalid/".to_owned(),
            scopes: Vec::new(),
            max_ttl: DEFAULT_MAX_TTL,
            introspection: None,
            introspection_secret: None,
        }
    }
}

pub fn resolve(setting: &str, table: RawTable) -> Result<OAuthResourceConfig, ConfigError> {
    let b: RawOAuthResource = parse_table(setting, table)?;
    let key = |k: &str| format!("{setting}.{k}");
    let resource = b
        .resource
        .ok_or_else(|| err(&key("resource"), "required for kind \"oauth-resource\""))?;
    if !grammar::is_resource_url(&resource) {
        return Err(err(
            &key("resource"),
            "must be an absolute https:// URL (http:// only on loopback) without \
             credentials, query or fragment, at most 256 bytes",
        ));
    }
    let scopes = b
        .scopes
        .ok_or_else(|| err(&key("scopes"), "required: the scopes tokens may carry"))?;
    if scopes.is_empty() || scopes.len() > 64 {
        return Err(err(&key("scopes"), "name 1 to 64 scopes"));
    }
    for s in &scopes {
        if !grammar::is_scope(s) {
            return Err(err(
                &key("scopes"),
                format!("{s:?}: a scope is 1-64 of [A-Za-z0-9_.:-], starting with a letter"),
            ));
        }
    }
    let max_ttl = match b.max_ttl.as_deref() {
        None => DEFAULT_MAX_TTL,
        Some(t) => {
            let d = parse_duration(t).map_err(|e| err(&key("max_ttl"), e.to_string()))?;
            if d.as_secs() == 0 || d > Duration::from_secs(24 * 3600) {
                return Err(err(&key("max_ttl"), "must be between 1s and 24h"));
            }
            d
        }
    };
    let introspection = SecretSource::pick(
        setting,
        "introspection_secret",
        b.introspection_secret_env.as_ref(),
        b.introspection_secret_file.as_ref(),
    )?;
    Ok(OAuthResourceConfig {
        resource,
        scopes,
        max_ttl,
        introspection,
        introspection_secret: None,
    })
}

/// Reads the introspection secret (`serve` only). It must be long enough not
/// to be guessed: at least 32 characters.
pub fn resolve_credentials(
    setting: &str,
    config: &mut OAuthResourceConfig,
    env: EnvLookup<'_>,
) -> Result<(), ConfigError> {
    let Some(source) = &config.introspection else {
        return Ok(());
    };
    let value = secret::read(setting, "introspection_secret", source, env)?;
    if value.len() < 32 {
        return Err(err(
            setting,
            "the introspection secret must be at least 32 characters",
        ));
    }
    config.introspection_secret = Some(Arc::new(SecretString::from(value)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> RawTable {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn a_resource_is_one_url_with_its_scopes() {
        let c = resolve(
            "backends.notes",
            table(
                r#"kind = "oauth-resource"
                   resource = "https://notes.example/mcp"
                   scopes = ["notes:read"]
                   max_ttl = "5m""#,
            ),
        )
        .unwrap();
        assert_eq!(c.resource, "https://notes.example/mcp");
        assert_eq!(c.max_ttl, Duration::from_secs(300));
        for bad in [
            r#"resource = "http://notes.example/mcp""#,
            r#"resource = "https://notes.example/mcp#x""#,
            r#"resource = "https://notes.example/mcp?a=b""#,
            r#"resource = "https://user:pw@notes.example/""#,
            r#"resource = "notes.example""#,
        ] {
            let text = format!("kind = \"oauth-resource\"\nscopes = [\"a\"]\n{bad}");
            assert!(resolve("backends.notes", table(&text)).is_err(), "{bad}");
        }
        let text =
            "kind = \"oauth-resource\"\nresource = \"https://n.example/\"\nscopes = [\"a b\"]";
        assert!(resolve("backends.notes", table(text)).is_err());
    }

    #[test]
    fn a_short_introspection_secret_is_refused() {
        let mut c = resolve(
            "backends.notes",
            table(
                r#"kind = "oauth-resource"
                   resource = "https://notes.example/mcp"
                   scopes = ["notes:read"]
                   introspection_secret_env = "NOTES_SECRET""#,
            ),
        )
        .unwrap();
        let short = |_: &str| Some("short".to_owned());
        assert!(resolve_credentials("backends.notes", &mut c, &short).is_err());
        let long = |_: &str| Some("x".repeat(40));
        resolve_credentials("backends.notes", &mut c, &long).unwrap();
        assert!(c.introspection_secret.is_some());
        assert!(!format!("{c:?}").contains(&"x".repeat(40)));
    }
}
