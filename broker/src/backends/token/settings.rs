//! `[backends.NAME]` with `kind = "token"`: the audience the tokens are for and,
//! optionally, the actions they may carry. Nothing here is a secret: the tokens
//! are signed with the broker's own keys.

use super::grammar;
use crate::settings::{err, parse_table, ConfigError, RawTable};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTokenBackend {
    #[allow(dead_code)]
    kind: String,
    audience: Option<String>,
    actions: Option<Vec<String>>,
}

/// A validated `token` backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenConfig {
    /// The `aud` of every token: the one service that accepts them.
    pub audience: String,
    /// Actions this backend may issue for; `None`: any of the kind's grammar.
    pub actions: Option<Vec<String>>,
}

impl TokenConfig {
    /// A backend as policy simulation sees one without a configuration: any
    /// action of the kind's grammar, a placeholder audience.
    pub fn unconfigured() -> TokenConfig {
        TokenConfig {
            audience: "policy-test".to_owned(),
            actions: None,
        }
    }
}

/// Checks the table's keys; errors name the setting (`{setting}.audience`).
pub fn resolve(setting: &str, table: RawTable) -> Result<TokenConfig, ConfigError> {
    let b: RawTokenBackend = parse_table(setting, table)?;
    let audience = b.audience.ok_or_else(|| {
        err(
            &format!("{setting}.audience"),
            "required for kind \"token\"",
        )
    })?;
    if audience.is_empty()
        || audience.len() > 256
        || audience
            .chars()
            .any(|c| c.is_control() || c.is_whitespace())
    {
        return Err(err(
            &format!("{setting}.audience"),
            "must be 1-256 characters without spaces",
        ));
    }
    if let Some(actions) = &b.actions {
        for a in actions {
            if !grammar::is_action(a) {
                return Err(err(
                    &format!("{setting}.actions"),
                    format!("invalid action name {a:?}"),
                ));
            }
        }
    }
    Ok(TokenConfig {
        audience,
        actions: b.actions,
    })
}
