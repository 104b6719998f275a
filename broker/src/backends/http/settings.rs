//! `[backends.NAME]` with `kind = "http"`: an injection rule — which hosts it is
//! for, which requests it covers, and how the gateway authenticates them.
//!
//! The secret (`auth = "bearer"` or `"header"`) is read from the broker's
//! environment or a file when `serve` starts ([`resolve_credentials`]), never by
//! the policy tools, and is held as a [`SecretString`]: its `Debug` is redacted
//! and it is only ever written into the upstream request.

use super::grammar::METHODS;
use crate::backends::grammar::is_allowed;
use crate::backends::net::grammar as net;
use crate::settings::{err, parse_table, ConfigError, EnvLookup, RawTable};
use secrecy::SecretString;
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttpBackend {
    #[allow(dead_code)]
    kind: String,
    hosts: Option<Vec<String>>,
    requests: Option<Vec<String>>,
    actions: Option<Vec<String>>,
    auth: Option<String>,
    secret_env: Option<String>,
    secret_file: Option<PathBuf>,
    header: Option<String>,
    prefix: Option<String>,
    token_backend: Option<String>,
    aws_backend: Option<String>,
    aws_service: Option<String>,
    placeholder_env: Option<String>,
    policy_headers: Option<Vec<String>>,
    log_query: Option<bool>,
    case_insensitive_paths: Option<bool>,
    cookies: Option<bool>,
}

/// A host the rule is for: a DNS name (or `*.` and a name: any name below it)
/// and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    pub name: String,
    pub port: u16,
}

impl HostPattern {
    /// Whether the concrete `host` (lower case, no root dot) and `port` match.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        port == self.port
            && match self.name.strip_prefix("*.") {
                Some(suffix) => host
                    .strip_suffix(suffix)
                    .is_some_and(|left| left.len() > 1 && left.ends_with('.')),
                None => host == self.name,
            }
    }

    /// The DNS subtree a certificate for this pattern must stay in (the run
    /// CA's name constraint): the name, or the name below `*.`.
    pub fn subtree(&self) -> &str {
        self.name.strip_prefix("*.").unwrap_or(&self.name)
    }
}

/// Requests a rule covers: a method (`*`: any) and a path pattern (`*`: any run
/// of characters), matched against the decided path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestPattern {
    pub method: Option<String>,
    pub path: String,
}

impl RequestPattern {
    pub fn matches(&self, method: &str, path: &str) -> bool {
        self.method.as_deref().is_none_or(|m| m == method) && glob(&self.path, path)
    }
}

/// `*` matches any run of characters; everything else itself.
fn glob(pattern: &str, s: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == s;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !s.starts_with(first) || s.len() < first.len() + last.len() || !s.ends_with(last) {
        return false;
    }
    let mut rest = &s[first.len()..s.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

pub use crate::backends::secret::SecretSource;

/// How the gateway authenticates a covered request.
#[derive(Debug, Clone)]
pub enum Auth {
    /// Nothing is added (the rule only strips and decides).
    None,
    /// A header (`authorization` for `bearer`) with `prefix` and the secret.
    Header {
        name: String,
        prefix: String,
        source: SecretSource,
        /// Read by [`resolve_credentials`] (`serve` only).
        secret: Option<Arc<SecretString>>,
    },
    /// A JWT minted per request by the broker for the `token` backend's
    /// audience (`Authorization: Bearer`).
    Token { backend: String },
    /// AWS SigV4 with the STS credentials of an `aws-sts` backend's role.
    SigV4 { backend: String, service: String },
}

impl Auth {
    pub fn as_str(&self) -> &'static str {
        match self {
            Auth::None => "none",
            Auth::Header { name, .. } if name == "authorization" => "bearer",
            Auth::Header { .. } => "header",
            Auth::Token { .. } => "token",
            Auth::SigV4 { .. } => "sigv4",
        }
    }
}

/// A validated `http` backend.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub hosts: Vec<HostPattern>,
    pub requests: Vec<RequestPattern>,
    pub actions: Option<Vec<String>>,
    pub auth: Auth,
    /// The variable `tessera exec --egress` sets to this run's placeholder.
    pub placeholder_env: Option<String>,
    /// Request headers shown to policy (`context.arguments.headers`), lower case.
    pub policy_headers: Vec<String>,
    /// Whether the audit records the query (off: `?…` is redacted).
    pub log_query: bool,
    /// Whether the API reads paths case-insensitively (policy decides them lower case).
    pub case_insensitive_paths: bool,
    /// Whether cookies pass (the tool's `Cookie`, the API's `Set-Cookie`); off:
    /// a session the API opens on the injected credential never reaches the tool.
    pub cookies: bool,
}

impl HttpConfig {
    /// An `http` backend as policy simulation sees one: any method and path.
    pub fn unconfigured() -> HttpConfig {
        HttpConfig {
            hosts: vec![],
            requests: vec![],
            actions: None,
            auth: Auth::None,
            placeholder_env: None,
            policy_headers: vec![],
            log_query: false,
            case_insensitive_paths: false,
            cookies: false,
        }
    }

    /// Whether this rule covers `method` on the decided `path`.
    pub fn covers(&self, method: &str, path: &str) -> bool {
        is_allowed(self.actions.as_deref(), method)
            && self.requests.iter().any(|r| r.matches(method, path))
    }

    /// Whether this rule is for `host:port`.
    pub fn is_for(&self, host: &str, port: u16) -> bool {
        self.hosts.iter().any(|h| h.matches(host, port))
    }
}

fn is_header_name(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

/// Headers a rule may neither inject nor show to policy: they belong to the
/// connection or to the gateway.
const RESERVED_HEADERS: [&str; 9] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "proxy-authorization",
    "keep-alive",
];

use crate::backends::secret::is_env_name;

fn host_pattern(setting: &str, s: &str) -> Result<HostPattern, ConfigError> {
    let bad = || {
        err(
            setting,
            format!("{s:?}: a host is a lower-case DNS name (or *.name), with :PORT unless 443"),
        )
    };
    let (name, port) = match s.rsplit_once(':') {
        Some((n, p)) => (n, p.parse::<u16>().map_err(|_| bad())?),
        None => (s, 443),
    };
    let path = format!("{name}:{port}");
    let is_literal = name.starts_with('[') || name.bytes().all(|c| c.is_ascii_digit() || c == b'.');
    if is_literal || !net::is_path(&path) || (name.contains('*') && !name.starts_with("*.")) {
        return Err(bad());
    }
    Ok(HostPattern {
        name: name.to_owned(),
        port,
    })
}

fn request_pattern(setting: &str, s: &str) -> Result<RequestPattern, ConfigError> {
    let bad = |why: &str| err(setting, format!("{s:?}: {why}"));
    let (method, path) = s
        .split_once(' ')
        .ok_or_else(|| bad("write METHOD /path-pattern (METHOD may be *)"))?;
    let method = match method {
        "*" => None,
        m if METHODS.contains(&m) => Some(m.to_owned()),
        _ => {
            return Err(bad(&format!(
                "the method is one of {} or *",
                METHODS.join(", ")
            )))
        }
    };
    let concrete = path.replace('*', "x");
    if !super::grammar::is_path(&concrete) && concrete != "/x" {
        return Err(bad(
            "the path pattern is not in the http grammar (see docs/gateway.md)",
        ));
    }
    Ok(RequestPattern {
        method,
        path: path.to_owned(),
    })
}

/// Checks the table's keys; errors name the setting (`{setting}.hosts`).
pub fn resolve(setting: &str, table: RawTable) -> Result<HttpConfig, ConfigError> {
    let b: RawHttpBackend = parse_table(setting, table)?;
    let key = |k: &str| format!("{setting}.{k}");
    let hosts = b
        .hosts
        .filter(|h| !h.is_empty())
        .ok_or_else(|| err(&key("hosts"), "required: the API's host names"))?
        .iter()
        .map(|h| host_pattern(&key("hosts"), h))
        .collect::<Result<Vec<_>, _>>()?;
    let requests = b
        .requests
        .filter(|r| !r.is_empty())
        .ok_or_else(|| {
            err(
                &key("requests"),
                "required: the requests the rule covers, e.g. [\"GET /repos/acme/*\"]",
            )
        })?
        .iter()
        .map(|r| request_pattern(&key("requests"), r))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(actions) = &b.actions {
        if let Some(a) = actions.iter().find(|a| !METHODS.contains(&a.as_str())) {
            return Err(err(
                &key("actions"),
                format!("{a:?} is not one of {}", METHODS.join(", ")),
            ));
        }
    }
    let source = SecretSource::pick(
        setting,
        "secret",
        b.secret_env.as_ref(),
        b.secret_file.as_ref(),
    )?;
    let auth_kind = b.auth.as_deref().unwrap_or("bearer");
    let needs_secret = || {
        source.clone().ok_or_else(|| {
            err(
                setting,
                format!("auth = {auth_kind:?} needs secret_env or secret_file"),
            )
        })
    };
    let prefix = b.prefix.clone().unwrap_or_default();
    if prefix.len() > 64 || !prefix.bytes().all(|c| (0x20..0x7f).contains(&c)) {
        return Err(err(&key("prefix"), "printable ASCII, at most 64 bytes"));
    }
    let auth = match auth_kind {
        "none" => Auth::None,
        "bearer" => Auth::Header {
            name: "authorization".into(),
            prefix: b.prefix.clone().unwrap_or_else(|| "Bearer ".into()),
            source: needs_secret()?,
            secret: None,
        },
        "header" => {
            let name = b
                .header
                .clone()
                .ok_or_else(|| err(&key("header"), "required for auth = \"header\""))?
                .to_ascii_lowercase();
            if !is_header_name(&name) || RESERVED_HEADERS.contains(&name.as_str()) {
                return Err(err(
                    &key("header"),
                    format!("not a header a rule may set: {name:?}"),
                ));
            }
            Auth::Header {
                name,
                prefix,
                source: needs_secret()?,
                secret: None,
            }
        }
        "token" => Auth::Token {
            backend: b
                .token_backend
                .clone()
                .ok_or_else(|| err(&key("token_backend"), "required for auth = \"token\""))?,
        },
        "sigv4" => Auth::SigV4 {
            backend: b
                .aws_backend
                .clone()
                .ok_or_else(|| err(&key("aws_backend"), "required for auth = \"sigv4\""))?,
            service: b
                .aws_service
                .clone()
                .filter(|s| {
                    (1..=32).contains(&s.len())
                        && s.bytes()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                })
                .ok_or_else(|| {
                    err(
                        &key("aws_service"),
                        "required for auth = \"sigv4\": the signing name, e.g. \"s3\"",
                    )
                })?,
        },
        other => {
            return Err(err(
                &key("auth"),
                format!("unknown {other:?} (bearer, header, token, sigv4, none)"),
            ))
        }
    };
    let unused = match &auth {
        Auth::Header { .. } => b.token_backend.is_some() || b.aws_backend.is_some(),
        Auth::Token { .. } => source.is_some() || b.aws_backend.is_some(),
        Auth::SigV4 { .. } => source.is_some() || b.token_backend.is_some(),
        Auth::None => source.is_some() || b.token_backend.is_some() || b.aws_backend.is_some(),
    };
    if unused {
        return Err(err(
            setting,
            format!("a setting that auth = {auth_kind:?} does not use is set"),
        ));
    }
    if let Some(e) = &b.placeholder_env {
        if !is_env_name(e) {
            return Err(err(
                &key("placeholder_env"),
                format!("not a variable name: {e:?}"),
            ));
        }
    }
    let policy_headers = b
        .policy_headers
        .unwrap_or_default()
        .into_iter()
        .map(|h| h.to_ascii_lowercase())
        .collect::<Vec<_>>();
    if let Some(h) = policy_headers.iter().find(|h| {
        !is_header_name(h)
            || RESERVED_HEADERS.contains(&h.as_str())
            || *h == "authorization"
            || *h == "cookie"
    }) {
        return Err(err(
            &key("policy_headers"),
            format!("{h:?}: not a header policy may read (credentials and connection headers are not shown)"),
        ));
    }
    let wildcard = hosts.iter().find(|h| h.name.starts_with("*."));
    if let (Some(h), Auth::Header { .. } | Auth::Token { .. }) = (wildcard, &auth) {
        // Anyone who can get a name under the suffix (a cloud tenant's
        // subdomain, a bucket) and a certificate for it would be sent the secret.
        return Err(err(
            &key("hosts"),
            format!("{}: a wildcard host takes auth = \"sigv4\" or \"none\" only; name each host a secret or token goes to", h.name),
        ));
    }
    let case_insensitive_paths = b.case_insensitive_paths.unwrap_or(false);
    if case_insensitive_paths {
        if let Some(r) = requests
            .iter()
            .find(|r| r.path.chars().any(|c| c.is_ascii_uppercase()))
        {
            return Err(err(
                &key("requests"),
                format!("{:?}: with case_insensitive_paths, paths are decided lower case: write the pattern lower case", r.path),
            ));
        }
    }
    Ok(HttpConfig {
        hosts,
        requests,
        actions: b.actions,
        auth,
        placeholder_env: b.placeholder_env,
        policy_headers,
        log_query: b.log_query.unwrap_or(false),
        case_insensitive_paths,
        cookies: b.cookies.unwrap_or(false),
    })
}

/// Reads the rule's static secret (`serve` only). A file must not be readable
/// by group or others, as for the run token file.
pub fn resolve_credentials(
    setting: &str,
    config: &mut HttpConfig,
    env: EnvLookup<'_>,
) -> Result<(), ConfigError> {
    let Auth::Header { source, secret, .. } = &mut config.auth else {
        return Ok(());
    };
    let value = crate::backends::secret::read(setting, "secret", source, env)?;
    *secret = Some(Arc::new(SecretString::from(value)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(s: &str) -> RawTable {
        toml::from_str(&format!("kind = \"http\"\n{s}")).unwrap()
    }

    #[test]
    fn a_rule_names_hosts_requests_and_how_it_authenticates() {
        let c = resolve(
            "backends.gh",
            table("hosts = [\"api.github.com\", \"*.example.com:8443\"]\nrequests = [\"GET /repos/acme/*\", \"* /user\"]\nauth = \"none\"\nplaceholder_env = \"GITHUB_TOKEN\""),
        )
        .unwrap();
        assert_eq!(c.auth.as_str(), "none");
        let bearer = resolve(
            "backends.gh",
            table("hosts = [\"api.github.com\"]\nrequests = [\"GET /x\"]\nsecret_env = \"GH\""),
        )
        .unwrap();
        assert_eq!(bearer.auth.as_str(), "bearer");
        assert!(format!("{bearer:?}").contains("GH"));
        assert!(c.is_for("api.github.com", 443));
        assert!(!c.is_for("api.github.com", 8443));
        assert!(c.is_for("a.b.example.com", 8443));
        assert!(!c.is_for("example.com", 8443));
        assert!(!c.is_for("badexample.com", 8443));
        assert!(c.covers("GET", "/repos/acme/x"));
        assert!(!c.covers("DELETE", "/repos/acme/x"));
        assert!(!c.covers("GET", "/repos/other/x"));
        assert!(c.covers("DELETE", "/user"));
    }

    #[test]
    fn what_a_rule_may_not_say() {
        for bad in [
            "requests = [\"GET /x\"]\nsecret_env = \"S\"",
            "hosts = [\"10.0.0.1\"]\nrequests = [\"GET /x\"]\nsecret_env = \"S\"",
            "hosts = [\"API.example.com\"]\nrequests = [\"GET /x\"]\nsecret_env = \"S\"",
            "hosts = [\"a*.example.com\"]\nrequests = [\"GET /x\"]\nsecret_env = \"S\"",
            "hosts = [\"a.example\"]\nsecret_env = \"S\"",
            "hosts = [\"a.example\"]\nrequests = [\"OPTIONS /x\"]\nsecret_env = \"S\"",
            "hosts = [\"a.example\"]\nrequests = [\"GET /x/../y\"]\nsecret_env = \"S\"",
            "hosts = [\"a.example\"]\nrequests = [\"GET /x\"]",
            "hosts = [\"a.example\"]\nrequests = [\"GET /x\"]\nauth = \"header\"\nsecret_env = \"S\"",
            "hosts = [\"a.example\"]\nrequests = [\"GET /x\"]\nauth = \"header\"\nheader = \"host\"\nsecret_env = \"S\"",
            "hosts = [\"a.example\"]\nrequests = [\"GET /x\"]\nauth = \"token\"",
            "hosts = [\"a.example\"]\nrequests = [\"GET /x\"]\nauth = \"token\"\ntoken_backend = \"t\"\nsecret_env = \"S\"",
            "hosts = [\"a.example\"]\nrequests = [\"GET /x\"]\nauth = \"sigv4\"\naws_backend = \"a\"",
            "hosts = [\"a.example\"]\nrequests = [\"GET /x\"]\nsecret_env = \"S\"\npolicy_headers = [\"authorization\"]",
            "hosts = [\"a.example\"]\nrequests = [\"GET /x\"]\nsecret_env = \"lower\"",
            "hosts = [\"a.example\"]\nrequests = [\"GET /x\"]\nsecret_env = \"S\"\nsecret_file = \"/x\"",
            "hosts = [\"*.example.com\"]\nrequests = [\"GET /x\"]\nsecret_env = \"S\"",
            "hosts = [\"*.example.com\"]\nrequests = [\"GET /x\"]\nauth = \"token\"\ntoken_backend = \"t\"",
            "hosts = [\"a.example\"]\nrequests = [\"GET /X\"]\nauth = \"none\"\ncase_insensitive_paths = true",
        ] {
            assert!(resolve("backends.x", table(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_secret_is_read_at_serve_and_never_printed() {
        let mut c = resolve(
            "backends.gh",
            table("hosts = [\"a.example\"]\nrequests = [\"GET /x\"]\nsecret_env = \"GH\""),
        )
        .unwrap();
        let env = |k: &str| (k == "GH").then(|| "sk-very-secret".to_owned());
        resolve_credentials("backends.gh", &mut c, &env).unwrap();
        assert!(!format!("{c:?}").contains("sk-very-secret"));
        let Auth::Header { secret, .. } = &c.auth else {
            panic!()
        };
        use secrecy::ExposeSecret;
        assert_eq!(secret.as_ref().unwrap().expose_secret(), "sk-very-secret");
        let none = |_: &str| None;
        assert!(resolve_credentials("backends.gh", &mut c, &none).is_err());
    }

    #[test]
    fn globs() {
        assert!(glob("/repos/*", "/repos/a/b"));
        assert!(glob("/repos/*/issues", "/repos/a/issues"));
        assert!(!glob("/repos/*/issues", "/repos/a/pulls"));
        assert!(glob("*", "/"));
        assert!(!glob("/a*b*c", "/abx"));
        assert!(glob("/a*b*c", "/axbyc"));
        assert!(!glob("/ab*ab", "/ab"));
    }
}
