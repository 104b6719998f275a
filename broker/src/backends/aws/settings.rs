//! `[backends.NAME]` with `kind = "aws-sts"`: parsed and checked at start.
//!
//! The broker's own AWS credentials never appear in `tessera.toml`. They come
//! from the standard sources, chosen explicitly:
//!
//! 1. `profile = "NAME"` in the file (optionally `credentials_file = PATH`): the
//!    shared config/credentials files, with their usual chaining (source_profile,
//!    role_arn, credential_process), except the instance-metadata and container
//!    sources, which the broker refuses;
//! 2. otherwise `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`);
//! 3. otherwise `AWS_PROFILE`.
//!
//! When none is set the broker refuses to start and says so. It never falls back
//! to the EC2 instance-metadata address: on a laptop or in CI that fallback turns
//! a missing setting into a slow, confusing timeout, and on a shared host it
//! would silently borrow whatever role the machine has.

use crate::grammar::parse_duration;
use crate::settings::{err, parse_table, ConfigError, EnvLookup, RawTable};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAwsSts {
    #[allow(dead_code)]
    kind: String,
    role_arn: Option<String>,
    region: Option<String>,
    external_id: Option<String>,
    endpoint_url: Option<String>,
    profile: Option<String>,
    credentials_file: Option<PathBuf>,
    actions: Option<Vec<String>>,
    deny_revoked_runs: Option<bool>,
    max_session_duration: Option<String>,
}

/// A validated `aws-sts` backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsStsConfig {
    pub role_arn: String,
    /// The role's name (last path segment of the ARN), for IAM calls.
    pub role_name: String,
    pub region: String,
    /// Sent as `ExternalId` when the role's trust policy asks for one (not a secret).
    pub external_id: Option<String>,
    /// Where STS and IAM are reached instead of AWS (compatible servers, tests).
    pub endpoint_url: Option<String>,
    /// Actions this backend may issue for; `None`: any IAM action the schema declares.
    pub actions: Option<Vec<String>>,
    /// Maintain a Deny statement on the role for the session tags of ended runs.
    pub deny_revoked_runs: bool,
    /// Upper bound of `DurationSeconds` (the role's MaxSessionDuration, 15m-12h).
    pub max_session_duration: Duration,
    pub credentials: CredentialSource,
}

impl AwsStsConfig {
    /// A backend as policy simulation sees one without a configuration: any IAM
    /// action, a placeholder role, no credentials.
    pub fn unconfigured() -> AwsStsConfig {
        AwsStsConfig {
            role_arn: "arn:aws:iam::000000000000:role/policy-test".to_owned(),
            role_name: "policy-test".to_owned(),
            region: "us-east-1".to_owned(),
            external_id: None,
            endpoint_url: None,
            actions: None,
            deny_revoked_runs: false,
            max_session_duration: Duration::from_secs(3600),
            credentials: CredentialSource::NotResolved,
        }
    }
}

/// Where the broker's own AWS credentials come from (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, read at start.
    Environment(StaticKeys),
    Profile {
        name: String,
        credentials_file: Option<PathBuf>,
    },
    /// Not looked up: the policy tools read backends without any environment.
    NotResolved,
}

/// Static keys from the environment. `Debug` shows the key id only.
#[derive(Clone)]
pub struct StaticKeys {
    pub access_key_id: String,
    pub secret_access_key: SecretString,
    pub session_token: Option<SecretString>,
}

impl std::fmt::Debug for StaticKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticKeys")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"[redacted]")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "[redacted]"),
            )
            .finish()
    }
}

impl PartialEq for StaticKeys {
    fn eq(&self, other: &Self) -> bool {
        self.access_key_id == other.access_key_id
            && self.secret_access_key.expose_secret() == other.secret_access_key.expose_secret()
            && self
                .session_token
                .as_ref()
                .map(|s| s.expose_secret().to_owned())
                == other
                    .session_token
                    .as_ref()
                    .map(|s| s.expose_secret().to_owned())
    }
}

impl Eq for StaticKeys {}

/// Checks the table's keys; credentials stay [`CredentialSource::NotResolved`]
/// unless a profile is named (see [`resolve_credentials`]).
pub fn resolve(setting: &str, table: RawTable) -> Result<AwsStsConfig, ConfigError> {
    check(setting, parse_table(setting, table)?)
}

fn check(setting: &str, raw: RawAwsSts) -> Result<AwsStsConfig, ConfigError> {
    let field = |f: &str| format!("{setting}.{f}");
    let role_arn = raw
        .role_arn
        .ok_or_else(|| err(&field("role_arn"), "required for kind \"aws-sts\""))?;
    let role_name = super::grammar::role_name(&role_arn)
        .ok_or_else(|| {
            err(
                &field("role_arn"),
                "must be arn:aws:iam::ACCOUNT:role/[PATH/]NAME",
            )
        })?
        .to_owned();
    let region = raw
        .region
        .ok_or_else(|| err(&field("region"), "required for kind \"aws-sts\""))?;
    if !(2..=32).contains(&region.len())
        || !region
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    {
        return Err(err(&field("region"), "not a region name (e.g. eu-west-1)"));
    }
    if let Some(x) = &raw.external_id {
        let ok = (2..=1224).contains(&x.len())
            && x.bytes().all(|c| {
                c.is_ascii_alphanumeric()
                    || matches!(
                        c,
                        b'_' | b'+' | b'=' | b',' | b'.' | b'@' | b':' | b'/' | b'-'
                    )
            });
        if !ok {
            return Err(err(
                &field("external_id"),
                "must be 2-1224 of [A-Za-z0-9_+=,.@:/-]",
            ));
        }
    }
    if let Some(url) = &raw.endpoint_url {
        check_endpoint(url).map_err(|m| err(&field("endpoint_url"), m))?;
    }
    if let Some(actions) = &raw.actions {
        for a in actions {
            if !super::grammar::is_iam_action(a) {
                return Err(err(
                    &field("actions"),
                    format!("{a:?} is not an IAM action (service:Operation)"),
                ));
            }
        }
    }
    let max_session_duration = match &raw.max_session_duration {
        None => Duration::from_secs(3600),
        Some(t) => {
            parse_duration(t).map_err(|e| err(&field("max_session_duration"), e.to_string()))?
        }
    };
    if !(Duration::from_secs(900)..=Duration::from_secs(43_200)).contains(&max_session_duration) {
        return Err(err(
            &field("max_session_duration"),
            "must be between 15m and 12h (STS's range; match the role's MaxSessionDuration)",
        ));
    }
    if raw.credentials_file.is_some() && raw.profile.is_none() {
        return Err(err(&field("credentials_file"), "needs profile"));
    }
    let credentials = match raw.profile {
        Some(name) if is_profile_name(&name) => CredentialSource::Profile {
            name,
            credentials_file: raw.credentials_file,
        },
        Some(_) => return Err(err(&field("profile"), "not a profile name")),
        None => CredentialSource::NotResolved,
    };
    Ok(AwsStsConfig {
        role_arn,
        role_name,
        region,
        external_id: raw.external_id,
        endpoint_url: raw.endpoint_url,
        actions: raw.actions,
        deny_revoked_runs: raw.deny_revoked_runs.unwrap_or(false),
        max_session_duration,
        credentials,
    })
}

fn is_profile_name(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-' | b'+' | b'@'))
}

/// `https://HOST[:PORT][/]`, or `http://` to a loopback address only: the
/// responses carry credentials, which must not cross a network in clear.
fn check_endpoint(url: &str) -> Result<(), String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| "must be http(s)://HOST[:PORT]".to_owned())?;
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty()
        || authority.contains(['/', '?', '#', '@', ' '])
        || !authority.is_ascii()
    {
        return Err("must be http(s)://HOST[:PORT] with no path".to_owned());
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match scheme {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        "http" => Err("plain http is allowed only to a loopback address; use https".to_owned()),
        _ => Err("must be http(s)://HOST[:PORT]".to_owned()),
    }
}

/// Picks the broker's credential source at start (module docs: the order), or
/// fails naming what to set. Reads the environment through `env`.
pub fn resolve_credentials(
    setting: &str,
    current: &CredentialSource,
    env: EnvLookup<'_>,
) -> Result<CredentialSource, ConfigError> {
    if let CredentialSource::Profile { .. } = current {
        return Ok(current.clone());
    }
    match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
        (Some(id), Some(secret)) => {
            return Ok(CredentialSource::Environment(StaticKeys {
                access_key_id: id,
                secret_access_key: SecretString::from(secret),
                session_token: env("AWS_SESSION_TOKEN").map(SecretString::from),
            }))
        }
        (Some(_), None) => {
            return Err(err(
                setting,
                "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not",
            ))
        }
        (None, Some(_)) => {
            return Err(err(
                setting,
                "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not",
            ))
        }
        (None, None) => {}
    }
    if let Some(name) = env("AWS_PROFILE") {
        if !is_profile_name(&name) {
            return Err(err(setting, "AWS_PROFILE is not a profile name"));
        }
        return Ok(CredentialSource::Profile {
            name,
            credentials_file: None,
        });
    }
    Err(err(
        setting,
        format!(
            "no AWS credentials for the broker: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, \
             or AWS_PROFILE, or {setting}.profile (the broker never falls back to the \
             instance metadata service)"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AwsStsConfig, ConfigError> {
        let raw: RawAwsSts = toml::from_str(text).map_err(|e| err("t", e.message()))?;
        check("backends.aws", raw)
    }

    fn raw(extra: &str) -> Result<AwsStsConfig, ConfigError> {
        parse(&format!(
            "kind = \"aws-sts\"\nrole_arn = \"arn:aws:iam::123456789012:role/tessera\"\nregion = \"eu-west-1\"\n{extra}"
        ))
    }

    #[test]
    fn minimal_and_defaults() {
        let c = raw("").unwrap();
        assert_eq!(c.role_name, "tessera");
        assert_eq!(c.max_session_duration, Duration::from_secs(3600));
        assert!(!c.deny_revoked_runs);
        assert_eq!(c.credentials, CredentialSource::NotResolved);
    }

    #[test]
    fn errors_name_the_setting() {
        for (extra, setting) in [
            ("region = \"EU WEST\"", "backends.aws.region"),
            (
                "endpoint_url = \"http://10.0.0.1:5000\"",
                "backends.aws.endpoint_url",
            ),
            ("endpoint_url = \"ftp://x\"", "backends.aws.endpoint_url"),
            (
                "endpoint_url = \"https://x/path\"",
                "backends.aws.endpoint_url",
            ),
            ("actions = [\"s3:*\"]", "backends.aws.actions"),
            (
                "max_session_duration = \"5m\"",
                "backends.aws.max_session_duration",
            ),
            ("external_id = \"x\"", "backends.aws.external_id"),
            ("credentials_file = \"/c\"", "backends.aws.credentials_file"),
        ] {
            let e = match extra.strip_prefix("region = ") {
                Some(_) => parse(&format!(
                    "kind = \"aws-sts\"\nrole_arn = \"arn:aws:iam::123456789012:role/t\"\n{extra}"
                ))
                .unwrap_err(),
                None => raw(extra).unwrap_err(),
            };
            assert_eq!(e.setting, setting, "{extra}: {e}");
        }
        let e = parse(
            "kind = \"aws-sts\"\nrole_arn = \"arn:aws:iam::1:user/x\"\nregion = \"eu-west-1\"",
        )
        .unwrap_err();
        assert_eq!(e.setting, "backends.aws.role_arn");
        assert!(raw("secret_access_key = \"x\"")
            .unwrap_err()
            .message
            .contains("secret_access_key"));
        assert!(raw("endpoint_url = \"http://127.0.0.1:5000\"").is_ok());
        assert!(raw("endpoint_url = \"http://[::1]:5000/\"").is_ok());
        assert!(raw("endpoint_url = \"https://sts.example.com\"").is_ok());
    }

    #[test]
    fn credentials_come_from_the_environment_or_a_profile_never_from_nowhere() {
        let c = raw("").unwrap();
        let none = |_: &str| None;
        let e = resolve_credentials("backends.aws", &c.credentials, &none).unwrap_err();
        assert!(e.message.contains("instance metadata"), "{e}");
        let keys = |k: &str| match k {
            "AWS_ACCESS_KEY_ID" => Some("AKIAEXAMPLE".to_owned()),
            "AWS_SECRET_ACCESS_KEY" => Some("very-secret".to_owned()),
            _ => None,
        };
        let src = resolve_credentials("backends.aws", &c.credentials, &keys).unwrap();
        let debug = format!("{src:?}");
        assert!(
            debug.contains("AKIAEXAMPLE") && !debug.contains("very-secret"),
            "{debug}"
        );
        let half = |k: &str| (k == "AWS_ACCESS_KEY_ID").then(|| "AKIA".to_owned());
        assert!(resolve_credentials("b", &c.credentials, &half).is_err());
        let profile = |k: &str| (k == "AWS_PROFILE").then(|| "tessera".to_owned());
        assert!(matches!(
            resolve_credentials("b", &c.credentials, &profile).unwrap(),
            CredentialSource::Profile { .. }
        ));
        let named = raw("profile = \"broker\"").unwrap();
        assert!(matches!(
            resolve_credentials("b", &named.credentials, &keys).unwrap(),
            CredentialSource::Profile { name, .. } if name == "broker"
        ));
    }
}
