//! What an `aws-sts` backend accepts as an action and as a resource path.
//!
//! Why this strict: the action and the ARN are copied into an IAM policy, where
//! case, wildcards and policy variables all carry meaning. So:
//!
//! - an action is exactly one IAM action, `service:Operation` — no wildcard (a
//!   capability is for one action), the service in lower case and the operation
//!   starting with an upper-case letter, the way AWS documents them (IAM matches
//!   actions case-insensitively, Cedar does not: accepting `s3:getobject` next to
//!   `s3:GetObject` would let a request slip past a `forbid` written for the
//!   other spelling);
//! - a resource is one ARN, `arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE`, whose
//!   service is the action's service; `*` is accepted only in the RESOURCE part
//!   (whether a wildcard is granted is the policy's decision: Cedar's `like` lets a
//!   permit for `.../reports/*` cover a request for `.../reports/2026/*`, while a
//!   permit written with `==` grants exactly one object). `?` (IAM's one-character
//!   wildcard) is accepted there too: a path with either is a *set*, and policy
//!   decides it by the resource-set rule (docs/policy.md), never by Cedar reading
//!   the wildcard as a character. `$`, `{` and `}` (policy variables), quotes,
//!   spaces, control characters, empty, `.` and `..` segments and `**` are refused.

use crate::backends::grammar::{is_allowed, is_canonical, Invalid};

/// The wildcards of a resource ARN, as IAM reads them: `*` (any run of
/// characters) and `?` (one character).
pub const WILDCARDS: &[char] = &['*', '?'];

/// A permit whose pattern contains a whole set grants it, as for `token`
/// (`resource::inclusion_grants`).
pub const INCLUSION_GRANTS: bool = true;

/// Longest IAM action accepted (`service:Operation`).
pub const MAX_ACTION_LEN: usize = 64;

/// `service:Operation`: service 1-32 of `[a-z0-9-]`, operation 1-63 of
/// `[A-Za-z0-9]` starting with `[A-Z]`.
pub fn is_iam_action(s: &str) -> bool {
    let Some((service, op)) = s.split_once(':') else {
        return false;
    };
    s.len() <= MAX_ACTION_LEN
        && is_service(service)
        && op.as_bytes().first().is_some_and(u8::is_ascii_uppercase)
        && op.bytes().all(|c| c.is_ascii_alphanumeric())
}

fn is_service(s: &str) -> bool {
    (1..=32).contains(&s.len())
        && s.as_bytes()[0].is_ascii_lowercase()
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

/// A request's action, then its ARN (for the action's service), then the
/// backend's allow-list.
pub fn check_resource(
    path: &str,
    action: &str,
    allow_list: Option<&[String]>,
) -> Result<(), Invalid> {
    if !is_iam_action(action) {
        return Err(Invalid::Action);
    }
    if !is_arn_for(path, action_service(action)) {
        return Err(Invalid::Path);
    }
    if !is_allowed(allow_list, action) {
        return Err(Invalid::Action);
    }
    Ok(())
}

/// The service part of a valid action (`s3` for `s3:GetObject`).
pub fn action_service(action: &str) -> &str {
    action.split_once(':').map_or("", |(s, _)| s)
}

/// Partitions a resource ARN may name.
const PARTITIONS: [&str; 3] = ["aws", "aws-cn", "aws-us-gov"];

/// One ARN for `service`, checked part by part (see the module docs).
pub fn is_arn_for(arn: &str, service: &str) -> bool {
    if arn.len() > 480 {
        return false;
    }
    let mut parts = arn.splitn(6, ':');
    let (Some("arn"), Some(partition), Some(svc), Some(region), Some(account), Some(rest)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return false;
    };
    PARTITIONS.contains(&partition)
        && svc == service
        && is_service(svc)
        && region.len() <= 32
        && region
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && (account.is_empty()
            || (account.len() == 12 && account.bytes().all(|c| c.is_ascii_digit())))
        && is_arn_resource(rest)
}

/// The RESOURCE part: 1-400 of `[A-Za-z0-9_.,+=@/:*?-]` in canonical form
/// (`backends::grammar::is_canonical`), not only wildcards and separators.
fn is_arn_resource(s: &str) -> bool {
    (1..=400).contains(&s.len())
        && s.bytes().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(
                    c,
                    b'_' | b'.' | b',' | b'+' | b'=' | b'@' | b'/' | b':' | b'*' | b'?' | b'-'
                )
        })
        && is_canonical(s)
        && s.bytes().any(|c| c.is_ascii_alphanumeric())
}

/// A role ARN: `arn:PARTITION:iam::ACCOUNT:role/[PATH/]NAME`; returns NAME.
pub fn role_name(arn: &str) -> Option<&str> {
    let rest = arn.strip_prefix("arn:")?;
    let (partition, rest) = rest.split_once(':')?;
    let rest = rest.strip_prefix("iam::")?;
    let (account, path) = rest.split_once(':')?;
    let path = path.strip_prefix("role/")?;
    let name = path.rsplit('/').next()?;
    let name_ok = |s: &str| {
        s.bytes().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, b'_' | b'+' | b'=' | b',' | b'.' | b'@' | b'-')
        })
    };
    (PARTITIONS.contains(&partition)
        && account.len() == 12
        && account.bytes().all(|c| c.is_ascii_digit())
        && (1..=64).contains(&name.len())
        && name_ok(name)
        && path.len() <= 512
        && path.split('/').all(|seg| !seg.is_empty() && name_ok(seg)))
    .then_some(name)
}

/// Names STS accepts for `RoleSessionName` and `SourceIdentity`: 2-64 of `[\w+=,.@-]`.
pub fn is_sts_name(s: &str) -> bool {
    (2..=64).contains(&s.len())
        && s.bytes().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, b'_' | b'+' | b'=' | b',' | b'.' | b'@' | b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn actions() {
        for ok in [
            "s3:GetObject",
            "dynamodb:Query",
            "secretsmanager:GetSecretValue",
            "ec2-instance-connect:SendSSHPublicKey",
        ] {
            assert!(is_iam_action(ok), "{ok}");
        }
        for bad in [
            "s3:*",
            "s3:Get*",
            "*",
            "s3:getobject",
            "S3:GetObject",
            "s3:",
            ":GetObject",
            "s3:Get Object",
            "s3:GetObject\n",
            "s3::GetObject",
            "s3:GetObject:x",
            "iam:Pass-Role",
            "",
        ] {
            assert!(!is_iam_action(bad), "{bad:?}");
        }
        assert!(!is_iam_action(&format!("s3:G{}", "a".repeat(80))));
        assert_eq!(action_service("dynamodb:Query"), "dynamodb");
    }

    #[test]
    fn arns() {
        for ok in [
            "arn:aws:s3:::tessera-reports/reports/2026/*",
            "arn:aws:s3:::tessera-reports",
            "arn:aws:s3:::tessera-reports/reports/2026/q1.csv",
            "arn:aws:s3:::tessera-reports/reports/2026/q?.csv",
        ] {
            assert!(is_arn_for(ok, "s3"), "{ok}");
        }
        assert!(is_arn_for(
            "arn:aws:dynamodb:eu-west-1:123456789012:table/orders",
            "dynamodb"
        ));
        assert!(is_arn_for(
            "arn:aws-cn:dynamodb:cn-north-1:123456789012:table/orders/index/*",
            "dynamodb"
        ));
        for bad in [
            "arn:aws:s3:::*",
            "arn:aws:s3:::/",
            "arn:aws:iam::123456789012:role/admin",
            "arn:aws:s3:::bucket/a/../b",
            "arn:aws:s3:::bucket//x",
            "arn:aws:s3:::bucket/${aws:username}/*",
            "arn:aws:s3:::bucket/./q.csv",
            "arn:aws:s3:::bucket/q.csv/.",
            "arn:aws:s3:::bucket/**",
            "arn:aws:s3:::bucket/a b",
            "arn:aws:s3:::bucket/\"x\"",
            "arn:aws:s3:::bucket/x\u{0}",
            "arn:evil:s3:::bucket",
            "arn:aws:s3:eu-west-1:12345:bucket",
            "arn:aws:s3:EU:123456789012:bucket",
            "arn:aws:s3::",
            "s3://bucket/key",
            "arn:aws:s3:::",
        ] {
            assert!(!is_arn_for(bad, "s3"), "{bad:?}");
        }
        assert!(
            !is_arn_for("arn:aws:s3:::bucket", "dynamodb"),
            "service must match the action's"
        );
    }

    #[test]
    fn roles_and_sts_names() {
        assert_eq!(
            role_name("arn:aws:iam::123456789012:role/tessera-agents"),
            Some("tessera-agents")
        );
        assert_eq!(
            role_name("arn:aws:iam::123456789012:role/team/a/tessera"),
            Some("tessera")
        );
        assert_eq!(role_name("arn:aws:iam::123456789012:user/alice"), None);
        assert_eq!(role_name("arn:aws:iam::1234:role/x"), None);
        assert_eq!(role_name("arn:aws:iam::123456789012:role/"), None);
        assert_eq!(role_name("arn:aws:iam::123456789012:role/a b"), None);
        assert!(is_sts_name("alice@example.com"));
        assert!(!is_sts_name("a"));
        assert!(!is_sts_name(&"a".repeat(65)));
        assert!(!is_sts_name("alice:x"));
    }

    proptest! {
        #[test]
        fn accepted_arns_carry_no_policy_syntax(s in ".{0,600}") {
            if is_arn_for(&s, "s3") {
                prop_assert!(s.bytes().all(|c| c.is_ascii_graphic()));
                let forbidden = ['$', '{', '}', '"', '\\', ' '];
                prop_assert!(!s.contains(forbidden), "{:?}", s);
            }
        }

        #[test]
        fn generated_s3_arns_are_accepted(bucket in "[a-z0-9][a-z0-9.-]{2,30}", key in "[A-Za-z0-9_-]{1,10}(/[A-Za-z0-9_.-]{1,10}){0,4}") {
            prop_assume!(!key.split('/').any(|s| s == ".." || s == "."));
            let arn = format!("arn:aws:s3:::{bucket}/{key}");
            prop_assert!(is_arn_for(&arn, "s3"));
        }
    }
}
