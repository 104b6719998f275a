//! `GET /v1/admin/status`: every replica on this store, and what each enforces.
//!
//! Why: with several replicas behind one address, "which policy is in force,
//! which key signs, is any replica behind?" must be answerable read-only from
//! any of them. Each replica writes its own row ([`crate::jobs::policy::sync`]);
//! the one answering reports itself from memory, so its own line is exact.

use super::extract::AdminCaller;
use crate::api::openapi::refusals;
use crate::app::AppState;
use crate::clock::rfc3339;
use crate::error::ApiError;
use crate::instance::CLAIM_LEASE_SECS;
use crate::store::policy_versions::{self, Seal};
use crate::store::{instances, Dialect};
use axum::extract::State;
use axum::Json;
use tessera_client::types::{BrokerStatus, PublishedPolicy, ReplicaStatus};

/// At most this many unsealed versions are listed.
const MAX_UNSEALED_SHOWN: usize = 100;

/// Instances silent this long are left out (crashed and never judged).
const FORGOTTEN_AFTER_SECS: i64 = 3600;

refusals!(StatusRefusals {
    401 => [Unauthenticated],
    500 => [Internal],
    503 => [StoreUnavailable],
});

/// Replicas and the policy version each enforces
///
/// The newest published policy version (sealed under the KEK; versions above it that are not,
/// written to the store directly, are listed in `unsealed_versions` and enforced nowhere),
/// and every broker on this store that has not stopped
/// (and has beaten its heartbeat in the last hour): its id, host, software version, the
/// policy version and hash it enforces, the key it signs with, when it started and last beat.
/// `live` is false for a replica whose heartbeat is older than the claim lease (15 s). The
/// answering replica's own line comes from its memory; the others' from what they last wrote.
#[utoipa::path(
    get,
    path = "/v1/admin/status",
    operation_id = "brokerStatus",
    tags = ["admin"],
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "Replicas on this store.", body = BrokerStatus),
        StatusRefusals,
    ),
)]
pub async fn status(
    State(app): State<AppState>,
    _admin: AdminCaller,
) -> Result<Json<BrokerStatus>, ApiError> {
    let now = app.clock.now();
    // The newest version that is sealed under the KEK; rows above it that
    // are not were written to the store directly and are named, not shown.
    let mut unsealed_versions = Vec::new();
    let mut published_policy = None;
    let mut rows = policy_versions::Descending::new(0);
    while let Some(row) = rows.next(&app.store).await? {
        if !app.policy_in_force.seal().verifies(&row) {
            // Named up to a bound; the log and the table have the rest.
            if unsealed_versions.len() < MAX_UNSEALED_SHOWN {
                unsealed_versions.push(row.version);
            }
            continue;
        }
        published_policy = Some(PublishedPolicy {
            version: row.version,
            sha256: row.sha256,
            published_at: rfc3339(row.published_at),
            trigger: row.trigger,
            replica: row.replica,
        });
        break;
    }
    let rows = instances::running(&app.store, now - FORGOTTEN_AFTER_SECS).await?;
    let in_force = app.policy_in_force.version();
    let kid = app.keys.snapshot().signer(now).kid().to_owned();
    let me = &app.instance.id;
    let mut replicas: Vec<ReplicaStatus> = rows
        .into_iter()
        .map(|r| {
            let this = &r.id == me;
            ReplicaStatus {
                this,
                live: this || r.heartbeat_at >= now - CLAIM_LEASE_SECS,
                uptime_seconds: now.saturating_sub(r.started_at).max(0),
                started_at: rfc3339(r.started_at),
                heartbeat_at: rfc3339(r.heartbeat_at),
                machine: r.machine,
                pid: r.pid,
                software: if this {
                    Some(env!("CARGO_PKG_VERSION").to_owned())
                } else {
                    r.software
                },
                listen: if this {
                    Some(app.config.listen.to_string())
                } else {
                    r.listen
                },
                policy_version: if this {
                    Some(in_force.version)
                } else {
                    r.policy_version
                },
                policy_sha256: if this {
                    Some(in_force.sha256.clone())
                } else {
                    r.policy_sha256
                },
                signing_kid: if this {
                    Some(kid.clone())
                } else {
                    r.signing_kid
                },
                id: r.id,
            }
        })
        .collect();
    replicas.sort_by_key(|r| !r.this);
    Ok(Json(BrokerStatus {
        replica: me.clone(),
        store: match app.store.dialect() {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
        }
        .to_owned(),
        published_policy,
        unsealed_versions,
        replicas,
    }))
}
