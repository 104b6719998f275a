//! `[shutdown]`, `[readiness]`, `[retention]` and the store's request-path
//! timeout: how long the broker may take to stop, to answer when its store
//! does not, what it calls "not ready", and how long it keeps what it stores.
//!
//! Why settings: an orchestrator sends SIGKILL after its own grace period
//! (Kubernetes: 30 s by default), so the broker must be done before that at a
//! moment of its choosing; a load balancer gives up on a request after its
//! own timeout, so a broker whose store is frozen must answer 503 before it.

use super::{duration_setting, err, ConfigError};
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawShutdown {
    timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReadiness {
    outbox_stuck_after: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRetention {
    runs: Option<String>,
    audit: Option<String>,
    interval: Option<String>,
}

/// `[retention]`: what is deleted, and after how long (docs/operations.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionConfig {
    /// Ended runs, with their capabilities, leases, done removals and
    /// approvals, are deleted this long after they ended; `None`: kept.
    pub runs: Option<Duration>,
    /// Audit rows older than this are deleted once exported, up to a signed
    /// checkpoint; `None` (the default): kept.
    pub audit: Option<Duration>,
    /// How often the pruner looks.
    pub interval: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            runs: Some(Duration::from_secs(30 * 86_400)),
            audit: None,
            interval: Duration::from_secs(600),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct OperationsConfig {
    /// From SIGTERM to exit, at most: in-flight requests get most of it, then
    /// the background jobs finish or hand back their work in the rest.
    pub shutdown_timeout: Duration,
    /// Longest a request waits for the store before a 503 `store_unavailable`.
    pub store_timeout: Duration,
    /// `/readyz` fails when a downstream removal has been pending this long;
    /// `None`: never (alert on the stuck-removals metric instead).
    pub outbox_stuck_after: Option<Duration>,
    pub retention: RetentionConfig,
}

impl Default for OperationsConfig {
    fn default() -> Self {
        OperationsConfig {
            shutdown_timeout: Duration::from_secs(10),
            store_timeout: Duration::from_secs(2),
            outbox_stuck_after: Some(Duration::from_secs(300)),
            retention: RetentionConfig::default(),
        }
    }
}

fn between(
    setting: &str,
    v: &Option<String>,
    default: Duration,
    min: Duration,
    max: Duration,
) -> Result<Duration, ConfigError> {
    let d = duration_setting(setting, v, default)?;
    if d < min || d > max {
        return Err(err(
            setting,
            format!("must be between {}s and {}s", min.as_secs(), max.as_secs()),
        ));
    }
    Ok(d)
}

/// A retention period: `"off"`, or a duration of at least `min`.
fn period(
    setting: &str,
    v: &Option<String>,
    default: Option<Duration>,
    min: Duration,
) -> Result<Option<Duration>, ConfigError> {
    match v.as_deref() {
        None => Ok(default),
        Some("off") => Ok(None),
        Some(_) => {
            let d = duration_setting(setting, v, Duration::ZERO)?;
            if d < min {
                return Err(err(
                    setting,
                    format!("must be \"off\" or at least {}s", min.as_secs()),
                ));
            }
            Ok(Some(d))
        }
    }
}

pub(super) fn resolve(
    shutdown: RawShutdown,
    store_timeout: &Option<String>,
    readiness: RawReadiness,
    retention: RawRetention,
) -> Result<OperationsConfig, ConfigError> {
    let d = OperationsConfig::default();
    let s = Duration::from_secs;
    let r = RetentionConfig::default();
    Ok(OperationsConfig {
        retention: RetentionConfig {
            // A minute at least: nothing a run was given outlives its end (what
            // is still pending keeps it), and its runtime can read it once more.
            runs: period("retention.runs", &retention.runs, r.runs, s(60))?,
            audit: period("retention.audit", &retention.audit, r.audit, s(86_400))?,
            interval: between(
                "retention.interval",
                &retention.interval,
                r.interval,
                s(1),
                s(86_400),
            )?,
        },
        shutdown_timeout: between(
            "shutdown.timeout",
            &shutdown.timeout,
            d.shutdown_timeout,
            s(1),
            s(600),
        )?,
        store_timeout: between("store.timeout", store_timeout, d.store_timeout, s(1), s(60))?,
        // "off": alert on tessera_revocations_stuck instead (docs/operations.md).
        outbox_stuck_after: period(
            "readiness.outbox_stuck_after",
            &readiness.outbox_stuck_after,
            d.outbox_stuck_after,
            s(10),
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bounds() {
        let c = resolve(
            RawShutdown::default(),
            &None,
            RawReadiness::default(),
            RawRetention::default(),
        )
        .unwrap();
        assert_eq!(c.retention.runs, Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(c.retention.audit, None);
        assert_eq!(c.shutdown_timeout, Duration::from_secs(10));
        assert_eq!(c.store_timeout, Duration::from_secs(2));
        let e = resolve(
            RawShutdown {
                timeout: Some("0s".into()),
            },
            &None,
            RawReadiness::default(),
            RawRetention::default(),
        )
        .unwrap_err();
        assert_eq!(e.setting, "shutdown.timeout");
        let e = resolve(
            RawShutdown::default(),
            &Some("2m".into()),
            RawReadiness::default(),
            RawRetention::default(),
        )
        .unwrap_err();
        assert_eq!(e.setting, "store.timeout");
        let off = RawRetention {
            runs: Some("off".into()),
            audit: Some("300d".into()),
            interval: None,
        };
        let c = resolve(RawShutdown::default(), &None, RawReadiness::default(), off).unwrap();
        assert_eq!(c.retention.runs, None);
        assert_eq!(c.retention.audit, Some(Duration::from_secs(300 * 86_400)));
        let short = RawRetention {
            runs: Some("30s".into()),
            ..Default::default()
        };
        let e = resolve(
            RawShutdown::default(),
            &None,
            RawReadiness::default(),
            short,
        )
        .unwrap_err();
        assert_eq!(e.setting, "retention.runs");
    }
}
