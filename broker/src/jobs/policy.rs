//! Policy reload on SIGHUP (`kill -HUP`), and the sync that keeps this
//! replica on the newest published policy version. The reload itself, with
//! its audit row and fail-closed rule, is [`crate::policy_reload`]; versions
//! are [`crate::policy_versions`].

use crate::app::AppState;

/// Reloads the policy directory on every SIGHUP.
pub async fn reload_on_sighup(app: AppState) {
    let mut hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; reload via the admin API");
            return;
        }
    };
    while hup.recv().await.is_some() {
        // Outcomes (including rejections) are logged and audited by reload().
        let _ = crate::policy_reload::reload(&app, "signal", None).await;
    }
}

/// Switches to each newer published policy version (every `[replicas]
/// policy_sync`), and writes what this replica enforces to its instance row
/// whenever that changes. Versions that were tried and not adopted (none
/// genuine above the one in force, or it does not compile here) are not tried
/// again until a row is added; readiness reports `policy_behind`
/// only for a genuine version this replica cannot enforce.
pub async fn sync(app: AppState) {
    let mut tick = tokio::time::interval(app.config.replicas.policy_sync);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tried: Option<crate::store::policy_versions::Marker> = None;
    let mut moved_back = false;
    let mut reported: Option<(i64, String)> = None;
    loop {
        tick.tick().await;
        match crate::store::policy_versions::marker(&app.store).await {
            Ok(Some(head)) => {
                let in_force = app.policy_in_force.version().version;
                // Versions only ever grow: a newest one below the one in force
                // means rows were removed underneath the brokers.
                let back = head.highest < in_force;
                if back && !moved_back {
                    tracing::error!(newest = head.highest, in_force,
                        "published policy versions moved back: rows were removed from the store; this replica keeps the version it enforces");
                    app.metrics.background("policy_sync", "moved_back");
                }
                moved_back = back;
                if head.highest <= in_force {
                    app.health.policy_sync_saw(in_force, in_force);
                } else if tried != Some(head) && adopt_newer(&app).await {
                    tried = Some(head);
                }
            }
            Ok(None) => {}
            // The store's state is readiness's to report; the next tick retries.
            Err(e) => tracing::debug!(error = %e, "policy sync could not read the store"),
        }
        let in_force = app.policy_in_force.version();
        let kid = app.keys.snapshot().signer(app.clock.now()).kid().to_owned();
        let now = (in_force.version, kid.clone());
        if reported.as_ref() != Some(&now) {
            let status = crate::store::instances::ReportStatus {
                instance_id: app.instance.id.clone(),
                policy_version: in_force.version,
                policy_sha256: in_force.sha256,
                signing_kid: kid,
                software: env!("CARGO_PKG_VERSION").to_owned(),
                listen: app.config.listen.to_string(),
            };
            if app.store.writer().submit(status).await.is_ok() {
                reported = Some(now);
            }
        }
    }
}

/// Adopts the newest genuine version above the one in force, if any; false
/// when the store could not be read (try again next tick).
async fn adopt_newer(app: &AppState) -> bool {
    use crate::policy_versions::{adopt_newest, AdoptError};
    // Not while a reload here is deciding what to publish.
    let _one_at_a_time = app.policy_in_force.reload_lock().lock().await;
    let in_force = app.policy_in_force.version().version;
    match adopt_newest(app, in_force).await {
        Ok(Some(v)) => app.health.policy_sync_saw(v, v),
        Ok(None) => app.health.policy_sync_saw(in_force, in_force),
        Err(AdoptError::Store(e)) => {
            tracing::warn!(error = %e, "could not read the published policy versions; retrying");
            return false;
        }
        Err(AdoptError::Invalid { version, errors }) => {
            tracing::error!(version, %errors, "published policy version does not compile here (an older broker?); the previous one stays in force");
            app.metrics.background("policy_sync", "refused");
            app.health.policy_sync_saw(version, in_force);
        }
    }
    true
}
