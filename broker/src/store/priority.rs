//! The writer thread's scheduling priority: above the broker's other threads.
//!
//! Why: every write of the broker commits on one thread (store::writer), one
//! batch after the other, while each batch holds the store's write lock and
//! the audit head. Under load the scheduler gave that thread the same share
//! of the CPU as each request worker and as the load itself, so a batch was
//! often preempted half-applied; once the workers had answered all they
//! could, the CPU idled until the writer caught up (12% idle on SQLite at 64
//! connections on two cores). With the writer ten nice steps above the rest,
//! idle fell to 5% and SQLite issued about 6% more per second
//! (docs/performance.md, issue 20). Giving the workers a lower priority
//! instead did not help: it gave the CPU to other processes. On PostgreSQL
//! the writer is not raised: the server's process is the other half of its
//! serial path, and raising the writer alone measured no gain (0.995).
//!
//! Raising a thread's priority needs `CAP_SYS_NICE` or an `RLIMIT_NICE` that
//! allows the lower nice value (systemd's `LimitNICE=`, a container's
//! `--ulimit nice=`), and a seccomp filter that lets `setpriority` through.
//! Without them the writer runs at the broker's priority, which is correct,
//! only slower: the log says so once, and `tessera_store_writer_nice` shows
//! what the writer runs at.

use rustix::io::Errno;
use rustix::process::{getpriority_process, setpriority_process};

/// Nice steps the writer runs above the thread that starts it.
pub const WRITER_BOOST: i32 = 10;

/// The highest priority a nice value gives (Linux: -20).
const HIGHEST: i32 = -20;

/// What a thread runs at after [`raise_current_thread`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// Raised from the nice value `from` to `to`: by the boost, or as far as
    /// `RLIMIT_NICE` allows when that is less.
    Raised { from: i32, to: i32 },
    /// Left at `nice`: the system refused (`refused`), or there was no
    /// higher priority to take.
    Kept { nice: i32, refused: Option<Errno> },
    /// Its own priority could not be read, so nothing was changed.
    Unread { error: Errno },
}

impl Priority {
    /// The nice value the thread runs at, when known.
    pub fn nice(&self) -> Option<i32> {
        match *self {
            Priority::Raised { to, .. } => Some(to),
            Priority::Kept { nice, .. } => Some(nice),
            Priority::Unread { .. } => None,
        }
    }

    /// Says once, in the log, what the writer runs at and, when it could not
    /// be raised, what would allow it.
    pub fn announce(&self) {
        match *self {
            Priority::Raised { from, to } => tracing::info!(
                nice = to,
                others = from,
                "the store writer runs above the request threads"
            ),
            Priority::Kept {
                nice,
                refused: Some(error),
            } => tracing::info!(
                nice,
                error = %error,
                "the store writer runs at the request threads' priority: raising it needs \
                 CAP_SYS_NICE or RLIMIT_NICE (systemd LimitNICE=-10) and setpriority allowed \
                 by any seccomp filter; measured about 6% fewer issuances/s on SQLite without it \
                 (docs/performance.md)"
            ),
            Priority::Kept {
                nice,
                refused: None,
            } => tracing::info!(
                nice,
                "the store writer runs at the highest priority already"
            ),
            Priority::Unread { error } => tracing::info!(
                error = %error,
                "the store writer could not read its priority and runs at the request threads'"
            ),
        }
    }
}

/// The calling thread's nice value (on Linux a thread's own, not the process's).
pub fn current() -> Result<i32, Errno> {
    getpriority_process(None)
}

/// Raises the calling thread's priority by `boost` nice steps, at most to
/// the highest. On Linux the nice value is per thread, so the thread that
/// calls this is the only one raised (threads it creates later start at its
/// value: the writer creates none). Where the full boost is refused but
/// `RLIMIT_NICE` allows part of it (`LimitNICE=-5`), it takes that part.
pub fn raise_current_thread(boost: i32) -> Priority {
    let from = match current() {
        Ok(nice) => nice,
        Err(error) => return Priority::Unread { error },
    };
    let to = from.saturating_sub(boost).max(HIGHEST);
    if to >= from {
        return Priority::Kept {
            nice: from,
            refused: None,
        };
    }
    let refused = match setpriority_process(None, to) {
        Ok(()) => return Priority::Raised { from, to },
        Err(error) => error,
    };
    let floor = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NICE)
        .ok()
        .map(|(soft, _)| rlimit_floor(soft));
    match floor {
        Some(floor) if floor > to && floor < from && setpriority_process(None, floor).is_ok() => {
            Priority::Raised { from, to: floor }
        }
        _ => Priority::Kept {
            nice: from,
            refused: Some(refused),
        },
    }
}

/// The lowest nice value an `RLIMIT_NICE` of `limit` lets a thread without
/// `CAP_SYS_NICE` take: 20 - `limit` (so 30 allows -10; infinity, -20).
fn rlimit_floor(limit: u64) -> i32 {
    20 - i32::try_from(limit.min(40)).unwrap_or(40)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The thread that asks is raised by exactly the boost (or refused and
    /// left as it was), and no other thread changes: the request workers keep
    /// their priority.
    #[test]
    fn only_the_calling_thread_is_raised_and_by_the_boost() {
        let caller = current().expect("reads its own nice value");
        let seen = std::thread::spawn(|| {
            let before = current().expect("reads its own nice value");
            let got = raise_current_thread(WRITER_BOOST);
            (before, got, current().expect("reads it again"))
        })
        .join()
        .expect("the thread ends");
        let (before, got, after) = seen;
        match got {
            Priority::Raised { from, to } => {
                assert_eq!(from, before);
                // The whole boost, or as much as RLIMIT_NICE allows.
                assert!(
                    (before - WRITER_BOOST).max(HIGHEST) <= to && to < from,
                    "{got:?}"
                );
                assert_eq!(after, to);
            }
            Priority::Kept { nice, refused } => {
                assert_eq!(nice, before);
                assert_eq!(after, before);
                assert!(refused.is_some() || before == HIGHEST, "{got:?}");
            }
            Priority::Unread { error } => panic!("its own priority is readable: {error}"),
        }
        assert_eq!(got.nice(), Some(after));
        assert_eq!(
            current().expect("reads it"),
            caller,
            "the caller's thread moved"
        );
    }

    /// What `LimitNICE=` / `--ulimit nice=` grant, as nice values.
    #[test]
    fn the_rlimit_sets_how_far_a_thread_may_go() {
        assert_eq!(rlimit_floor(0), 20);
        assert_eq!(rlimit_floor(20), 0);
        assert_eq!(rlimit_floor(25), -5);
        assert_eq!(rlimit_floor(30), -10);
        assert_eq!(rlimit_floor(40), -20);
        assert_eq!(rlimit_floor(u64::MAX), -20);
    }

    /// No boost asks for nothing, and a thread already at the highest
    /// priority is left there: neither is a refusal.
    #[test]
    fn nothing_to_raise_is_not_a_refusal() {
        std::thread::spawn(|| {
            let before = current().expect("reads its own nice value");
            assert_eq!(
                raise_current_thread(0),
                Priority::Kept {
                    nice: before,
                    refused: None
                }
            );
        })
        .join()
        .expect("the thread ends");
    }
}
