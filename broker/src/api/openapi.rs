//! The OpenAPI 3.1 document served at `/v1/openapi.json`.
//!
//! Why part of it is generated: the paths and schemas are still written by
//! hand (`openapi.base.json`), but the facts that drifted are now taken from
//! the code at start — the `ErrorCode` schema (every code and its meaning) from
//! [`ErrorCode::ALL`], and `servers` as a relative URL (the document is right
//! for whatever address serves it). Tests check that every code a response
//! documents is one the broker knows, and that every route of the router is
//! documented.

use serde_json::{json, Value};
use std::sync::OnceLock;
use tessera_client::types::ErrorCode;

const BASE: &str = include_str!("openapi.base.json");

/// The document, built once.
pub fn document() -> &'static str {
    static DOC: OnceLock<String> = OnceLock::new();
    DOC.get_or_init(|| build(BASE).to_string())
}

fn build(base: &str) -> Value {
    // The base is checked by a test; an unparsable one would fail it first.
    let mut doc: Value = serde_json::from_str(base).unwrap_or_else(|_| json!({}));
    doc["servers"] = json!([{ "url": "/", "description": "the broker serving this document" }]);
    doc["components"]["schemas"]["ErrorCode"] = error_code_schema();
    doc
}

fn error_code_schema() -> Value {
    let mut description = String::from(
        "Every stable, machine-readable error code the broker returns, with its HTTP status and meaning:\n",
    );
    for code in ErrorCode::ALL {
        let meaning = code.meaning().trim().replace('\n', " ");
        description.push_str(&format!("\n- `{code}` {meaning}"));
    }
    json!({
        "type": "string",
        "description": description,
        "enum": ErrorCode::ALL.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `code` enum a response documents, with where it is.
    fn documented_codes(v: &Value, at: &str, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(map) => {
                if let Some(Value::Array(codes)) = map
                    .get("properties")
                    .and_then(|p| p.get("error"))
                    .and_then(|e| e.get("properties"))
                    .and_then(|p| p.get("code"))
                    .and_then(|c| c.get("enum"))
                {
                    for c in codes {
                        out.push((at.to_owned(), c.as_str().unwrap_or_default().to_owned()));
                    }
                }
                for (k, child) in map {
                    documented_codes(child, &format!("{at}/{k}"), out);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    documented_codes(child, &format!("{at}/{i}"), out);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn every_documented_code_is_one_the_broker_knows() {
        let doc: Value = serde_json::from_str(document()).expect("the base parses");
        let mut found = Vec::new();
        documented_codes(&doc["paths"], "paths", &mut found);
        assert!(found.len() > 50, "the walk found the response enums");
        for (at, code) in found {
            assert!(
                ErrorCode::parse(&code).is_some(),
                "{at}: unknown code {code}"
            );
        }
        let listed = doc["components"]["schemas"]["ErrorCode"]["enum"]
            .as_array()
            .expect("enum")
            .len();
        assert_eq!(listed, ErrorCode::ALL.len());
        assert_eq!(doc["servers"][0]["url"], "/");
    }
}
