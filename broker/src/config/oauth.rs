//! `[oauth]`: Tessera as an OAuth 2 authorization server (docs/oauth.md).
//!
//! `issuer` is the broker's public base URL: the RFC 8414 issuer (access
//! tokens' `iss`, what resource servers compare), the base of the metadata's
//! endpoints, and what every DPoP proof's `htu` must name. It cannot be
//! guessed from a request (a `Host` header is the client's to choose), so it is
//! configured; `serve --dev` takes its own listener's URL.

use super::{err, ConfigError};
use serde::Deserialize;
use std::net::SocketAddr;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOAuth {
    issuer: Option<String>,
    dpop_nonce: Option<bool>,
}

#[derive(Debug, Clone, Default)]
pub struct OAuthConfig {
    /// The public base URL; `None`: no OAuth endpoints, no DPoP.
    pub issuer: Option<String>,
    /// DPoP proofs must carry a nonce the broker handed out (RFC 9449 §8).
    pub dpop_nonce: bool,
}

impl OAuthConfig {
    /// The URL of `path` on this broker, as a DPoP proof's `htu` names it.
    pub fn url(&self, path: &str) -> Option<String> {
        self.issuer.as_ref().map(|i| format!("{i}{path}"))
    }
}

pub(super) fn resolve(
    raw: RawOAuth,
    env_issuer: Option<String>,
    dev: bool,
    tls: bool,
    listen: SocketAddr,
) -> Result<OAuthConfig, ConfigError> {
    let issuer = env_issuer
        .or(raw.issuer)
        .or_else(|| dev.then(|| format!("{}://{listen}", if tls { "https" } else { "http" })));
    if let Some(i) = &issuer {
        // No path: the RFC 8414 metadata is served at the root only.
        let ok = i.len() <= 200
            && crate::backends::oauth::grammar::is_resource_url(i)
            && !i.ends_with('/')
            && reqwest::Url::parse(i).is_ok_and(|u| u.path() == "/");
        if !ok {
            return Err(err(
                "oauth.issuer",
                "must be the broker's public https:// URL (http:// only on loopback): \
                 scheme, host and port only, no path, trailing slash, query or credentials",
            ));
        }
    }
    Ok(OAuthConfig {
        issuer,
        dpop_nonce: raw.dpop_nonce.unwrap_or(false),
    })
}
