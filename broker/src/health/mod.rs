//! Readiness that tells the truth: each reason this broker should not get
//! traffic, named, from what the broker has actually seen.
//!
//! Why not a probe alone: a one-row write can still fit in the WAL of a disk
//! that is too full for an issuance, so a probe said "ready" while every
//! issuance failed. What decides is the writer's last outcome; a probe (as
//! large as an issuance) runs only when no batch committed recently, which is
//! also how a broker that load balancers stopped sending traffic to finds out
//! that its store is back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tessera_client::types::ReadinessReason;

/// What the broker knows about itself beyond its store.
#[derive(Default)]
pub struct Health {
    stopping: AtomicBool,
    /// The first error of the last policy load, while it is the last one.
    policy_error: Mutex<Option<String>>,
    /// A newer published policy version than the one in force here, and
    /// since when this replica has known of it (set by the policy sync).
    policy_behind: Mutex<Option<(i64, std::time::Instant)>>,
    /// The last verdict on the store and the outbox, and when it was reached.
    verdict: tokio::sync::Mutex<Option<(std::time::Instant, Vec<ReadinessReason>)>>,
}

impl Health {
    /// SIGTERM arrived: load balancers should stop sending requests.
    pub fn begin_stopping(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    pub fn policy_loaded(&self) {
        *self.policy_error.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    pub fn policy_rejected(&self, first_error: String) {
        *self.policy_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(first_error);
    }

    /// The policy sync saw `newest` published while `version` is in force.
    pub fn policy_sync_saw(&self, newest: i64, in_force: i64) {
        let mut g = self.policy_behind.lock().unwrap_or_else(|p| p.into_inner());
        *g = match *g {
            _ if newest <= in_force => None,
            Some((v, since)) if v == newest => Some((v, since)),
            _ => Some((newest, std::time::Instant::now())),
        };
    }

    /// A replica that starts unable to adopt the newest version never
    /// enforced a published one: `policy_behind` at once, not after the limit.
    pub fn policy_behind_from_start(&self, newest: i64) {
        let long_ago = std::time::Instant::now()
            .checked_sub(Duration::from_secs(86_400))
            .unwrap_or_else(std::time::Instant::now);
        *self.policy_behind.lock().unwrap_or_else(|p| p.into_inner()) = Some((newest, long_ago));
    }

    fn policy_behind(&self) -> Option<(i64, Duration)> {
        self.policy_behind
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map(|(v, since)| (v, since.elapsed()))
    }

    fn policy_error(&self) -> Option<String> {
        self.policy_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

pub mod readiness;
pub use readiness::check;
