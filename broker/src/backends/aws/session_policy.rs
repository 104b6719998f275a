//! The inline session policy of one exchange: exactly the capability's action on
//! exactly its resource, and only until the capability expires.
//!
//! STS will not issue credentials for less than 900 s, while capabilities often
//! live a minute or two. The `DateLessThan aws:CurrentTime` condition closes that
//! gap: AWS evaluates it on every request, so the credentials stop working at the
//! capability's `exp` whatever their own expiration says. A session policy can
//! only narrow what the role allows, never widen it.

use super::policy_doc::{counted_chars, Effect, OneOrMany, PolicyDocument, Statement};
use crate::clock::rfc3339;
use std::collections::BTreeMap;

/// STS's limit on the plaintext `Policy` parameter (characters, whitespace aside).
pub const MAX_SESSION_POLICY_CHARS: usize = 2048;

pub const SID: &str = "TesseraCapability";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the session policy would be {chars} characters; STS accepts at most {MAX_SESSION_POLICY_CHARS}")]
pub struct TooLarge {
    pub chars: usize,
}

/// The session policy for `action` on `resource_arn`, dead at `exp` (unix seconds).
pub fn build(action: &str, resource_arn: &str, exp: i64) -> Result<String, TooLarge> {
    let statement = Statement {
        sid: Some(SID.to_owned()),
        effect: Effect::Allow,
        action: OneOrMany::One(action.to_owned()),
        resource: OneOrMany::One(resource_arn.to_owned()),
        condition: BTreeMap::from([(
            "DateLessThan".to_owned(),
            BTreeMap::from([("aws:CurrentTime".to_owned(), OneOrMany::One(rfc3339(exp)))]),
        )]),
    };
    let json = PolicyDocument::new(&[statement]).to_json();
    let chars = counted_chars(&json);
    if chars > MAX_SESSION_POLICY_CHARS {
        return Err(TooLarge { chars });
    }
    Ok(json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_action_one_resource_until_exp() {
        let p = build("s3:GetObject", "arn:aws:s3:::b/reports/*", 1_798_761_600).unwrap();
        let v: serde_json::Value = serde_json::from_str(&p).unwrap();
        assert_eq!(
            v,
            json!({
                "Version": "2012-10-17",
                "Statement": [{
                    "Sid": "TesseraCapability",
                    "Effect": "Allow",
                    "Action": "s3:GetObject",
                    "Resource": "arn:aws:s3:::b/reports/*",
                    "Condition": {"DateLessThan": {"aws:CurrentTime": "2027-01-01T00:00:00Z"}}
                }]
            })
        );
    }

    #[test]
    fn values_are_escaped_by_serde_not_pasted() {
        // The grammar refuses such input long before; the builder is safe anyway.
        let p = build("s3:GetObject", "arn:aws:s3:::b/\"},{\"Effect\":\"Allow", 0).unwrap();
        let v: serde_json::Value = serde_json::from_str(&p).unwrap();
        assert_eq!(v["Statement"].as_array().map(Vec::len), Some(1));
        assert_eq!(
            v["Statement"][0]["Resource"],
            "arn:aws:s3:::b/\"},{\"Effect\":\"Allow"
        );
    }

    #[test]
    fn size_limit_is_enforced() {
        let long = format!("arn:aws:s3:::b/{}", "k".repeat(2100));
        let e = build("s3:GetObject", &long, 0).unwrap_err();
        assert!(e.chars > MAX_SESSION_POLICY_CHARS);
        assert!(e.to_string().contains("2048"), "{e}");
    }
}
