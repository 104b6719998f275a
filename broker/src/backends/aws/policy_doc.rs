//! IAM policy documents as types, so every policy the broker sends is built by
//! serde from values — never by pasting strings — and reads back the same way.
//!
//! Only the shapes Tessera writes are modelled: `Action` and `Resource` as one
//! string or a list, and conditions as `operator -> key -> value(s)`. Reading a
//! document written by someone else (the revoked-runs role policy after an admin
//! edited it) keeps unknown statements as opaque JSON rather than failing.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const VERSION: &str = "2012-10-17";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PolicyDocument {
    pub version: String,
    pub statement: Vec<serde_json::Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Effect {
    Allow,
    Deny,
}

/// One string or a list of strings, as IAM accepts both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// `operator -> condition key -> value(s)`, e.g. `DateLessThan -> aws:CurrentTime -> ...`.
pub type Conditions = BTreeMap<String, BTreeMap<String, OneOrMany>>;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Statement {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub sid: Option<String>,
    pub effect: Effect,
    pub action: OneOrMany,
    pub resource: OneOrMany,
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub condition: Conditions,
}

impl PolicyDocument {
    pub fn new(statements: &[Statement]) -> PolicyDocument {
        PolicyDocument {
            version: VERSION.to_owned(),
            statement: statements
                .iter()
                .map(|s| serde_json::to_value(s).unwrap_or(serde_json::Value::Null))
                .collect(),
        }
    }

    /// Compact JSON, the form sent to AWS and measured against its limits.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Characters IAM counts toward a policy size limit: everything but whitespace.
pub fn counted_chars(json: &str) -> usize {
    json.chars().filter(|c| !c.is_whitespace()).count()
}
