//! What the store's trouble is, told once: the cause of the last failed
//! commit (disk full, read-only, I/O, refused, out of descriptors), kept for
//! readiness and logged once per change of state, not once per request.
//!
//! Why here and not in each caller: a full disk fails every request, and a
//! log line per request (tens of thousands) buries the one line that says
//! what to fix. The writer reports every batch's outcome ([`WriterHealth::ok`],
//! [`WriterHealth::failed`]); reads report failures too, but only the writer's
//! outcome decides readiness: a store that answers reads but cannot commit
//! cannot issue anything.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a failure that goes on is logged again (with its count).
const REPEAT_LOG: Duration = Duration::from_secs(60);

/// Why the store cannot commit, as an operator fixes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    DiskFull,
    ReadOnly,
    Io,
    OutOfDescriptors,
    Unreachable,
    TimedOut,
    Other,
}

impl Cause {
    /// Stable name (readiness reason detail, logs).
    pub fn code(self) -> &'static str {
        match self {
            Cause::DiskFull => "disk_full",
            Cause::ReadOnly => "read_only",
            Cause::Io => "io_error",
            Cause::OutOfDescriptors => "out_of_file_descriptors",
            Cause::Unreachable => "unreachable",
            Cause::TimedOut => "timed_out",
            Cause::Other => "error",
        }
    }

    /// What it means, in words.
    pub fn sentence(self) -> &'static str {
        match self {
            Cause::DiskFull => "the disk is full",
            Cause::ReadOnly => "the store is read-only",
            Cause::Io => "the store reports an I/O error",
            Cause::OutOfDescriptors => "the process is out of file descriptors",
            Cause::Unreachable => "the store cannot be reached",
            Cause::TimedOut => "the store does not answer in time",
            Cause::Other => "the store refuses writes",
        }
    }

    /// The cause of a database error, from SQLite's primary result code,
    /// PostgreSQL's SQLSTATE or the operating system's error number.
    pub fn of(e: &sqlx::Error) -> Cause {
        match e {
            sqlx::Error::Database(db) => {
                let code = db.code().unwrap_or_default();
                if let Ok(n) = code.parse::<i32>() {
                    return match n & 0xff {
                        13 => Cause::DiskFull,
                        8 => Cause::ReadOnly,
                        10 => Cause::Io,
                        14 if errno_is_descriptors(db.message()) => Cause::OutOfDescriptors,
                        14 => Cause::Io,
                        _ => Cause::Other,
                    };
                }
                match code.as_ref() {
                    "53100" => Cause::DiskFull,
                    "25006" => Cause::ReadOnly,
                    "53000" | "53300" => Cause::OutOfDescriptors,
                    c if c.starts_with("08") || c.starts_with("57P") => Cause::Unreachable,
                    c if c.starts_with("58") => Cause::Io,
                    _ => Cause::Other,
                }
            }
            sqlx::Error::Io(io) => Cause::of_io(io),
            sqlx::Error::PoolTimedOut => Cause::TimedOut,
            sqlx::Error::PoolClosed | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) => {
                Cause::Unreachable
            }
            _ => Cause::Other,
        }
    }

    pub fn of_io(io: &std::io::Error) -> Cause {
        match io.raw_os_error() {
            // ENOSPC, EDQUOT
            Some(28) | Some(122) => Cause::DiskFull,
            Some(30) => Cause::ReadOnly,                    // EROFS
            Some(23) | Some(24) => Cause::OutOfDescriptors, // ENFILE, EMFILE
            Some(5) => Cause::Io,                           // EIO
            _ => Cause::Unreachable,
        }
    }
}

fn errno_is_descriptors(message: &str) -> bool {
    message.contains("Too many open files")
}

impl Cause {
    /// The cause of an error known only by its text (a connection that could
    /// not be opened reports a string).
    pub fn of_message(message: &str) -> Cause {
        let m = message.to_ascii_lowercase();
        if m.contains("disk is full") || m.contains("no space left") {
            Cause::DiskFull
        } else if m.contains("readonly") || m.contains("read-only") {
            Cause::ReadOnly
        } else if m.contains("too many open files") {
            Cause::OutOfDescriptors
        } else if m.contains("timed out") {
            Cause::TimedOut
        } else if m.contains("disk i/o error") {
            Cause::Io
        } else {
            Cause::Unreachable
        }
    }
}

/// The last failure, as readiness reports it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub cause: Cause,
    /// The store's own words (no secret: database errors carry none).
    pub detail: String,
}

struct State {
    failing: Option<Failure>,
    since: Instant,
    /// Failed batches since the state last changed (or was last logged).
    repeats: u64,
    logged: Instant,
    /// When a batch last committed.
    last_ok: Option<Instant>,
}

/// The writer's outcomes: whether its last batch committed, and since when
/// a batch has been running.
pub struct WriterHealth {
    state: Mutex<State>,
    /// When the batch in progress began (ms on the writer's clock), 0 when idle.
    busy_since_ms: AtomicI64,
}

impl Default for WriterHealth {
    fn default() -> Self {
        WriterHealth {
            state: Mutex::new(State {
                failing: None,
                since: Instant::now(),
                repeats: 0,
                logged: Instant::now(),
                last_ok: None,
            }),
            busy_since_ms: AtomicI64::new(0),
        }
    }
}

impl WriterHealth {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A batch committed.
    pub fn ok(&self) {
        let mut s = self.state();
        s.last_ok = Some(Instant::now());
        if let Some(f) = s.failing.take() {
            tracing::info!(after = ?s.since.elapsed(), failed_batches = s.repeats,
                cause = f.cause.code(), "the store commits again");
            s.since = Instant::now();
            s.repeats = 0;
        }
    }

    /// A batch failed because of the store (not because of what it asked).
    pub fn failed(&self, cause: Cause, detail: &str) {
        let mut s = self.state();
        let now = Instant::now();
        let changed = s.failing.as_ref().is_none_or(|f| f.cause != cause);
        if changed {
            // Out of descriptors: the limit is what the operator raises.
            let limit = (cause == Cause::OutOfDescriptors)
                .then(crate::rlimit::open_files)
                .flatten();
            tracing::error!(cause = cause.code(), error = %detail, open_files_limit = ?limit,
                "store cannot commit: {}; every write fails closed until it can", cause.sentence());
            s.failing = Some(Failure {
                cause,
                detail: detail.to_owned(),
            });
            s.since = now;
            s.repeats = 1;
            s.logged = now;
            return;
        }
        s.repeats += 1;
        if now.duration_since(s.logged) >= REPEAT_LOG {
            tracing::error!(cause = cause.code(), error = %detail, failed_batches = s.repeats,
                failing_for = ?s.since.elapsed(), "store still cannot commit: {}", cause.sentence());
            s.logged = now;
        }
    }

    /// The failure of the last batch, if it failed.
    pub fn failing(&self) -> Option<Failure> {
        self.state().failing.clone()
    }

    /// Whether a batch committed within `d` and none failed since.
    pub fn committed_within(&self, d: Duration) -> bool {
        let s = self.state();
        s.failing.is_none() && s.last_ok.is_some_and(|t| t.elapsed() < d)
    }

    pub fn batch_started(&self, now_ms: i64) {
        self.busy_since_ms.store(now_ms.max(1), Ordering::Release);
    }

    pub fn batch_ended(&self) {
        self.busy_since_ms.store(0, Ordering::Release);
    }

    /// How long the batch in progress has been running, if one is.
    pub fn busy_for_ms(&self, now_ms: i64) -> Option<i64> {
        match self.busy_since_ms.load(Ordering::Acquire) {
            0 => None,
            since => Some(now_ms - since),
        }
    }
}

/// Requests that failed on the store since the last line that said so.
static REQUEST_FAILURES: Mutex<Option<(Instant, u64)>> = Mutex::new(None);

/// A request failed because the store is unavailable: logged once, then at
/// most once per [`REPEAT_LOG`] with how many failed meanwhile (a full disk
/// fails every request; the writer's own line says why, once).
pub fn request_failed(cause: &str) {
    let mut last = REQUEST_FAILURES.lock().unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    match &mut *last {
        Some((at, n)) if now.duration_since(*at) < REPEAT_LOG => *n += 1,
        Some((at, n)) => {
            tracing::error!(error = %cause, failed_requests = *n + 1, "requests fail: store unavailable");
            *at = now;
            *n = 0;
        }
        None => {
            tracing::error!(error = %cause, "requests fail: store unavailable (repeats are counted, logged once a minute)");
            *last = Some((now, 0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_name_their_cause() {
        let e = |n| std::io::Error::from_raw_os_error(n);
        assert_eq!(Cause::of_io(&e(28)), Cause::DiskFull);
        assert_eq!(Cause::of_io(&e(30)), Cause::ReadOnly);
        assert_eq!(Cause::of_io(&e(24)), Cause::OutOfDescriptors);
        assert_eq!(Cause::of_io(&e(111)), Cause::Unreachable);
    }

    #[test]
    fn a_failure_is_kept_until_a_commit() {
        let h = WriterHealth::default();
        assert!(h.failing().is_none());
        h.failed(Cause::DiskFull, "database or disk is full");
        h.failed(Cause::DiskFull, "database or disk is full");
        assert_eq!(h.failing().unwrap().cause, Cause::DiskFull);
        h.ok();
        assert!(h.failing().is_none());
    }
}
