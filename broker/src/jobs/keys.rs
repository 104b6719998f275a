//! Signing-key refresh: picks up keys rotated by another replica.
//!
//! Why a loop although unknown kids trigger a reload: those reloads are
//! throttled (a forged kid must not make every request read the store), so
//! this bounds how long a key rotated elsewhere can go unrecognised here.

use crate::app::AppState;
use crate::keys::manage;
use std::time::Duration;

/// Reloads the key set every 5 s; a failure is logged and the old set kept.
pub async fn refresh(app: AppState) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tick.tick().await;
        match manage::load(&app.store, &app.kek, app.clock.now()).await {
            Ok(set) => app.keys.replace(set),
            Err(e) => tracing::warn!(error = %e, "signing key refresh failed"),
        }
    }
}
