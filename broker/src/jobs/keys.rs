//! Signing-key refresh: picks up keys rotated by another replica.
//!
//! The only way a key reaches this broker from the store: an unknown `kid` in a
//! token never causes a read (anyone can send one). That is safe because a
//! rotated-in key signs only `[replicas] key_prepublish` after it is stored,
//! longer than one refresh interval plus a store timeout, so every replica has
//! loaded it before any token it signed exists ([`crate::keys::ring_set`]).

use crate::app::AppState;
use crate::keys::manage;

/// Reloads the key set every `[replicas] key_refresh`; a failure is logged
/// and the old set kept (its scheduled keys still take over on time).
pub async fn refresh(app: AppState) {
    let mut tick = tokio::time::interval(app.config.replicas.key_refresh);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match manage::load(&app.store, &app.kek, app.clock.now()).await {
            Ok(set) => app.keys.replace(set),
            Err(e) => tracing::warn!(error = %e, "signing key refresh failed"),
        }
    }
}
