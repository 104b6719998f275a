//! WAL checkpoints off the writer's commit cycle (SQLite).
//!
//! In WAL mode a commit appends the pages it changed to the `-wal` file and
//! syncs it; a checkpoint later copies those pages into the database file and
//! syncs that. Left to itself, SQLite runs the checkpoint inside the COMMIT
//! that takes the WAL past `wal_autocheckpoint` pages — on the writer thread,
//! so every request waiting on that batch also waits for the copy and the
//! database file's sync, and the one serial cycle that sets issuance speed
//! grows by it. Here a thread of its own checkpoints shortly after commits,
//! in PASSIVE mode (it never waits for, nor blocks, the writer or a reader),
//! and the writer's cycle is its WAL append and that append's sync only
//! (docs/performance.md measures the difference).
//!
//! Durability does not change: a commit is durable once its WAL frames are
//! synced (`synchronous = FULL`), before and after; a checkpoint only moves
//! pages that already are. If this thread falls behind, or cannot open the
//! file, the writer's own automatic checkpoint at [`BACKSTOP_PAGES`] still
//! bounds the WAL, and since a checkpoint starts where the last one stopped,
//! that one copies only what this thread left.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

/// `wal_autocheckpoint` on every connection: the WAL size (in pages) at which
/// a committing connection checkpoints in-line. Far above what the thread
/// lets the WAL reach; it only matters when the thread is not keeping up. A
/// busy WAL also only rewinds to its start after a checkpoint that copied
/// every frame, which under steady load is usually this one (cheap: it starts
/// where the thread stopped), so the file stays near this size (~40 MiB at
/// 4 KiB pages) instead of growing.
pub const BACKSTOP_PAGES: u32 = 10_000;

/// Least time between two checkpoints, so each copies the pages of many
/// commits (a page changed by several commits is copied once).
const GAP: Duration = Duration::from_millis(20);

/// After a failure (the file could not be opened, an I/O error), the thread
/// waits this long before it tries again; the backstop covers the meantime.
const RETRY: Duration = Duration::from_secs(1);

/// Tells the checkpoint thread that a commit happened, or that the writer's
/// commits fail. Dropping every signal stops the thread (after one last
/// checkpoint).
#[derive(Clone)]
pub struct Signal {
    wake: SyncSender<()>,
    writing: Arc<AtomicBool>,
}

impl Signal {
    /// Never blocks: one pending signal is enough for any number of commits.
    pub fn committed(&self) {
        self.writing.store(true, Ordering::Release);
        match self.wake.try_send(()) {
            Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
        }
    }

    /// The writer's last batch failed on the store: no checkpoint until a
    /// commit succeeds again. A checkpoint that copied every frame would let
    /// SQLite reuse the WAL from its start, so on a full disk commits would
    /// come and go in bursts and readiness with them; a store that fails stays
    /// failed until it has room (docs/operations.md).
    pub fn failed(&self) {
        self.writing.store(false, Ordering::Release);
    }
}

/// Starts the checkpoint thread for the SQLite file at `path`; `open` makes
/// its connection (the store's pragmas, as the writer's).
pub fn start<F>(path: PathBuf, open: F) -> Signal
where
    F: Fn(&std::path::Path) -> Result<rusqlite::Connection, sqlx::Error> + Send + 'static,
{
    let (tx, rx) = sync_channel(1);
    let writing = Arc::new(AtomicBool::new(true));
    let state = writing.clone();
    std::thread::Builder::new()
        .name("tessera-checkpoint".into())
        .spawn(move || run(&path, &open, &rx, &state))
        .expect("the checkpoint thread starts");
    Signal { wake: tx, writing }
}

fn run<F>(path: &std::path::Path, open: &F, rx: &Receiver<()>, writing: &AtomicBool)
where
    F: Fn(&std::path::Path) -> Result<rusqlite::Connection, sqlx::Error>,
{
    let mut conn: Option<rusqlite::Connection> = None;
    let mut failing = false;
    // The last checkpoint after the writer is gone copies what is left, so a
    // clean shutdown leaves the database file whole.
    let mut open_channel = true;
    while open_channel {
        open_channel = rx.recv().is_ok();
        if open_channel && !writing.load(Ordering::Acquire) {
            continue;
        }
        let c = match conn.take() {
            Some(c) => c,
            None => match open(path) {
                Ok(c) => c,
                Err(e) => {
                    failing = report(failing, &e);
                    std::thread::sleep(RETRY);
                    while rx.try_recv().is_ok() {}
                    continue;
                }
            },
        };
        match checkpoint(&c) {
            Ok((log, copied)) => {
                if failing {
                    tracing::info!("WAL checkpoints resumed");
                    failing = false;
                }
                tracing::trace!(log, copied, "WAL checkpoint");
                conn = Some(c);
                std::thread::sleep(GAP);
            }
            Err(e) => {
                // The connection may be what is broken (a disk that came
                // back, a file replaced): a new one, but only once a commit
                // made after this failure shows the file writable again (a
                // file SQLite cannot write is one whose -shm it may map
                // read-only), so a signal sent before it does not count.
                failing = report(failing, &e);
                drop(c);
                std::thread::sleep(RETRY);
                while rx.try_recv().is_ok() {}
            }
        }
    }
}

/// Logs the first failure of a streak only (the backstop keeps working).
fn report(failing: bool, e: &dyn std::fmt::Display) -> bool {
    if !failing {
        tracing::warn!(
            error = %e,
            "WAL checkpoint failed; the writer checkpoints itself until it works again"
        );
    }
    true
}

/// One PASSIVE checkpoint: (frames in the WAL, frames now in the database file).
fn checkpoint(conn: &rusqlite::Connection) -> rusqlite::Result<(i64, i64)> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        Ok((row.get(1)?, row.get(2)?))
    })
}
