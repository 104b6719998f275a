//! `[backends.NAME]` with `kind = "net"`: destinations the egress gateway
//! decides per connection. Nothing to connect to and no secret: the table
//! names the kind and, optionally, the action allow-list (`connect` only).

use super::grammar;
use crate::settings::{err, parse_table, ConfigError, RawTable};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNetBackend {
    #[allow(dead_code)]
    kind: String,
    actions: Option<Vec<String>>,
}

/// A validated `net` backend.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetConfig {
    pub actions: Option<Vec<String>>,
}

pub fn resolve(setting: &str, table: RawTable) -> Result<NetConfig, ConfigError> {
    let b: RawNetBackend = parse_table(setting, table)?;
    if let Some(actions) = &b.actions {
        if let Some(a) = actions.iter().find(|a| *a != grammar::CONNECT) {
            return Err(err(
                &format!("{setting}.actions"),
                format!("invalid action {a:?} (a net backend has one action: \"connect\")"),
            ));
        }
    }
    Ok(NetConfig { actions: b.actions })
}
