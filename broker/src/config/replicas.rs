//! `[replicas]`: how brokers sharing one PostgreSQL store behave as one
//! (docs/architecture.md, "Replicas").
//!
//! Why settings: each replica learns what another did (a rotated key, a newly
//! published policy version) by reading the store periodically, so the
//! moments at which all of them agree are set by these intervals, and a
//! rotated-in key must wait longer than the slowest refresh before it signs.

use super::{duration_setting, err, ConfigError};
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReplicas {
    key_refresh: Option<String>,
    key_prepublish: Option<String>,
    policy_sync: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicasConfig {
    /// How often each broker reads the signing keys from the store.
    pub key_refresh: Duration,
    /// How long a rotated-in key is published before it signs; zero
    /// (`"off"`) only where one broker uses the store.
    pub key_prepublish: Duration,
    /// How often each broker looks for a newer published policy version.
    pub policy_sync: Duration,
}

impl Default for ReplicasConfig {
    fn default() -> Self {
        ReplicasConfig {
            key_refresh: Duration::from_secs(5),
            key_prepublish: Duration::from_secs(30),
            policy_sync: Duration::from_secs(1),
        }
    }
}

impl ReplicasConfig {
    /// How long after a version is published every healthy replica enforces
    /// it: one sync interval to notice, one store timeout to read it, and a
    /// second interval for a read that failed once. Past it, `/readyz`
    /// reports `policy_behind`.
    pub fn policy_lag_limit(&self, store_timeout: Duration) -> Duration {
        self.policy_sync * 3 + store_timeout
    }

    /// How old this broker's key set may grow before `/readyz` says
    /// `keys_stale`: older than the pre-publication less one refresh, a key
    /// rotated elsewhere could sign before this broker has read it (never
    /// less than one refresh plus a store timeout, what a healthy refresh
    /// can take).
    pub fn keys_stale_after(&self, store_timeout: Duration) -> Duration {
        let healthy = self.key_refresh + store_timeout;
        if self.key_prepublish.is_zero() {
            return healthy * 3;
        }
        self.key_prepublish
            .saturating_sub(self.key_refresh)
            .max(healthy)
    }
}

pub(super) fn resolve(
    raw: RawReplicas,
    store_timeout: Duration,
) -> Result<ReplicasConfig, ConfigError> {
    let d = ReplicasConfig::default();
    let bounded = |setting: &str, v: &Option<String>, default: Duration| {
        let got = duration_setting(setting, v, default)?;
        if !(Duration::from_secs(1)..=Duration::from_secs(60)).contains(&got) {
            return Err(err(setting, "must be between 1s and 60s"));
        }
        Ok(got)
    };
    let key_refresh = bounded("replicas.key_refresh", &raw.key_refresh, d.key_refresh)?;
    let policy_sync = bounded("replicas.policy_sync", &raw.policy_sync, d.policy_sync)?;
    // "off": a rotated key signs at once (only where one broker uses the store).
    let key_prepublish = match raw.key_prepublish.as_deref() {
        Some("off") => Duration::ZERO,
        _ => duration_setting(
            "replicas.key_prepublish",
            &raw.key_prepublish,
            d.key_prepublish,
        )?,
    };
    // A refresh that starts just before the new key is committed runs one
    // interval later and may wait a store timeout: the key must not sign
    // before every replica has had both.
    let least = key_refresh + store_timeout + Duration::from_secs(1);
    if !key_prepublish.is_zero() && key_prepublish < least {
        return Err(err(
            "replicas.key_prepublish",
            format!(
                "must be \"off\" (one broker on this store) or at least key_refresh + store.timeout + 1s ({}s)",
                least.as_secs()
            ),
        ));
    }
    if key_prepublish > Duration::from_secs(86_400) {
        return Err(err("replicas.key_prepublish", "must be at most 1d"));
    }
    Ok(ReplicasConfig {
        key_refresh,
        key_prepublish,
        policy_sync,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(refresh: &str, prepublish: &str) -> RawReplicas {
        RawReplicas {
            key_refresh: Some(refresh.into()),
            key_prepublish: Some(prepublish.into()),
            policy_sync: None,
        }
    }

    #[test]
    fn a_key_waits_longer_than_the_slowest_refresh() {
        let two = Duration::from_secs(2);
        let c = resolve(RawReplicas::default(), two).unwrap();
        assert_eq!(c, ReplicasConfig::default());
        assert_eq!(c.policy_lag_limit(two), Duration::from_secs(5));
        assert_eq!(c.keys_stale_after(two), Duration::from_secs(25));
        assert!(resolve(raw("1s", "4s"), two).is_ok());
        assert_eq!(
            resolve(raw("1s", "off"), two).unwrap().key_prepublish,
            Duration::ZERO
        );
        let e = resolve(raw("1s", "3s"), two).unwrap_err();
        assert_eq!(e.setting, "replicas.key_prepublish");
        let e = resolve(raw("5s", "2d"), two).unwrap_err();
        assert_eq!(e.setting, "replicas.key_prepublish");
        let e = resolve(raw("0s", "30s"), two).unwrap_err();
        assert_eq!(e.setting, "replicas.key_refresh");
    }
}
