//! The OpenAPI 3.1 document served at `/v1/openapi.json`, generated from the
//! code at start.
//!
//! Why generated: a hand-written document drifted from the broker (codes it
//! emits but did not list, statuses it answers but did not document, a
//! hard-coded port). Now every part comes from what the broker runs:
//!
//! - schemas from the wire types in `tessera-client` (utoipa's `ToSchema`,
//!   feature `openapi`), `ErrorCode` with every code's meaning included;
//! - operations from the `#[utoipa::path]` of each handler, collected by the
//!   same table that builds the router ([`super::api_router`]), so a route
//!   cannot be served undocumented or documented unserved;
//! - each operation's refusals from a [`refusals!`] list of [`ErrorCode`]s by
//!   status, next to the handler;
//! - `servers` relative, so the document is right for whatever address serves
//!   it.
//!
//! A snapshot (`docs/openapi.json`) pins the result: a change to the contract
//! shows up as a diff in review (`TESSERA_UPDATE_OPENAPI=1 cargo test -p
//! tessera-broker --lib openapi` rewrites it).

use axum::http::StatusCode;
use std::collections::BTreeMap;
use std::sync::OnceLock;
use tessera_client::types::{ErrorBody, ErrorCode, ErrorDetail, Id};
use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::{AllOfBuilder, ObjectBuilder, Ref, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::server::Server;
use utoipa::openapi::{OpenApi as Document, RefOr};
use utoipa::{IntoParams, Modify, OpenApi};

/// Declares `$name`, the refusals an operation documents: for each status,
/// the [`ErrorCode`]s it may answer with (`responses(..., $name)` in the
/// handler's `#[utoipa::path]`).
macro_rules! refusals {
    ($name:ident { $($status:literal => [$($code:ident),+ $(,)?]),+ $(,)? }) => {
        #[doc = concat!("The refusals of the operation below, by status (`", stringify!($name), "`).")]
        pub struct $name;

        impl utoipa::IntoResponses for $name {
            fn responses() -> std::collections::BTreeMap<
                String,
                utoipa::openapi::RefOr<utoipa::openapi::response::Response>,
            > {
                use tessera_client::types::ErrorCode;
                $crate::api::openapi::refusal_responses(&[
                    $(($status, &[$(ErrorCode::$code),+])),+
                ])
            }
        }
    };
}
pub(crate) use refusals;

/// The responses of a [`refusals!`] list: an `ErrorBody` whose `code` is one
/// of the listed codes, per status.
pub fn refusal_responses(groups: &[(u16, &[ErrorCode])]) -> BTreeMap<String, RefOr<Response>> {
    groups
        .iter()
        .map(|(status, codes)| {
            let reason = StatusCode::from_u16(*status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("Error");
            let names: Vec<String> = codes.iter().map(|c| format!("`{}`", c.as_str())).collect();
            let code = ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(codes.iter().map(|c| c.as_str())));
            let schema = AllOfBuilder::new()
                .item(Ref::from_schema_name("ErrorBody"))
                .item(
                    ObjectBuilder::new()
                        .property("error", ObjectBuilder::new().property("code", code)),
                );
            let response = ResponseBuilder::new()
                .description(format!("{reason}. Error codes: {}.", names.join(", ")))
                .content(
                    "application/json",
                    ContentBuilder::new().schema(Some(schema)).build(),
                )
                .build();
            (status.to_string(), RefOr::T(response))
        })
        .collect()
}

/// `{id}` in a path: a run or capability id.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct IdPath {
    /// A lowercase canonical UUID. Anything else is a 404.
    pub id: Id,
}

/// `{name}` in a path: a runtime's name.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct RuntimeNamePath {
    /// Runtime name.
    #[param(pattern = "^[a-z0-9][a-z0-9._-]{0,62}$")]
    pub name: String,
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Tessera credential broker API",
        version = "1",
        description = include_str!("openapi.intro.md"),
    ),
    tags(
        (name = "runs"), (name = "capabilities"), (name = "exchange"), (name = "introspection"),
        (name = "keys"), (name = "admin"), (name = "runtimes"), (name = "leases"),
        (name = "policy"), (name = "audit"), (name = "operations"), (name = "approvals"),
        (name = "gateway"), (name = "oauth"),
    ),
    components(schemas(ErrorBody, ErrorDetail, ErrorCode, Id)),
    modifiers(&Credentials),
)]
struct Contract;

/// The four bearer credentials.
struct Credentials;

impl Modify for Credentials {
    fn modify(&self, doc: &mut Document) {
        let components = doc.components.get_or_insert_with(Default::default);
        for (name, description) in [
            (
                "runtimeKey",
                "Runtime API key `tsr_rt_` + 43 base64url characters, minted by \
                 `POST /v1/admin/runtimes` or `tessera runtimes create`.",
            ),
            (
                "runToken",
                "Run token `tsr_run_` + 43 base64url characters, returned by `POST /v1/runs`.",
            ),
            (
                "adminToken",
                "Admin token `tsr_adm_` + 43 base64url characters.",
            ),
            (
                "approverKey",
                "Approver key `tsr_apr_` + 43 base64url characters, minted by \
                 `POST /v1/admin/approvers` or `tessera approvers create`.",
            ),
        ] {
            let scheme = HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(description))
                .build();
            components.add_security_scheme(name, SecurityScheme::Http(scheme));
        }
        let basic = HttpBuilder::new()
            .scheme(HttpAuthScheme::Basic)
            .description(Some(
                "A resource server: its `oauth-resource` backend's name and introspection \
                 secret (RFC 6749 client_secret_basic).",
            ))
            .build();
        components.add_security_scheme("resourceServer", SecurityScheme::Http(basic));
    }
}

/// The document's frame (info, tags, credentials, shared schemas); the router
/// adds the operations.
pub fn frame() -> Document {
    Contract::openapi()
}

/// The document, built once.
pub fn document() -> &'static str {
    static DOC: OnceLock<String> = OnceLock::new();
    DOC.get_or_init(|| {
        let (_, doc) = super::api_router().split_for_parts();
        let mut doc = serde_json::to_value(finish(doc)).unwrap_or_default();
        merge_closed_flattens(&mut doc);
        serde_json::to_string_pretty(&doc).unwrap_or_default()
    })
}

/// What every response has in common, added once: the `X-Request-Id` header
/// (and `Retry-After` on a 429), and relative `servers`.
fn finish(mut doc: Document) -> Document {
    doc.servers = Some(vec![{
        let mut server = Server::new("/");
        server.description = Some("the broker serving this document".to_owned());
        server
    }]);
    for item in doc.paths.paths.values_mut() {
        for op in [&mut item.get, &mut item.post].into_iter().flatten() {
            for (status, response) in op.responses.responses.iter_mut() {
                let RefOr::T(response) = response else {
                    continue;
                };
                response.headers.insert(
                    "X-Request-Id".to_owned(),
                    HeaderBuilder::new()
                        .schema(ObjectBuilder::new().schema_type(Type::String))
                        .description(Some(
                            "The request id (`req_` + 24 hex digits), also in error bodies \
                             and the broker log.",
                        ))
                        .build(),
                );
                if status == "429" {
                    response.headers.insert(
                        "Retry-After".to_owned(),
                        HeaderBuilder::new()
                            .schema(
                                ObjectBuilder::new()
                                    .schema_type(Type::Integer)
                                    .minimum(Some(1)),
                            )
                            .description(Some("Seconds to wait before retrying (at least 1)."))
                            .build(),
                    );
                }
            }
        }
    }
    doc
}

/// A type that flattens a closed one (`#[serde(flatten)]` of a type with
/// `deny_unknown_fields`, e.g. a live capability's introspection: its claims
/// plus `active`, `scope`, `uses_left`) is derived as `allOf` of the two, which
/// no instance can satisfy (the closed part forbids the other's properties).
/// Such an `allOf` is merged into one closed object with both parts'
/// properties, which is what serde accepts and writes.
fn merge_closed_flattens(doc: &mut serde_json::Value) {
    use serde_json::{Map, Value};
    let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let closed: Map<String, Value> = schemas
        .iter()
        .filter(|(_, s)| s.get("additionalProperties") == Some(&Value::Bool(false)))
        .map(|(name, s)| (format!("#/components/schemas/{name}"), s.clone()))
        .collect();
    for schema in schemas.values_mut() {
        let Some(parts) = schema.get("allOf").and_then(Value::as_array) else {
            continue;
        };
        let resolved: Vec<&Value> = parts
            .iter()
            .map(|p| match p.get("$ref").and_then(Value::as_str) {
                Some(r) => closed.get(r).unwrap_or(p),
                None => p,
            })
            .collect();
        if !parts.iter().any(|p| {
            p.get("$ref")
                .and_then(Value::as_str)
                .is_some_and(|r| closed.contains_key(r))
        }) {
            continue;
        }
        let mut properties = Map::new();
        let mut required = Vec::new();
        for part in resolved {
            if let Some(p) = part.get("properties").and_then(Value::as_object) {
                properties.extend(p.clone());
            }
            if let Some(r) = part.get("required").and_then(Value::as_array) {
                required.extend(r.iter().cloned());
            }
        }
        let mut merged = Map::new();
        merged.insert("type".into(), "object".into());
        if let Some(d) = schema.get("description") {
            merged.insert("description".into(), d.clone());
        }
        merged.insert("required".into(), Value::Array(required));
        merged.insert("properties".into(), Value::Object(properties));
        merged.insert("additionalProperties".into(), Value::Bool(false));
        *schema = Value::Object(merged);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const SNAPSHOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");

    /// The document is what `docs/openapi.json` says; a change to the contract
    /// is a reviewed change to that file.
    #[test]
    fn the_document_is_the_snapshot() {
        let doc = document();
        if std::env::var_os("TESSERA_UPDATE_OPENAPI").is_some() {
            std::fs::write(SNAPSHOT, format!("{doc}\n")).expect("write the snapshot");
        }
        let snapshot = std::fs::read_to_string(SNAPSHOT).expect("docs/openapi.json");
        assert!(
            snapshot.trim_end() == doc,
            "the OpenAPI document differs from docs/openapi.json; review the change and \
             rerun with TESSERA_UPDATE_OPENAPI=1 to accept it"
        );
    }

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
    fn every_operation_documents_its_refusals_and_credentials() {
        let doc: Value = serde_json::from_str(document()).expect("the document parses");
        let mut found = Vec::new();
        documented_codes(&doc["paths"], "paths", &mut found);
        assert!(found.len() > 50, "the walk found the response enums");
        for (at, code) in &found {
            assert!(
                ErrorCode::parse(code).is_some(),
                "{at}: unknown code {code}"
            );
        }
        let listed = doc["components"]["schemas"]["ErrorCode"]["enum"]
            .as_array()
            .expect("enum")
            .len();
        assert_eq!(listed, ErrorCode::ALL.len());
        assert_eq!(doc["servers"][0]["url"], "/");
        let public = [
            "/healthz",
            "/readyz",
            "/metrics",
            "/v1/openapi.json",
            "/.well-known/jwks.json",
            "/v1/exchange",
            // The run token travels in the form (RFC 8693 `subject_token`).
            "/oauth/token",
            "/.well-known/oauth-authorization-server",
        ];
        let paths = doc["paths"].as_object().expect("paths");
        assert!(paths.len() >= 23, "{} paths", paths.len());
        let declared: Vec<&Value> = doc["tags"]
            .as_array()
            .expect("tags")
            .iter()
            .map(|t| &t["name"])
            .collect();
        for (path, item) in paths {
            for (method, op) in item.as_object().expect("path item") {
                let at = format!("{method} {path}");
                for tag in op["tags"].as_array().expect("tags") {
                    assert!(declared.contains(&tag), "{at}: tag {tag} is not declared");
                }
                let responses = op["responses"].as_object().expect("responses");
                assert!(
                    responses.keys().any(|s| s.starts_with('2')),
                    "{at}: no success response"
                );
                for response in responses.values() {
                    assert!(
                        response["headers"]["X-Request-Id"].is_object(),
                        "{at}: a response without X-Request-Id"
                    );
                }
                if !public.contains(&path.as_str()) {
                    assert!(
                        op["security"].as_array().is_some_and(|s| !s.is_empty()),
                        "{at}: no credential"
                    );
                    assert!(responses.contains_key("401"), "{at}: 401 undocumented");
                }
            }
        }
    }
}
