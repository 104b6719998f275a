//! The arguments of an action, and the hash that binds a capability to them.
//!
//! Why: an approval is worth only what it approved. A request may say exactly
//! what will be done (`{"service": "web", "commit": "4f2a9c1"}`); the broker
//! shows the approver these arguments, and the capability issued afterwards
//! carries their hash (claim `args`). The service that performs the action
//! hashes the arguments it was asked to act on and compares ([`verify_arguments`]),
//! so a capability approved for one deploy cannot be spent on another.
//!
//! The hash is SHA-256, as lowercase hex, of the RFC 8785 (JCS) canonical form:
//! object members sorted by the UTF-16 code units of their names, no
//! whitespace, strings escaped as ECMAScript's `JSON.stringify` does. Numbers
//! are restricted to integers of magnitude at most 2^53 − 1 (I-JSON's safe
//! range), whose JCS form is their plain decimal; a fraction or a larger
//! number is refused, because its text would have to be reproduced exactly by
//! every verifier in every language — write amounts as strings (`"12.50"`).
//! Any other JCS implementation gives the same bytes for what this accepts.

use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// Largest canonical form accepted, in bytes.
pub const MAX_CANONICAL_BYTES: usize = 16 * 1024;
/// Deepest nesting accepted (the top-level object is depth 1).
pub const MAX_DEPTH: usize = 16;
/// Largest integer magnitude: 2^53 − 1.
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// Why a value cannot be canonicalised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgumentsError(pub String);

impl std::fmt::Display for ArgumentsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ArgumentsError {}

/// The JCS form of `value`, which must be a JSON object.
pub fn canonical(value: &serde_json::Value) -> Result<String, ArgumentsError> {
    if !value.is_object() {
        return Err(ArgumentsError("arguments must be a JSON object".into()));
    }
    let mut out = String::new();
    write_value(&mut out, value, 1, "arguments")?;
    if out.len() > MAX_CANONICAL_BYTES {
        return Err(ArgumentsError(format!(
            "arguments are {} bytes in canonical form; at most {MAX_CANONICAL_BYTES}",
            out.len()
        )));
    }
    Ok(out)
}

/// SHA-256 (lowercase hex) of a canonical form.
pub fn hash_canonical(canonical: &str) -> String {
    let digest = Sha256::digest(canonical.as_bytes());
    let mut hex = String::with_capacity(64);
    for b in digest {
        // Writing to a String cannot fail.
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// The `args` hash of `value`: SHA-256 of its JCS form.
pub fn hash(value: &serde_json::Value) -> Result<String, ArgumentsError> {
    canonical(value).map(|c| hash_canonical(&c))
}

/// Whether `args` (a capability's `args` claim, from `POST /v1/introspect` or a
/// verified token) binds exactly `arguments`. A capability without the claim
/// binds no arguments and never verifies. The comparison is in constant time.
pub fn verify_arguments(
    args: Option<&str>,
    arguments: &serde_json::Value,
) -> Result<(), ArgumentsError> {
    let Some(claimed) = args else {
        return Err(ArgumentsError(
            "the capability is bound to no arguments (no args claim)".into(),
        ));
    };
    let actual = hash(arguments)?;
    let same = claimed.len() == actual.len()
        && claimed
            .bytes()
            .zip(actual.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if same {
        Ok(())
    } else {
        Err(ArgumentsError(
            "the arguments differ from the ones the capability was issued for".into(),
        ))
    }
}

/// Deserializes optional arguments, refusing a member name that appears twice
/// in one object, at any depth (I-JSON, RFC 7493 §2.3). A parser that keeps the
/// last value (serde_json) and one that keeps the first would read two
/// different requests from the same bytes: what the approver saw and hashed,
/// and what a service downstream acts on.
pub fn deserialize_unique<'de, D>(d: D) -> Result<Option<serde_json::Value>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    use serde::Deserialize;
    Option::<Unique>::deserialize(d).map(|o| o.map(|u| u.0))
}

/// A JSON value built without ever overwriting a member.
struct Unique(serde_json::Value);

impl<'de> serde::Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueVisitor).map(Unique)
    }
}

struct UniqueVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueVisitor {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, Into::into))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(UniqueVisitor)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Unique(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(serde_json::Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Unique(value) = map.next_value()?;
            if members.contains_key(&key) {
                let shown: String = key.chars().take(64).collect();
                return Err(serde::de::Error::custom(format!(
                    "arguments: the member {shown:?} appears twice in one object"
                )));
            }
            members.insert(key, value);
        }
        Ok(serde_json::Value::Object(members))
    }
}

fn write_value(
    out: &mut String,
    value: &serde_json::Value,
    depth: usize,
    at: &str,
) -> Result<(), ArgumentsError> {
    use serde_json::Value;
    if depth > MAX_DEPTH {
        return Err(ArgumentsError(format!(
            "arguments nest deeper than {MAX_DEPTH} levels"
        )));
    }
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match n.as_i64() {
            Some(i) if (-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&i) => {
                let _ = write!(out, "{i}");
            }
            _ => {
                return Err(ArgumentsError(format!(
                    "{at}: {n} is not an integer between -(2^53-1) and 2^53-1; \
                     write fractions and large numbers as strings"
                )))
            }
        },
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item, depth + 1, &format!("{at}[{i}]"))?;
            }
            out.push(']');
        }
        Value::Object(members) => {
            let mut names: Vec<&String> = members.keys().collect();
            // RFC 8785 §3.2.3: by UTF-16 code units, not by UTF-8 bytes.
            names.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (i, name) in names.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, name);
                out.push(':');
                write_value(out, &members[name], depth + 1, &format!("{at}.{name}"))?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// RFC 8785 §3.2.2.2: ECMAScript's `JSON.stringify` escaping.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn members_are_sorted_by_utf16_code_units() {
        // RFC 8785 §3.2.3's example: UTF-8 byte order would put "\u{20ac}" (E2 82 AC)
        // before "\u{1f600}" (F0 9F 98 80); UTF-16 puts the surrogate pair D83D first.
        let v: serde_json::Value = serde_json::from_str(
            r#"{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}"#,
        )
        .unwrap();
        let c = canonical(&v).unwrap();
        let order: Vec<&str> = [
            "Carriage Return",
            "One",
            "Control",
            "Latin Small",
            "Euro Sign",
            "Emoji",
            "Hebrew",
        ]
        .to_vec();
        let mut last = 0;
        for name in order {
            let at = c.find(name).unwrap();
            assert!(at > last, "{name} out of order in {c}");
            last = at;
        }
    }

    #[test]
    fn strings_are_escaped_like_json_stringify() {
        let v = json!({"s": "\u{0}\u{1f}\"\\/\u{7f}\u{2028}é\n\t\u{8}\u{c}\r"});
        assert_eq!(
            canonical(&v).unwrap(),
            "{\"s\":\"\\u0000\\u001f\\\"\\\\/\u{7f}\u{2028}é\\n\\t\\b\\f\\r\"}"
        );
    }

    #[test]
    fn whitespace_and_order_of_input_do_not_change_the_hash() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{ "b": [1, 2, {"y": null, "x": true}], "a": "x" }"#).unwrap();
        let b: serde_json::Value =
            serde_json::from_str(r#"{"a":"x","b":[1,2,{"x":true,"y":null}]}"#).unwrap();
        assert_eq!(
            canonical(&a).unwrap(),
            r#"{"a":"x","b":[1,2,{"x":true,"y":null}]}"#
        );
        assert_eq!(hash(&a).unwrap(), hash(&b).unwrap());
        // And it is SHA-256 of exactly those bytes.
        assert_eq!(
            hash(&json!({})).unwrap(),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }

    #[test]
    fn only_safe_integers_are_numbers() {
        assert!(canonical(&json!({"n": MAX_SAFE_INTEGER})).is_ok());
        assert!(canonical(&json!({"n": -MAX_SAFE_INTEGER})).is_ok());
        for bad in [
            json!({"n": 1.5}),
            json!({"n": MAX_SAFE_INTEGER + 1}),
            json!({"n": u64::MAX}),
        ] {
            let e = canonical(&bad).unwrap_err();
            assert!(e.0.contains("as strings"), "{e}");
        }
        assert_eq!(canonical(&json!({"n": -0})).unwrap(), r#"{"n":0}"#);
    }

    #[test]
    fn not_an_object_too_deep_or_too_big_is_refused() {
        assert!(canonical(&json!(["a"])).is_err());
        let mut deep = json!({});
        for _ in 0..MAX_DEPTH {
            deep = json!({ "d": deep });
        }
        assert!(canonical(&deep).unwrap_err().0.contains("deeper"));
        let big = json!({ "s": "x".repeat(MAX_CANONICAL_BYTES) });
        assert!(canonical(&big).unwrap_err().0.contains("bytes"));
    }

    #[test]
    fn a_member_twice_in_one_object_is_refused() {
        #[derive(serde::Deserialize)]
        struct Body {
            #[serde(default, deserialize_with = "deserialize_unique")]
            arguments: Option<serde_json::Value>,
        }
        let ok: Body =
            serde_json::from_str(r#"{"arguments": {"a": 1, "b": {"a": 2}, "c": [{"a": 3}]}}"#)
                .unwrap();
        assert_eq!(
            ok.arguments.unwrap(),
            json!({"a": 1, "b": {"a": 2}, "c": [{"a": 3}]})
        );
        for twice in [
            r#"{"arguments": {"amount": "1", "amount": "1000"}}"#,
            r#"{"arguments": {"x": {"to": "a", "to": "b"}}}"#,
            r#"{"arguments": {"x": [{"k": 1, "k": 1}]}}"#,
        ] {
            let e = serde_json::from_str::<Body>(twice)
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains("appears twice"), "{e}");
        }
        let none: Body = serde_json::from_str(r#"{"arguments": null}"#).unwrap();
        assert!(none.arguments.is_none());
    }

    #[test]
    fn verification_needs_the_same_arguments() {
        let args = json!({"service": "web", "commit": "4f2a9c1"});
        let h = hash(&args).unwrap();
        assert!(verify_arguments(Some(&h), &args).is_ok());
        let other = json!({"service": "web", "commit": "4f2a9c2"});
        assert!(verify_arguments(Some(&h), &other).is_err());
        assert!(verify_arguments(None, &args).is_err());
        assert!(verify_arguments(Some(&h[..63]), &args).is_err());
    }
}
