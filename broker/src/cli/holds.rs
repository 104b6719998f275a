//! The holds on what `tessera exec` obtains: every capability is issued with a
//! hold (`--hold`) that lapses unless `exec` renews it, so if `exec` is killed
//! before it can revoke, the broker revokes them itself soon after. A
//! [`Holder`] renews them from its own task while the command runs and says
//! when they lapsed.
//!
//! Why its own file: renewing is a loop of its own with its own rules (which
//! answers are final, how long an unreachable broker is tolerated), apart from
//! how credentials are obtained and the command is run ([`super::exec`]).

use super::sandbox::say;
use std::time::{Duration, Instant};
use tessera_client::{Capability, Client, Error};

/// The capabilities' holds lapsed (renewal refused, or the broker unreachable
/// for a whole hold): their credentials are gone, so the command was stopped.
pub const EXIT_HOLD_LAPSED: u8 = 123;

/// Keeps the holds of what `exec` obtains alive, from the first capability
/// on, in a task of its own (a slow renewal never delays a forwarded signal or
/// the kill timer).
pub struct Holder {
    ids: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    lapsed: tokio::sync::watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Holder {
    /// Starts renewing (every third of `hold`) whatever [`Holder::add`] lists.
    pub fn start(client: Client, hold: Duration) -> Holder {
        let ids = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let (tx, lapsed) = tokio::sync::watch::channel(false);
        let listed = ids.clone();
        let task = tokio::spawn(async move {
            renew_until_lapsed(&client, &listed, hold).await;
            let _ = tx.send(true);
        });
        Holder { ids, lapsed, task }
    }

    /// Renews `cap` too from now on (if it was issued with a hold).
    pub fn add(&self, cap: &Capability) {
        if cap.lapses_at.is_some() {
            if let Ok(mut ids) = self.ids.lock() {
                ids.push(cap.id().to_owned());
            }
        }
    }

    /// Resolves once the holds are (or must be assumed) lapsed.
    pub async fn lapsed(&self) {
        let mut seen = self.lapsed.clone();
        let _ = seen.wait_for(|l| *l).await;
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Renews the listed holds until they lapse, and returns then. A renewal the broker answers with a lapse, an ended run
/// or a refusal is final at once; one that does not reach the broker is
/// retried until a whole hold has passed since the last that did — the
/// broker's lapse is never later than that.
async fn renew_until_lapsed(client: &Client, ids: &std::sync::Mutex<Vec<String>>, hold: Duration) {
    let every = hold / 3;
    // Before the first capability was asked for: never later than its hold's start.
    let mut renewed_at = Instant::now();
    loop {
        tokio::time::sleep(every).await;
        let listed: Vec<String> = ids.lock().map(|l| l.clone()).unwrap_or_default();
        if listed.is_empty() {
            continue;
        }
        let refs: Vec<&str> = listed.iter().map(String::as_str).collect();
        let sent = Instant::now();
        match tokio::time::timeout(every, client.renew_holds(&refs)).await {
            Ok(Ok(r)) if r.lapsed.is_empty() => renewed_at = sent,
            Ok(Ok(r)) => {
                say!(
                    "tessera exec: the broker let {} capabilities lapse; stopping the command (exit {EXIT_HOLD_LAPSED})",
                    r.lapsed.len()
                );
                return;
            }
            Ok(Err(
                e @ (Error::Expired { .. }
                | Error::Unauthenticated { .. }
                | Error::Rejected { .. }
                | Error::Denied { .. }),
            )) => {
                say!("tessera exec: renewing the holds was refused ({e}); stopping the command (exit {EXIT_HOLD_LAPSED})");
                return;
            }
            _ if renewed_at.elapsed() < hold => {}
            _ => {
                say!(
                    "tessera exec: no renewal reached the broker for {}s; the command's credentials \
                     are lapsing, stopping it (exit {EXIT_HOLD_LAPSED})",
                    hold.as_secs()
                );
                return;
            }
        }
    }
}
