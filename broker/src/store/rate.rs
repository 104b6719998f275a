//! Rate limits as pure arithmetic: GCRA (the generic cell rate algorithm)
//! over microseconds, with no clock and no store.
//!
//! Why GCRA: one stored number per bucket (its theoretical arrival time,
//! TAT) gives both a sustained rate (one request per `interval`) and a burst
//! (`window` worth of requests at once), and a refusal says exactly when the
//! request would be admitted. The store keeps the TATs and applies a decision
//! inside the writer's transaction (`capabilities::apply_issuances`); the
//! decision itself is here, where property tests can hold it to its promise.

/// One bucket a request is charged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// Its stored TAT; `None` for a bucket never charged.
    pub tat_us: Option<i64>,
    /// One request per this long, sustained.
    pub interval_us: i64,
    /// Up to this long's worth of requests at once; never less than one
    /// interval (a bucket always admits one request per interval; a shorter
    /// window is read as one interval).
    pub window_us: i64,
}

/// Charges a request at `now_us` to every bucket in `buckets`: either every
/// bucket admits it, and the answer is each bucket's new TAT (in order), or
/// one does not, and the answer is how long to wait until all would — and
/// nothing is to be stored.
pub fn charge(now_us: i64, buckets: &[Bucket]) -> Result<Vec<i64>, i64> {
    let next: Vec<i64> = buckets
        .iter()
        .map(|b| b.tat_us.unwrap_or(now_us).max(now_us) + b.interval_us)
        .collect();
    let wait = buckets
        .iter()
        .zip(&next)
        .map(|(b, tat)| tat - b.window_us.max(b.interval_us) - now_us)
        .filter(|wait| *wait > 0)
        .max();
    match wait {
        Some(wait) => Err(wait),
        None => Ok(next),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Replays request times against one bucket; returns the admitted times.
    fn replay(interval_us: i64, window_us: i64, times: &[i64]) -> Vec<i64> {
        let mut tat = None;
        let mut admitted = Vec::new();
        for &t in times {
            let b = Bucket {
                tat_us: tat,
                interval_us,
                window_us,
            };
            if let Ok(next) = charge(t, &[b]) {
                tat = Some(next[0]);
                admitted.push(t);
            }
        }
        admitted
    }

    fn sorted_times() -> impl Strategy<Value = Vec<i64>> {
        proptest::collection::vec(0i64..5_000_000, 1..200).prop_map(|mut v| {
            v.sort_unstable();
            v
        })
    }

    proptest! {
        /// In any span of `d`, at most d/interval + window/interval + 1 requests
        /// are admitted: the sustained rate plus one burst, never more.
        #[test]
        fn never_more_than_the_rate_plus_one_burst(
            interval_us in 1_000i64..200_000,
            bursts in 1i64..20,
            times in sorted_times(),
        ) {
            let window_us = interval_us * bursts;
            let admitted = replay(interval_us, window_us, &times);
            for (i, &start) in admitted.iter().enumerate() {
                for (j, &end) in admitted.iter().enumerate().skip(i) {
                    let n = (j - i + 1) as i64;
                    let span = end - start;
                    prop_assert!(
                        n <= span / interval_us + window_us / interval_us + 1,
                        "{n} admitted in {span} us (interval {interval_us}, window {window_us})"
                    );
                }
            }
        }

        /// A refused request is admitted exactly when the refusal says, not before.
        #[test]
        fn a_refusal_says_when(
            interval_us in 1i64..1_000_000,
            window_us in 0i64..5_000_000,
            tat in 0i64..10_000_000,
            now in 0i64..10_000_000,
        ) {
            let b = Bucket { tat_us: Some(tat), interval_us, window_us };
            if let Err(wait) = charge(now, &[b]) {
                prop_assert!(wait > 0);
                prop_assert!(charge(now + wait, &[b]).is_ok());
                prop_assert!(charge(now + wait - 1, &[b]).is_err());
            }
        }

        /// Every bucket must admit: a request refused by one bucket is refused,
        /// whatever the others say, and admitted ones move every TAT forward.
        #[test]
        fn all_buckets_or_none(
            interval_us in 1i64..1_000_000,
            window_us in 0i64..5_000_000,
            tats in proptest::collection::vec(proptest::option::of(0i64..10_000_000), 1..4),
            now in 0i64..10_000_000,
        ) {
            let buckets: Vec<Bucket> = tats
                .iter()
                .map(|&tat_us| Bucket { tat_us, interval_us, window_us })
                .collect();
            let alone: Vec<bool> = buckets.iter().map(|b| charge(now, &[*b]).is_ok()).collect();
            match charge(now, &buckets) {
                Ok(next) => {
                    prop_assert!(alone.iter().all(|ok| *ok));
                    for (b, n) in buckets.iter().zip(&next) {
                        prop_assert!(*n > b.tat_us.unwrap_or(i64::MIN).max(now) - 1);
                    }
                }
                Err(_) => prop_assert!(alone.iter().any(|ok| !ok)),
            }
        }
    }

    #[test]
    fn a_fresh_bucket_admits_a_burst_then_the_rate() {
        // 1 per 100 ms, bursts of 3: three at once, the fourth 100 ms later.
        let admitted = replay(100_000, 300_000, &[0, 0, 0, 0, 99_999, 100_000]);
        assert_eq!(admitted, [0, 0, 0, 100_000]);
    }
}
