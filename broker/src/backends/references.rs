//! Checks across backends: what one `[backends.NAME]` table names in another,
//! and what no two may share.
//!
//! Why its own file: each kind's `settings` module checks its own table and
//! knows nothing of the others (they are leaves under [`super::settings`], which
//! knows every kind). A check that reads the whole map needs
//! [`BackendConfig`], so it lives above both, and `config` calls it once the
//! map is built.

use super::http::settings::{Auth, HostPattern};
use super::settings::BackendConfig;
use crate::settings::{err, ConfigError};

/// Checks what a rule names elsewhere in the configuration: its token or AWS
/// backend exists and has that kind, and no two rules claim one host.
pub fn check_references(
    backends: &std::collections::BTreeMap<String, BackendConfig>,
) -> Result<(), ConfigError> {
    let mut claimed: Vec<(&str, &HostPattern)> = Vec::new();
    for (name, b) in backends {
        let BackendConfig::Http(h) = b else { continue };
        let setting = format!("backends.{name}");
        match &h.auth {
            Auth::Token { backend }
                if !matches!(backends.get(backend), Some(BackendConfig::Token(_))) =>
            {
                return Err(err(
                    &format!("{setting}.token_backend"),
                    format!("{backend:?} is not a backend of kind \"token\""),
                ));
            }
            Auth::SigV4 { backend, .. }
                if !matches!(backends.get(backend), Some(BackendConfig::AwsSts(_))) =>
            {
                return Err(err(
                    &format!("{setting}.aws_backend"),
                    format!("{backend:?} is not a backend of kind \"aws-sts\""),
                ));
            }
            _ => {}
        }
        for host in &h.hosts {
            if let Some((other, _)) = claimed.iter().find(|(_, p)| {
                p.port == host.port
                    && (p.matches(host.subtree(), host.port)
                        || host.matches(p.subtree(), p.port)
                        || p.name == host.name)
            }) {
                return Err(err(
                    &format!("{setting}.hosts"),
                    format!(
                        "{} is also a host of backends.{other}: one rule per host",
                        host.name
                    ),
                ));
            }
            claimed.push((name, host));
        }
    }
    Ok(())
}

/// Two backends may not claim one resource URL: a token request names exactly
/// one. Nor may a `token` backend's audience be one: its tokens are `at+jwt`
/// signed by the same keys, and a resource server that checks `aud` locally
/// would take one for an access token policy decided for its resource.
pub fn check_unique(
    backends: &std::collections::BTreeMap<String, BackendConfig>,
) -> Result<(), ConfigError> {
    let mut seen: std::collections::BTreeMap<&str, &str> = Default::default();
    for (name, b) in backends {
        if let BackendConfig::OAuthResource(r) = b {
            if let Some(other) = seen.insert(&r.resource, name) {
                return Err(err(
                    &format!("backends.{name}.resource"),
                    format!("backends.{other} already names {:?}", r.resource),
                ));
            }
        }
    }
    for (name, b) in backends {
        if let BackendConfig::Token(t) = b {
            if let Some(other) = seen.get(t.audience.as_str()) {
                return Err(err(
                    &format!("backends.{name}.audience"),
                    format!(
                        "{:?} is the resource of the oauth-resource backends.{other}: \
                         its tokens would pass there as access tokens",
                        t.audience
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::oauth::settings as oauth;
    use crate::settings::RawTable;

    fn table(text: &str) -> RawTable {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn a_token_backends_audience_may_not_be_a_resource() {
        let resource = oauth::resolve(
            "backends.notes",
            table(
                "kind = \"oauth-resource\"\nresource = \"https://n.example/mcp\"\nscopes = [\"a\"]",
            ),
        )
        .unwrap();
        let mut backends = std::collections::BTreeMap::from([(
            "notes".to_owned(),
            BackendConfig::OAuthResource(resource.clone()),
        )]);
        assert!(check_unique(&backends).is_ok());
        backends.insert(
            "svc".to_owned(),
            BackendConfig::Token(crate::backends::token::TokenConfig {
                audience: "https://n.example/mcp".to_owned(),
                actions: None,
            }),
        );
        let e = check_unique(&backends).unwrap_err();
        assert!(e.to_string().contains("backends.svc.audience"), "{e}");
        backends.remove("svc");
        backends.insert("notes2".to_owned(), BackendConfig::OAuthResource(resource));
        assert!(
            check_unique(&backends).is_err(),
            "two backends, one resource"
        );
    }
}
