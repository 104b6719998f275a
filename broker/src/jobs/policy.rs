//! Policy reload on SIGHUP (`kill -HUP`); the reload itself, with its audit
//! row and fail-closed rule, is [`crate::policy_reload`].

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
