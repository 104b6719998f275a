//! Strict mode: a database backend refuses to issue while its server has a
//! default that lets a throw-away user do more than its grant.
//!
//! Why at issue time and not only at start: the server can be changed under a
//! running broker (a restored dump, an operator's GRANT), and a fix should take
//! effect without a restart. A clean answer is trusted for [`CLEAN_FOR`]; an
//! unclean one never, so the first exchange after the operator's fix succeeds.
//! The check reads a handful of catalog rows (about a millisecond here); it
//! runs once per [`CLEAN_FOR`] per process, not per exchange.

use super::{BackendError, Finding};
use std::future::Future;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// How long a clean check is trusted.
pub const CLEAN_FOR: Duration = Duration::from_secs(60);

pub struct StrictGate {
    enabled: bool,
    clean_at: Mutex<Option<Instant>>,
}

impl StrictGate {
    pub fn new(enabled: bool) -> StrictGate {
        StrictGate {
            enabled,
            clean_at: Mutex::new(None),
        }
    }

    /// `Ok` when strict mode is off or the server has no finding; otherwise
    /// [`BackendError::UnsafeDefaults`] naming them. `check` asks the server.
    pub async fn admit<F, Fut>(&self, check: F) -> Result<(), BackendError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<Finding>, BackendError>>,
    {
        if !self.enabled {
            return Ok(());
        }
        // Held across the check: concurrent first exchanges ask once.
        let mut clean_at = self.clean_at.lock().await;
        if clean_at.is_some_and(|t| t.elapsed() < CLEAN_FOR) {
            return Ok(());
        }
        let findings: Vec<Finding> = check().await?.into_iter().filter(|f| f.strict).collect();
        if findings.is_empty() {
            *clean_at = Some(Instant::now());
            return Ok(());
        }
        *clean_at = None;
        Err(BackendError::UnsafeDefaults(
            findings.iter().map(|f| f.id).collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn finding() -> Finding {
        Finding {
            id: "connect_public",
            what: String::new(),
            fix: String::new(),
            strict: true,
        }
    }

    #[tokio::test]
    async fn refuses_until_clean_then_trusts_a_clean_answer() {
        let gate = StrictGate::new(true);
        let asked = AtomicUsize::new(0);
        for _ in 0..2 {
            let e = gate
                .admit(|| async {
                    asked.fetch_add(1, Ordering::SeqCst);
                    Ok(vec![finding()])
                })
                .await
                .unwrap_err();
            assert!(matches!(e, BackendError::UnsafeDefaults(ids) if ids == ["connect_public"]));
        }
        // An unclean answer is never cached: both calls asked.
        assert_eq!(asked.load(Ordering::SeqCst), 2);
        gate.admit(|| async {
            asked.fetch_add(1, Ordering::SeqCst);
            Ok(vec![])
        })
        .await
        .unwrap();
        gate.admit(|| async {
            asked.fetch_add(1, Ordering::SeqCst);
            Ok(vec![finding()])
        })
        .await
        .unwrap();
        assert_eq!(asked.load(Ordering::SeqCst), 3, "a clean answer is trusted");
    }

    #[tokio::test]
    async fn findings_that_do_not_block_are_admitted() {
        let gate = StrictGate::new(true);
        let transient = Finding {
            strict: false,
            ..finding()
        };
        gate.admit(|| async { Ok(vec![transient]) }).await.unwrap();
    }

    #[tokio::test]
    async fn off_never_asks_and_a_failed_check_refuses() {
        let gate = StrictGate::new(false);
        gate.admit(|| async { Ok(vec![finding()]) }).await.unwrap();
        let gate = StrictGate::new(true);
        let e = gate
            .admit(|| async { Err(BackendError::Unavailable("down".into())) })
            .await
            .unwrap_err();
        assert!(matches!(e, BackendError::Unavailable(_)));
    }
}
