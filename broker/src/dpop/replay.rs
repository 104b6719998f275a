//! The DPoP replay cache: each proof (its key's thumbprint and `jti`) is
//! accepted once while its `iat` is inside the window.
//!
//! Bounded twice, so no one caller can fill it for everybody: in all
//! ([`MAX_REMEMBERED`]) and per run ([`MAX_PER_RUN`], well above what the
//! server-wide per-run rate lets a run send in a window). Full, it refuses new
//! proofs (fail closed) rather than forget a live one. Entries are kept in
//! per-second expiry buckets, so ageing out costs only what expires.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// Proofs remembered at most (about 100 bytes each with the indexes).
pub const MAX_REMEMBERED: usize = 400_000;
/// Proofs remembered at most for one run.
pub const MAX_PER_RUN: u32 = 20_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Replayed,
    Full,
}

#[derive(Default)]
pub struct Replay {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Proof id → until when it is remembered.
    seen: HashMap<[u8; 16], i64>,
    /// Until → the proofs (and their runs) that expire then.
    expiring: BTreeMap<i64, Vec<([u8; 16], String)>>,
    per_run: HashMap<String, u32>,
}

impl Replay {
    /// Remembers proof `id` of run `run` until `until`, unless it is already
    /// remembered (a replay) or there is no room.
    pub fn remember(&self, id: [u8; 16], run: &str, until: i64, now: i64) -> Result<(), Refused> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.age_out(now);
        if inner.seen.contains_key(&id) {
            return Err(Refused::Replayed);
        }
        let of_run = inner.per_run.get(run).copied().unwrap_or(0);
        if inner.seen.len() >= MAX_REMEMBERED || of_run >= MAX_PER_RUN {
            return Err(Refused::Full);
        }
        inner.seen.insert(id, until);
        inner
            .expiring
            .entry(until)
            .or_default()
            .push((id, run.to_owned()));
        *inner.per_run.entry(run.to_owned()).or_default() += 1;
        Ok(())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().map(|i| i.seen.len()).unwrap_or(0)
    }
}

impl Inner {
    fn age_out(&mut self, now: i64) {
        while let Some(entry) = self.expiring.first_entry() {
            if *entry.key() >= now {
                break;
            }
            for (id, run) in entry.remove() {
                self.seen.remove(&id);
                if let Some(n) = self.per_run.get_mut(&run) {
                    *n -= 1;
                    if *n == 0 {
                        self.per_run.remove(&run);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u32) -> [u8; 16] {
        let mut id = [0u8; 16];
        id[..4].copy_from_slice(&n.to_be_bytes());
        id
    }

    #[test]
    fn a_proof_is_remembered_until_it_expires_then_forgotten() {
        let r = Replay::default();
        r.remember(id(1), "run-a", 100, 50).unwrap();
        assert_eq!(r.remember(id(1), "run-a", 100, 99), Err(Refused::Replayed));
        assert_eq!(
            r.remember(id(1), "run-b", 100, 100),
            Err(Refused::Replayed),
            "still live at its until"
        );
        r.remember(id(1), "run-a", 200, 101).unwrap();
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn one_run_cannot_fill_the_cache_for_the_others() {
        let r = Replay::default();
        for n in 0..MAX_PER_RUN {
            r.remember(id(n), "greedy", 1000, 0).unwrap();
        }
        assert_eq!(
            r.remember(id(MAX_PER_RUN), "greedy", 1000, 0),
            Err(Refused::Full)
        );
        r.remember(id(MAX_PER_RUN + 1), "other", 1000, 0).unwrap();
        // Its proofs age out and it may send again.
        r.remember(id(MAX_PER_RUN + 2), "greedy", 2000, 1001)
            .unwrap();
        assert_eq!(r.len(), 1, "only the last proof is live at 1001");
    }
}
