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
    /// When the server was last found clean; read without waiting by every
    /// exchange (the common case costs no async lock).
    clean_at: std::sync::Mutex<Option<Instant>>,
    /// Held across a check, so concurrent exchanges ask the server once.
    checking: Mutex<()>,
}

impl StrictGate {
    pub fn new(enabled: bool) -> StrictGate {
        StrictGate {
            enabled,
            clean_at: std::sync::Mutex::new(None),
            checking: Mutex::new(()),
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
        if self.trusted() {
            return Ok(());
        }
        let _checking = self.checking.lock().await;
        // Another exchange may have checked while this one waited.
        if self.trusted() {
            return Ok(());
        }
        let findings: Vec<Finding> = check().await?.into_iter().filter(|f| f.strict).collect();
        let clean = findings.is_empty();
        *self.clean_at.lock().unwrap_or_else(|p| p.into_inner()) = clean.then(Instant::now);
        if clean {
            return Ok(());
        }
        Err(BackendError::UnsafeDefaults(
            findings.iter().map(|f| f.id).collect(),
        ))
    }
}

impl StrictGate {
    fn trusted(&self) -> bool {
        self.clean_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|t| t.elapsed() < CLEAN_FOR)
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
