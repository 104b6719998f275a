//! One policy version for every replica.
//!
//! Why: a reload reaches one process, and replicas see their policy files
//! change at different moments (a Kubernetes ConfigMap reaches each pod on its
//! own schedule), so a permit removed on one replica kept issuing on another.
//! The policy in force is therefore a *published version* in the shared store:
//! - a replica whose reload (admin API, SIGHUP, its file watch, its start)
//!   reads files that differ from the newest version publishes them as the
//!   next version, audited once; reading the files the newest version already
//!   has publishes nothing;
//! - every replica looks for a newer version every `[replicas] policy_sync`
//!   and switches to it, compiled from the stored files, within that interval
//!   (plus a store read and a compile); `/readyz` says `policy_behind` when
//!   one has not switched within [`crate::config::ReplicasConfig::policy_lag_limit`];
//! - a version carries a MAC under a key derived from the KEK, so a store
//!   writer without the KEK cannot publish a policy; a version whose MAC or
//!   hash does not check is refused by every replica (logged, readiness fails).
//!
//! The store stays the coordinator: version numbers are taken inside the
//! writer's batch, which holds the audit head (serialised across replicas).

use crate::app::App;
use crate::audit::AuditEvent;
use crate::policy::files::PolicyFiles;
use crate::policy::in_force::InForce;
use crate::policy::PolicyEngine;
use crate::store::policy_versions::{self as stored, Published, Seal};
use crate::store::StoreError;
use std::path::Path;

/// Publishes `files` unless the newest version has them; returns what was
/// done. `audit_unchanged`: audit even when nothing changes.
pub async fn publish(
    app: &App,
    files: &PolicyFiles,
    sha256: &str,
    trigger: &str,
    audit: AuditEvent,
    audit_unchanged: bool,
) -> Result<Published, StoreError> {
    let sources = serde_json::to_string(files).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    app.store
        .writer()
        .submit(stored::Publish {
            sha256: sha256.to_owned(),
            sources,
            trigger: trigger.to_owned(),
            replica: app.instance.id.clone(),
            after: app.policy_in_force.version().version,
            seal: app.policy_in_force.seal().clone(),
            audit,
            audit_unchanged,
        })
        .await
}

/// At start. On SQLite (one broker) the policy files become the newest
/// version unless they already are. On PostgreSQL a replica joining a store
/// that has a version adopts the newest one and does not publish its files:
/// a replica started with older files must not roll every replica back (its
/// files are published by a reload or its watch, when they change). Only a
/// store with no version that can be adopted gets this replica's files.
/// The files are read once more, and what is read is what is compiled here
/// and published, whatever changed since the start's first load.
pub async fn publish_at_start(app: &App) -> anyhow::Result<()> {
    let dir = app.config.policy_dir.clone();
    let (files, engine) = tokio::task::spawn_blocking(move || {
        let files = PolicyFiles::read_dir(&dir)?;
        let engine = files.compile(&dir)?;
        Ok::<_, crate::policy::PolicyLoadError>((files, engine))
    })
    .await?
    .map_err(|e| anyhow::anyhow!("policy in {}:\n{e}", app.config.policy_dir.display()))?;
    let sha256 = files.sha256();
    if matches!(app.store.dialect(), crate::store::Dialect::Postgres) {
        match adopt_newest(app, 0).await {
            Ok(Some(version)) => {
                let in_force = app.policy_in_force.version().sha256;
                if in_force != sha256 {
                    tracing::warn!(version, published = %in_force, files = %sha256,
                        "the policy files here differ from the published version in force; \
                         not published at start (`tessera policy reload` publishes them)");
                }
                return Ok(());
            }
            Ok(None) => {}
            Err(AdoptError::Store(e)) => return Err(e.into()),
            // A version from a newer broker: not a reason to publish older
            // files over it for everyone. This replica holds its own files,
            // unpublished, and is not ready (`policy_behind`, at once) until
            // it can adopt a published version.
            Err(AdoptError::Invalid { version, errors }) => {
                tracing::error!(version, %errors,
                    "the newest published policy version does not compile here (an older broker?); \
                     serving this broker's own files, unpublished, and reporting policy_behind");
                app.policy_in_force.replace_engine(engine);
                app.policy_in_force
                    .set_version(InForce { version: 0, sha256 });
                app.health.policy_behind_from_start(version);
                return Ok(());
            }
        }
    }
    // What the files no longer grant (they may have changed while the broker
    // was down) is revoked, as a reload would.
    let c = &app.config;
    let stale = crate::grant::reauthorize::stale(
        &app.store,
        &engine,
        &c.backends,
        &c.limits,
        app.clock.now(),
    )
    .await?;
    let mut audit = AuditEvent::new(crate::audit::events::POLICY_PUBLISHED, "start", "allow");
    audit.detail = Some(format!(
        "policies={} sha256={sha256} revoked={}",
        engine.policy_count(),
        stale.len()
    ));
    app.policy_in_force.replace_engine(engine);
    let published = publish(app, &files, &sha256, "start", audit, false).await?;
    crate::grant::reauthorize::revoke_stale(app, &stale, None).await;
    app.policy_in_force.set_version(InForce {
        version: published.version(),
        sha256: sha256.clone(),
    });
    match published {
        Published::New(version) => {
            tracing::info!(version, %sha256, "published this broker's policy files as a new version")
        }
        Published::Unchanged(version) => {
            tracing::info!(version, %sha256, "policy files are the published version")
        }
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("policy version {version} does not compile here: {errors}")]
    Invalid { version: i64, errors: String },
}

/// Switches this replica to the newest genuine version above `above`,
/// compiled from its stored files; `None` when there is none. A version whose
/// seal or hash does not check (written without the KEK) is logged and
/// skipped: it can neither come into force nor hold a genuine one back.
pub async fn adopt_newest(app: &App, above: i64) -> Result<Option<i64>, AdoptError> {
    let mut rows = stored::Descending::new(above);
    while let Some(row) = rows.next(&app.store).await? {
        let files = serde_json::from_str::<PolicyFiles>(&row.sources).ok();
        let genuine = app.policy_in_force.seal().verifies(&row)
            && files.as_ref().is_some_and(|f| f.sha256() == row.sha256);
        let (true, Some(files)) = (genuine, files) else {
            tracing::error!(version = row.version, "a published policy version is not sealed by a broker holding this KEK (written to the store directly?); refused");
            app.metrics.background("policy_sync", "forged");
            continue;
        };
        let version = row.version;
        let shown = format!("policy v{version}");
        let compiled = tokio::task::spawn_blocking(move || files.compile(Path::new(&shown)))
            .await
            .map_err(|e| AdoptError::Invalid {
                version,
                errors: e.to_string(),
            })?;
        let engine: PolicyEngine = compiled.map_err(|e| AdoptError::Invalid {
            version,
            errors: e.to_string(),
        })?;
        let policies = engine.policy_count();
        app.policy_in_force.replace_engine(engine);
        app.policy_in_force.set_version(InForce {
            version,
            sha256: row.sha256.clone(),
        });
        app.health.policy_loaded();
        tracing::info!(version, sha256 = %row.sha256, policies, published_by = %row.replica,
            trigger = %row.trigger, "switched to the published policy version");
        return Ok(Some(version));
    }
    Ok(None)
}
