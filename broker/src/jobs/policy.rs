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
/// whenever that changes. A version that cannot be adopted (its seal does not
/// check, it does not compile here) is logged once and not retried; readiness
/// reports `policy_behind` until a newer one is adopted.
pub async fn sync(app: AppState) {
    let mut tick = tokio::time::interval(app.config.replicas.policy_sync);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut refused: Option<i64> = None;
    let mut reported: Option<(i64, String)> = None;
    loop {
        tick.tick().await;
        match crate::store::policy_versions::newest(&app.store).await {
            Ok(Some(head)) => adopt_newer(&app, head.version, &mut refused).await,
            Ok(None) => {}
            // The store's state is readiness's to report; the next tick retries.
            Err(e) => tracing::debug!(error = %e, "policy sync could not read the store"),
        }
        let in_force = app.policy_in_force();
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

async fn adopt_newer(app: &AppState, newest: i64, refused: &mut Option<i64>) {
    use crate::policy_versions::{adopt, AdoptError};
    app.health
        .policy_sync_saw(newest, app.policy_in_force().version);
    if newest <= app.policy_in_force().version || *refused == Some(newest) {
        return;
    }
    // Not while a reload here is deciding what to publish.
    let _one_at_a_time = app.policy_reload_lock.lock().await;
    if newest <= app.policy_in_force().version {
        return;
    }
    match adopt(app, newest).await {
        Ok(()) => app.health.policy_sync_saw(newest, newest),
        Err(AdoptError::Store(e)) => {
            tracing::warn!(error = %e, version = newest, "could not read the published policy version; retrying")
        }
        Err(e) => {
            tracing::error!(error = %e, "published policy version refused; the previous one stays in force here");
            app.metrics.background("policy_sync", "refused");
            *refused = Some(newest);
        }
    }
}
