//! Resources (`BACKEND:PATH`) and actions, validated before anything reaches policy.
//!
//! Each backend kind owns its action vocabulary and path grammar
//! (`backends::token::grammar`, `backends::aws::grammar`, `backends::database`):
//! this module splits `BACKEND:PATH`, finds the backend and hands the path and
//! action to its kind, so it needs the backends' settings and nothing else of the
//! configuration. Validation is strict (length, charset, shape) and happens
//! before policy evaluation or any store write, so hostile strings — control
//! characters, quotes, SQL metacharacters, 10 KB blobs — get a 400 and leave
//! nothing behind.

use crate::backends::database::{self, DbKind};
use crate::backends::grammar::Invalid;
use crate::backends::settings::BackendConfig;
use crate::backends::{aws, http, net, oauth, token};
use std::collections::BTreeMap;
use tessera_client::types::ErrorCode;

/// Longest resource string accepted (`BACKEND:PATH`).
pub const MAX_RESOURCE_LEN: usize = 512;
/// Longest action accepted.
pub use crate::backends::grammar::MAX_ACTION_LEN;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    #[error("resource must be BACKEND:PATH, at most {MAX_RESOURCE_LEN} bytes")]
    Shape,
    #[error("unknown backend")]
    UnknownBackend,
    #[error(
        "resource path is not valid for this backend kind: a character it does not allow, \
         or not its one spelling (an empty, `.` or `..` segment, `**`, upper case in a mysql name)"
    )]
    Path,
    #[error("action is not valid for this backend")]
    Action,
    #[error("this backend grants on one database only, and the resource names another")]
    Database,
}

impl ResourceError {
    pub fn code(&self) -> ErrorCode {
        match self {
            ResourceError::Shape | ResourceError::Path | ResourceError::Database => {
                ErrorCode::InvalidResource
            }
            ResourceError::UnknownBackend => ErrorCode::UnknownBackend,
            ResourceError::Action => ErrorCode::InvalidAction,
        }
    }
}

impl From<Invalid> for ResourceError {
    fn from(invalid: Invalid) -> Self {
        match invalid {
            Invalid::Path => ResourceError::Path,
            Invalid::Action => ResourceError::Action,
            Invalid::Database => ResourceError::Database,
        }
    }
}

/// A validated resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource<'a> {
    pub backend: &'a str,
    pub kind: &'static str,
    pub path: &'a str,
}

/// Backend instance names: 1-63 of `[a-z0-9-]`, starting with a letter.
pub fn is_backend_name(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.as_bytes()[0].is_ascii_lowercase()
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

/// The characters that are wildcards in paths of backend `kind`, as the kind
/// reads them (`*` for every kind; `?` too for `aws-sts`).
pub fn wildcards(kind: &str) -> &'static [char] {
    match kind {
        "aws-sts" => aws::grammar::WILDCARDS,
        "postgres" | "mysql" => database::WILDCARDS,
        "net" => net::grammar::WILDCARDS,
        "http" => http::grammar::WILDCARDS,
        "oauth-resource" => oauth::grammar::WILDCARDS,
        _ => token::grammar::WILDCARDS,
    }
}

/// Whether a validated path of `kind` names a set of resources (has a wildcard):
/// policy then decides it by the resource-set rule (`PolicyEngine::decide`).
pub fn is_set(kind: &str, path: &str) -> bool {
    path.contains(wildcards(kind))
}

/// Whether a permit whose pattern contains a whole set grants it, as the kind
/// says: yes for `token` and `aws-sts` (`like "reports/*"` grants
/// `reports/2026/*`), only explicitly for the database kinds
/// (`database::INCLUSION_GRANTS`).
pub fn inclusion_grants(kind: &str) -> bool {
    match kind {
        "aws-sts" => aws::grammar::INCLUSION_GRANTS,
        "postgres" | "mysql" => database::INCLUSION_GRANTS,
        "net" => net::grammar::INCLUSION_GRANTS,
        "http" => http::grammar::INCLUSION_GRANTS,
        "oauth-resource" => oauth::grammar::INCLUSION_GRANTS,
        _ => token::grammar::INCLUSION_GRANTS,
    }
}

/// Splits and validates `BACKEND:PATH` against the configured backends and the
/// action against the backend kind's vocabulary.
pub fn parse<'a>(
    resource: &'a str,
    action: &str,
    backends: &BTreeMap<String, BackendConfig>,
) -> Result<Resource<'a>, ResourceError> {
    if resource.len() > MAX_RESOURCE_LEN {
        return Err(ResourceError::Shape);
    }
    let (backend, path) = resource.split_once(':').ok_or(ResourceError::Shape)?;
    if !is_backend_name(backend) {
        return Err(ResourceError::Shape);
    }
    let config = backends.get(backend).ok_or(ResourceError::UnknownBackend)?;
    match config {
        BackendConfig::Token(t) => {
            token::grammar::check_resource(path, action, t.actions.as_deref())
        }
        BackendConfig::AwsSts(aws) => {
            aws::grammar::check_resource(path, action, aws.actions.as_deref())
        }
        BackendConfig::Postgres(db) => database::check_resource(DbKind::Postgres, db, path, action),
        BackendConfig::Mysql(db) => database::check_resource(DbKind::Mysql, db, path, action),
        BackendConfig::Net(n) => net::grammar::check_resource(path, action, n.actions.as_deref()),
        BackendConfig::Http(h) => http::grammar::check_resource(path, action, h.actions.as_deref()),
        BackendConfig::OAuthResource(r) => {
            oauth::grammar::check_resource(path, action, &r.resource, &r.scopes)
        }
    }?;
    Ok(Resource {
        backend,
        kind: config.kind(),
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn backends() -> BTreeMap<String, BackendConfig> {
        BTreeMap::from([(
            "svc".to_owned(),
            BackendConfig::Token(crate::backends::token::TokenConfig {
                audience: "a".into(),
                actions: Some(vec!["read".into(), "write".into()]),
            }),
        )])
    }

    #[test]
    fn accepts_good_resources() {
        let b = backends();
        let r = parse("svc:reports/2026/q1.csv", "read", &b).unwrap();
        assert_eq!(
            (r.backend, r.kind, r.path),
            ("svc", "token", "reports/2026/q1.csv")
        );
        assert!(parse("svc:reports/*", "write", &b).is_ok());
    }

    #[test]
    fn rejects_hostile_resources() {
        let b = backends();
        for bad in [
            "svc:reports/../etc",
            "svc:a b",
            "svc:a\u{0}b",
            "svc:a\nb",
            "svc:x';DROP TABLE runs;--",
            "svc:\"quoted\"",
            "svc:",
            "svc:a//b",
            "svc:ünïcode",
        ] {
            assert_eq!(
                parse(bad, "read", &b).unwrap_err(),
                ResourceError::Path,
                "{bad:?}"
            );
        }
        assert_eq!(
            parse(&"a".repeat(10_000), "read", &b).unwrap_err(),
            ResourceError::Shape
        );
        assert_eq!(
            parse("nocolon", "read", &b).unwrap_err(),
            ResourceError::Shape
        );
        assert_eq!(
            parse("Svc:x", "read", &b).unwrap_err(),
            ResourceError::Shape
        );
        assert_eq!(
            parse("other:x", "read", &b).unwrap_err(),
            ResourceError::UnknownBackend
        );
        assert_eq!(
            parse("svc:x", "delete", &b).unwrap_err(),
            ResourceError::Action
        );
        assert_eq!(
            parse("svc:x", "READ", &b).unwrap_err(),
            ResourceError::Action
        );
    }

    fn db_backends() -> BTreeMap<String, BackendConfig> {
        let db = |database: &str, actions: Option<Vec<String>>| {
            database::settings::DatabaseBackendConfig {
                url: secrecy::SecretString::from("postgres://x@h/analytics".to_owned()),
                database: database.to_owned(),
                public_host: "h".into(),
                public_port: 5432,
                connection_limit: 2,
                max_connections: 4,
                scram_iterations: 4096,
                actions,
                strict: true,
                account_host: Some("%".into()),
            }
        };
        BTreeMap::from([
            (
                "pg".to_owned(),
                BackendConfig::Postgres(db("analytics", None)),
            ),
            (
                "my".to_owned(),
                BackendConfig::Mysql(db("shop", Some(vec!["select".into()]))),
            ),
        ])
    }

    #[test]
    fn database_resources() {
        let b = db_backends();
        let r = parse("pg:analytics.public.orders", "select", &b).unwrap();
        assert_eq!((r.kind, r.path), ("postgres", "analytics.public.orders"));
        assert!(parse("pg:analytics.public.orders", "delete", &b).is_ok());
        assert_eq!(parse("my:shop.orders", "select", &b).unwrap().kind, "mysql");
        assert!(parse("pg:analytics.public.*", "select", &b).is_ok());
        assert!(parse("my:shop.*", "select", &b).is_ok());
        let cases = [
            ("pg:analytics.orders", "select", ResourceError::Path),
            ("pg:analytics.*.orders", "select", ResourceError::Path),
            ("pg:analytics.public.o'rders", "select", ResourceError::Path),
            (
                "pg:analytics.public.orders;--",
                "select",
                ResourceError::Path,
            ),
            ("pg:analytics.public.ordérs", "select", ResourceError::Path),
            ("pg:other.public.orders", "select", ResourceError::Database),
            ("pg:analytics.public.orders", "read", ResourceError::Action),
            ("pg:analytics.public.orders", "usage", ResourceError::Action),
            ("my:shop.public.orders", "select", ResourceError::Path),
            ("my:shop.orders", "insert", ResourceError::Action),
        ];
        for (res, action, want) in cases {
            assert_eq!(parse(res, action, &b).unwrap_err(), want, "{res} {action}");
        }
        let long = format!("pg:analytics.public.{}", "t".repeat(300));
        assert_eq!(parse(&long, "select", &b).unwrap_err(), ResourceError::Path);
    }

    proptest! {
        #[test]
        fn never_panics_and_accepted_paths_are_clean(s in ".{0,600}", a in ".{0,80}") {
            let b = backends();
            if let Ok(r) = parse(&s, &a, &b) {
                prop_assert!(r.path.bytes().all(|c| c.is_ascii_graphic()));
                prop_assert!(!r.path.contains(['\'', '"', ';', '\\', ' ']));
                prop_assert!(s.len() <= MAX_RESOURCE_LEN);
            }
        }

        #[test]
        fn generated_valid_paths_round_trip(p in "[a-z0-9]{1,8}(/[a-z0-9_-][a-z0-9._-]{0,7}){0,5}") {
            let b = backends();
            let s = format!("svc:{p}");
            let r = parse(&s, "read", &b).unwrap();
            prop_assert_eq!(r.path, p.as_str());
        }
    }
}
