//! `/v1/admin/…`: runtimes and signing keys, for the administrator only.

use super::extract::{AdminCaller, ApiJson, RequestId};
use crate::api::openapi::{refusals, RuntimeNamePath};
use crate::app::AppState;
use crate::audit::{events, AuditEvent};
use crate::clock::rfc3339;
use crate::error::ApiError;
use crate::ids::new_id;
use crate::keys::manage;
use crate::names::GlobList;
use crate::secret::RuntimeKey;
use crate::store::runtimes::{self, CreateRuntime, DisableRuntime, RuntimeRecord};
use crate::store::StoreError;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use tessera_client::types::ErrorCode;
use tessera_client::types::{
    CreateRuntimeRequest, CreateRuntimeResponse, DisableRuntimeResponse, KeyInfo, KeyList,
    RotateKeyResponse, Runtime, RuntimeList,
};

/// Runtime names: 1-63 of `[a-z0-9._-]`, starting with a letter or digit.
pub(crate) fn is_runtime_name(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.bytes().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-')
        })
}

fn scope(field: &'static str, value: Option<&str>) -> Result<GlobList, ApiError> {
    GlobList::parse(value.unwrap_or("*")).ok_or_else(|| {
        ApiError::bad_request(
            ErrorCode::InvalidScope,
            format!("{field}: comma-separated globs of [A-Za-z0-9._@+:-] and *"),
        )
    })
}

refusals!(CreateRuntimeRefusals {
    400 => [InvalidRequest, InvalidJson, InvalidName, InvalidScope, InvalidCertificatePin],
    401 => [Unauthenticated],
    409 => [Conflict],
    413 => [BodyTooLarge],
    415 => [UnsupportedMediaType],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Create a runtime
///
/// Registers a runtime and mints its API key (`tsr_rt_…`), shown exactly once; only its SHA-256
/// is stored. `users` and `task_kinds` default to `*`.
#[utoipa::path(
    post,
    path = "/v1/admin/runtimes",
    operation_id = "createRuntime",
    tags = ["admin"],
    security(("adminToken" = [])),
    request_body(content = CreateRuntimeRequest, example = json!({"name": "orchestrator", "users": "alice,bob", "task_kinds": "summarize,report-*"})),
    responses(
        (status = 201, description = "Runtime created.", body = CreateRuntimeResponse),
        CreateRuntimeRefusals,
    ),
)]
pub async fn create_runtime(
    State(app): State<AppState>,
    _admin: AdminCaller,
    RequestId(rid): RequestId,
    ApiJson(req): ApiJson<CreateRuntimeRequest>,
) -> Result<(StatusCode, Json<CreateRuntimeResponse>), ApiError> {
    if !is_runtime_name(&req.name) {
        return Err(ApiError::bad_request(
            ErrorCode::InvalidName,
            "runtime name must be 1-63 of [a-z0-9._-]",
        ));
    }
    let users = scope("users", req.users.as_deref())?;
    let kinds = scope("task_kinds", req.task_kinds.as_deref())?;
    let pinned = match req.client_cert_sha256.as_deref() {
        None => None,
        Some(fp)
            if fp.len() == 64
                && fp
                    .bytes()
                    .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)) =>
        {
            Some(fp.to_owned())
        }
        Some(_) => {
            return Err(ApiError::bad_request(
                ErrorCode::InvalidCertificatePin,
                "client_cert_sha256 must be 64 lowercase hex characters",
            ))
        }
    };
    let has_client_ca = app
        .config
        .tls
        .as_ref()
        .is_some_and(|t| t.client_ca_file.is_some());
    if pinned.is_some() && !has_client_ca {
        // Without mTLS no request could ever present the pinned certificate.
        return Err(ApiError::bad_request(
            ErrorCode::InvalidCertificatePin,
            "pinning needs mTLS: configure tls.client_ca_file first",
        ));
    }
    let key = RuntimeKey::generate();
    let record = RuntimeRecord {
        id: new_id(),
        name: req.name.clone(),
        users: users.as_text(),
        task_kinds: kinds.as_text(),
        client_cert_sha256: pinned,
        created_at: app.clock.now(),
        disabled_at: None,
    };
    let mut audit = AuditEvent::new(events::RUNTIME_CREATED, "admin", "allow");
    audit.request_id = Some(rid);
    audit.detail = Some(format!(
        "runtime={} users={} task_kinds={}",
        record.name, record.users, record.task_kinds
    ));
    let response = CreateRuntimeResponse {
        id: record.id.clone().into(),
        name: record.name.clone(),
        key: key.expose_secret().to_owned(),
        users: record.users.clone(),
        task_kinds: record.task_kinds.clone(),
    };
    match app
        .store
        .writer()
        .submit(CreateRuntime {
            record,
            key_hash: key.sha256(),
            audit,
        })
        .await
    {
        Ok(()) => Ok((StatusCode::CREATED, Json(response))),
        Err(StoreError::Conflict(_)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            ErrorCode::Conflict,
            "a runtime with this name already exists",
        )),
        Err(e) => Err(e.into()),
    }
}

refusals!(ListRuntimesRefusals {
    401 => [Unauthenticated],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// List runtimes
///
/// Every runtime, ordered by name. Keys are never returned.
#[utoipa::path(
    get,
    path = "/v1/admin/runtimes",
    operation_id = "listRuntimes",
    tags = ["admin"],
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "Runtimes.", body = RuntimeList),
        ListRuntimesRefusals,
    ),
)]
pub async fn list_runtimes(
    State(app): State<AppState>,
    _admin: AdminCaller,
) -> Result<Json<RuntimeList>, ApiError> {
    let list = runtimes::list(&app.store).await?;
    let runtimes = list
        .into_iter()
        .map(|r| Runtime {
            id: r.id.into(),
            name: r.name,
            users: r.users,
            task_kinds: r.task_kinds,
            client_cert_sha256: r.client_cert_sha256,
            created_at: rfc3339(r.created_at),
            disabled_at: r.disabled_at.map(rfc3339),
        })
        .collect();
    Ok(Json(RuntimeList { runtimes }))
}

refusals!(DisableRuntimeRefusals {
    401 => [Unauthenticated],
    404 => [NotFound],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Disable a runtime
///
/// The runtime's key stops working at once, and every run it started that has not ended is
/// ended with everything in it revoked (one `run.ended` audit row each, reason
/// `runtime_disabled`). A repeat changes nothing and answers `disabled: false`.
#[utoipa::path(
    post,
    path = "/v1/admin/runtimes/{name}/disable",
    operation_id = "disableRuntime",
    tags = ["admin", "runtimes"],
    security(("adminToken" = [])),
    params(RuntimeNamePath),
    responses(
        (status = 200, description = "What was disabled and revoked.", body = DisableRuntimeResponse),
        DisableRuntimeRefusals,
    ),
)]
pub async fn disable_runtime(
    State(app): State<AppState>,
    _admin: AdminCaller,
    RequestId(rid): RequestId,
    Path(name): Path<String>,
) -> Result<Json<DisableRuntimeResponse>, ApiError> {
    if !is_runtime_name(&name) {
        return Err(ApiError::not_found("runtime"));
    }
    let mut audit = AuditEvent::new(events::RUNTIME_DISABLED, "admin", "allow");
    audit.request_id = Some(rid);
    let done = app
        .store
        .writer()
        .submit(DisableRuntime {
            name: name.clone(),
            audit,
        })
        .await?
        .ok_or_else(|| ApiError::not_found("runtime"))?;
    app.revocation_wakeup.notify_one();
    Ok(Json(DisableRuntimeResponse {
        name,
        disabled: done.disabled,
        runs_ended: done.runs_ended,
        revoked: done.revoked,
    }))
}

refusals!(RotateKeyRefusals {
    401 => [Unauthenticated],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Rotate the signing key
///
/// Generates a new Ed25519 signing key. It is published in the JWKS at once and starts
/// signing at `signs_from`, `[replicas] key_prepublish` later (30 s by default), once every
/// replica's periodic key refresh has loaded it, so no replica ever meets a token whose key
/// it does not know. The keys it replaces sign until then and stay published for the longest
/// capability ttl plus 60 seconds after it, so that tokens they signed still verify. No
/// request body.
#[utoipa::path(
    post,
    path = "/v1/admin/keys/rotate",
    operation_id = "rotateKey",
    tags = ["admin", "keys"],
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "Key rotated.", body = RotateKeyResponse),
        RotateKeyRefusals,
    ),
)]
pub async fn rotate_key(
    State(app): State<AppState>,
    _admin: AdminCaller,
    RequestId(rid): RequestId,
) -> Result<Json<RotateKeyResponse>, ApiError> {
    let now = app.clock.now();
    // Published now, signing once every replica's refresh has loaded it.
    let prepublish = app.config.replicas.key_prepublish.as_secs() as i64;
    // Every token the old keys sign until then expires within the longest
    // capability ttl after it.
    let keep = app.config.limits.max_capability_ttl.as_secs() as i64 + 60;
    let mut audit = AuditEvent::new(events::KEY_ROTATED, "admin", "allow");
    audit.request_id = Some(rid);
    let (set, rotated) = manage::rotate(&app.store, &app.kek, now, prepublish, keep, audit)
        .await
        .map_err(|e| match e {
            manage::KeyStoreError::Store(s) => ApiError::from(s),
            other => {
                tracing::error!(error = %other, "key rotation failed");
                ApiError::internal()
            }
        })?;
    app.keys.replace(set);
    Ok(Json(RotateKeyResponse {
        kid: rotated.kid,
        signs_from: rfc3339(rotated.signs_from),
        previous_kid: rotated.retired.last().cloned(),
        previous_published_until: (!rotated.retired.is_empty())
            .then(|| rfc3339(rotated.signs_from + keep)),
    }))
}

refusals!(ListKeysRefusals {
    401 => [Unauthenticated],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// List signing keys
///
/// Every signing key (public metadata only) with its state.
#[utoipa::path(
    get,
    path = "/v1/admin/keys",
    operation_id = "listKeys",
    tags = ["admin", "keys"],
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "Signing keys.", body = KeyList),
        ListKeysRefusals,
    ),
)]
pub async fn list_keys(
    State(app): State<AppState>,
    _admin: AdminCaller,
) -> Result<Json<KeyList>, ApiError> {
    let now = app.clock.now();
    let rows = crate::store::keys::load_all(&app.store).await?;
    let keys = rows
        .into_iter()
        .map(|k| {
            let signs_from = k.signs_from.unwrap_or(k.created_at);
            let state = match (k.retired_at, k.publish_until) {
                _ if now < signs_from => "scheduled",
                (None, _) => "active",
                (Some(at), _) if now < at => "active",
                (Some(_), Some(u)) if now <= u => "published",
                _ => "expired",
            };
            KeyInfo {
                kid: k.kid,
                state: state.to_owned(),
                created_at: rfc3339(k.created_at),
                signs_from: rfc3339(signs_from),
                retired_at: k.retired_at.map(rfc3339),
                publish_until: k.publish_until.map(rfc3339),
            }
        })
        .collect();
    Ok(Json(KeyList { keys }))
}
