//! The single writer: group commit without ever answering before the commit.
//!
//! Every state change is a [`WriteOp`] submitted to one writer per broker
//! process. The writer drains whatever ops are queued (up to [`MAX_BATCH`]), applies
//! them in order inside one transaction, appends their audit rows to the hash
//! chain, commits once, and only then answers each submitter. Concurrent requests
//! therefore share one durable commit (one fsync on SQLite) instead of paying one
//! each, and no token leaves the process before the row that records it is durable.
//!
//! Ops report business outcomes (rate limited, run ended, …) as values, so one
//! request's refusal never aborts its neighbours. If a batch fails on a database
//! error, it is rolled back and each op is retried alone, so one bad op cannot
//! fail the others; if the connection itself is lost, every op in the batch gets
//! [`StoreError::Unavailable`] and the connection is reopened on the next batch.
//!
//! Statements are batched too, not only commits: audit rows are written with
//! multi-row INSERTs, and a kind of op that gains from it declares a batched
//! phase ([`BatchedOp`]): all its ops in a batch are applied in one go, after
//! the batch's other ops, so they can share their reads and write their rows
//! with multi-row statements. The engine knows no kind of op; the kinds live
//! with the state they change and depend on this module, never the reverse.
//!
//! On SQLite the writer is a thread of its own holding a native connection
//! (see [`super::query`]): a batch runs start to end on that thread, each
//! statement prepared once and cached, with no hop to another thread per
//! statement. On PostgreSQL it is a thread of its own too, with a runtime of
//! its own for its sqlx connection, so no request task delays a batch.
//!
//! On PostgreSQL with several replicas, each replica has its own writer. Every
//! batch first locks the audit chain's head row (`SELECT … FOR UPDATE`), so
//! batches of all replicas are serialised: a batch may read state (run ended?
//! rate bucket?) and write it back without another replica interleaving.

use super::audit::{ChainedRow, Head};
use super::health::{Cause, WriterHealth};
use super::priority;
use super::query::{stmt, Conn};
use super::{Dialect, StoreError};
use crate::audit::{chain_mac, AuditEvent, AuditKey};
use crate::clock::Clock;
use sqlx::AnyConnection;
use std::any::{Any, TypeId};
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

pub use crate::boxed::BoxFuture;

/// Most ops applied in one transaction.
pub const MAX_BATCH: usize = 512;
/// How long the SQLite writer waits for more ops before a small batch under
/// load (see [`lingers`]).
const LINGER: Duration = Duration::from_micros(400);
/// A batch with fewer ops than this is small.
const LINGER_BELOW: usize = 24;
/// The writer is busy when its last batch had at least this many ops.
const LINGER_AFTER: usize = 4;
/// Longest a batch may take before its connection is abandoned.
const BATCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The transaction an op runs in, plus the audit chain's tip.
pub struct WriteCtx<'c> {
    pub conn: Conn<'c>,
    pub dialect: Dialect,
    pub now_ms: i64,
    head: Head,
    /// Audit rows of this batch, written in bulk just before the commit.
    audit_rows: Vec<ChainedRow>,
    audit_key: Option<Arc<AuditKey>>,
}

impl WriteCtx<'_> {
    pub fn sql(&self, q: &'static str) -> std::borrow::Cow<'static, str> {
        super::sql_for(self.dialect, q)
    }

    pub fn now(&self) -> i64 {
        self.now_ms.div_euclid(1000)
    }

    /// Appends one event to the audit chain, in this transaction (the row is
    /// written with the batch's other audit rows, before the commit).
    pub async fn audit(&mut self, event: &AuditEvent) -> Result<(), sqlx::Error> {
        self.chain(Arc::new(event.clone()))
    }

    /// [`Self::audit`] for an event built for it or shared with its op: it is
    /// not copied.
    pub async fn audit_shared(&mut self, event: Arc<AuditEvent>) -> Result<(), sqlx::Error> {
        self.chain(event)
    }

    fn chain(&mut self, event: Arc<AuditEvent>) -> Result<(), sqlx::Error> {
        // Fail closed: no row without its keyed link.
        let Some(key) = &self.audit_key else {
            return Err(sqlx::Error::Protocol("the audit key is not loaded".into()));
        };
        let seq = self.head.seq + 1;
        let hash = chain_mac(key, &self.head.hash, seq, self.now_ms, &*event);
        self.head.hash.clone_from(&hash);
        self.head.seq = seq;
        self.audit_rows.push(ChainedRow { seq, event, hash });
        Ok(())
    }

    /// Whether this batch already holds (unwritten) the audit row of a
    /// capability it issued: what reads only committed audit rows
    /// (`run_index::catch_up`) would miss it.
    pub fn buffers_an_issuance(&self) -> bool {
        self.audit_rows
            .iter()
            .any(|r| r.event.event == crate::audit::events::CAPABILITY_ISSUED)
    }

    async fn flush_audit(&mut self) -> Result<(), sqlx::Error> {
        let rows = std::mem::take(&mut self.audit_rows);
        let key_id = self.audit_key.as_ref().map(|k| k.id.as_str());
        super::audit::insert(&mut self.conn, self.dialect, self.now_ms, key_id, &rows).await
    }
}

/// One state change, applied alone, in submission order. `apply` may run more
/// than once (a failed batch is retried op by op), always in a fresh
/// transaction, so it must not keep state between runs.
pub trait WriteOp: Send + Sync + 'static {
    type Output: Send + 'static;
    /// True for ops that only grant (may be skipped once their submitter has
    /// given up); false for revocations and records that must happen regardless.
    const GRANTS: bool = false;
    fn apply<'a>(
        &'a self,
        ctx: &'a mut WriteCtx<'_>,
    ) -> BoxFuture<'a, Result<Self::Output, sqlx::Error>>;
}

/// A kind of state change applied in bulk: every op of the kind in a batch is
/// applied by one `apply_batch`, after the batch's [`WriteOp`]s. Everything in
/// one batch was in flight at the same time, so that order is as valid a
/// serialisation as any; `apply_batch` must decide each op as if it were
/// applied alone, in the order given. Like [`WriteOp::apply`] it may run more
/// than once (a failed batch is retried op by op, each in a batch of its own).
pub trait BatchedOp: Send + Sync + 'static {
    type Output: Send + 'static;
    /// True when this op only grants (see [`WriteOp::GRANTS`]); asked per op,
    /// since one kind may carry grants and records that must happen regardless.
    fn grants(&self) -> bool;
    /// Applies `ops` (in submission order) and returns one output per op, in
    /// the same order.
    fn apply_batch<'a>(
        ctx: &'a mut WriteCtx<'_>,
        ops: &'a [&'a Self],
    ) -> BoxFuture<'a, Result<Vec<Self::Output>, sqlx::Error>>;
}

/// Applies the jobs of one [`BatchedOp`] kind (all of them of that kind).
type ApplyKind = for<'a, 'c> fn(
    &'a mut WriteCtx<'c>,
    Vec<&'a mut (dyn Queued + 'static)>,
) -> BoxFuture<'a, Result<(), sqlx::Error>>;

/// The kind of a batched job: jobs with the same `id` are applied together by `apply`.
#[derive(Clone, Copy)]
struct BatchKind {
    id: TypeId,
    apply: ApplyKind,
}

trait Queued: Send + Any {
    /// `None` for a job applied alone (by [`Queued::run`]), `Some` for one
    /// applied with the other jobs of its kind.
    fn batch_kind(&self) -> Option<BatchKind>;
    /// Applies a job that has no batch kind.
    fn run<'a>(&'a mut self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<(), sqlx::Error>>;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn discard(&mut self);
    fn finish(self: Box<Self>, error: Option<StoreError>);
    /// The submitter gave up waiting and the op only grants something (a
    /// credential, a use, a run): applying it would record a grant nobody will
    /// be told about, so it is skipped. Revocations are always applied.
    fn abandoned(&self) -> bool;
}

/// Answers a submitter: the op's output once committed, else the error.
fn answer<T>(
    reply: oneshot::Sender<Result<T, StoreError>>,
    error: Option<StoreError>,
    out: Option<T>,
) {
    let result = match (error, out) {
        (None, Some(out)) => Ok(out),
        (Some(e), _) => Err(e),
        (None, None) => Err(StoreError::Unavailable("write produced no result".into())),
    };
    let _ = reply.send(result);
}

struct Pending<O: WriteOp> {
    op: O,
    out: Option<O::Output>,
    reply: oneshot::Sender<Result<O::Output, StoreError>>,
}

impl<O: WriteOp> Queued for Pending<O> {
    fn batch_kind(&self) -> Option<BatchKind> {
        None
    }

    fn run<'a>(&'a mut self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let out = self.op.apply(ctx).await?;
            self.out = Some(out);
            Ok(())
        })
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn discard(&mut self) {
        self.out = None;
    }

    fn abandoned(&self) -> bool {
        O::GRANTS && self.reply.is_closed()
    }

    fn finish(self: Box<Self>, error: Option<StoreError>) {
        answer(self.reply, error, self.out);
    }
}

struct PendingBatched<O: BatchedOp> {
    op: O,
    out: Option<O::Output>,
    reply: oneshot::Sender<Result<O::Output, StoreError>>,
}

impl<O: BatchedOp> PendingBatched<O> {
    /// The [`ApplyKind`] of `O`: downcasts the jobs back to `PendingBatched<O>`,
    /// applies their ops in one `apply_batch` and keeps each output.
    fn apply_kind<'a>(
        ctx: &'a mut WriteCtx<'_>,
        jobs: Vec<&'a mut (dyn Queued + 'static)>,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let mut jobs: Vec<&mut PendingBatched<O>> = jobs
                .into_iter()
                .map(|j| j.as_any_mut().downcast_mut::<PendingBatched<O>>())
                .collect::<Option<_>>()
                .ok_or_else(|| sqlx::Error::Protocol("a batch kind mixed two op types".into()))?;
            let ops: Vec<&O> = jobs.iter().map(|j| &j.op).collect();
            let outs = O::apply_batch(ctx, &ops).await?;
            if outs.len() != jobs.len() {
                // Fail closed: a batch that cannot say what each op did commits nothing.
                return Err(sqlx::Error::Protocol(format!(
                    "a batched apply returned {} results for {} ops",
                    outs.len(),
                    jobs.len()
                )));
            }
            for (job, out) in jobs.iter_mut().zip(outs) {
                job.out = Some(out);
            }
            Ok(())
        })
    }
}

impl<O: BatchedOp> Queued for PendingBatched<O> {
    fn batch_kind(&self) -> Option<BatchKind> {
        Some(BatchKind {
            id: TypeId::of::<O>(),
            apply: Self::apply_kind,
        })
    }

    fn run<'a>(&'a mut self, _ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async {
            Err(sqlx::Error::Protocol(
                "a batched op is applied with its kind, not alone".into(),
            ))
        })
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn discard(&mut self) {
        self.out = None;
    }

    fn abandoned(&self) -> bool {
        self.op.grants() && self.reply.is_closed()
    }

    fn finish(self: Box<Self>, error: Option<StoreError>) {
        answer(self.reply, error, self.out);
    }
}

/// A connection the writer owns between batches.
pub enum Connection {
    Sqlx(AnyConnection),
    Native(rusqlite::Connection),
}

impl Connection {
    fn borrow(&mut self) -> Conn<'_> {
        match self {
            Connection::Sqlx(c) => Conn::Sqlx(c),
            Connection::Native(c) => Conn::Native(c),
        }
    }
}

pub type Connector =
    Box<dyn Fn() -> BoxFuture<'static, Result<Connection, StoreError>> + Send + Sync>;

/// Counters for `/metrics`.
#[derive(Default)]
pub struct WriterStats {
    pub commits: AtomicU64,
    pub ops: AtomicU64,
    pub failed_batches: AtomicU64,
    /// Microseconds committed batches held the audit head, from its lock to
    /// the end of COMMIT: on PostgreSQL every replica's batches queue on that
    /// row, so the sum over all replicas per second (≤ 1) is how busy the
    /// one serialisation point of the cluster is (docs/architecture.md).
    pub head_held_us: AtomicU64,
    /// The writer thread's nice value: on SQLite up to
    /// [`super::priority::WRITER_BOOST`] below the other threads' as far as
    /// the system allowed it, theirs when not (and on PostgreSQL).
    pub writer_nice: AtomicI32,
}

#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Box<dyn Queued>>,
    stats: Arc<WriterStats>,
    env: Arc<WriterEnv>,
    /// Longest a submitter waits for its op's commit (`store.timeout`).
    timeout: Duration,
}

/// What every batch reads besides its ops: the time, and the audit key its
/// rows are linked with (installed once, before the first audited write).
pub struct WriterEnv {
    clock: Clock,
    audit_key: std::sync::OnceLock<Arc<AuditKey>>,
    /// The highest audit head this process has seen committed. The head only
    /// ever moves forward (replicas included), so a head found below it means
    /// the audit table was cut back underneath the broker: writes stop rather
    /// than chain new rows onto the truncated log.
    high_water: AtomicI64,
    /// Whether the last batch committed, and why not (readiness, logs).
    health: WriterHealth,
    stats: Arc<WriterStats>,
    /// Told of every commit (SQLite: the checkpoint thread).
    committed: Option<super::checkpoint::Signal>,
}

impl WriterEnv {
    /// Tells the checkpoint thread (SQLite) whether a batch committed: it
    /// checkpoints after commits and pauses while batches fail.
    fn tell_checkpoints(&self, committed: bool) {
        match &self.committed {
            Some(signal) if committed => signal.committed(),
            Some(signal) => signal.failed(),
            None => {}
        }
    }
}

impl Writer {
    pub fn start(
        dialect: Dialect,
        clock: Clock,
        connect: Connector,
        timeout: Duration,
        committed: Option<super::checkpoint::Signal>,
    ) -> Writer {
        let (tx, rx) = mpsc::channel(8 * MAX_BATCH);
        let stats = Arc::new(WriterStats {
            // Until the thread has raised itself: the threads' priority it starts from.
            writer_nice: AtomicI32::new(priority::current().unwrap_or(0)),
            ..WriterStats::default()
        });
        let env = Arc::new(WriterEnv {
            clock,
            audit_key: std::sync::OnceLock::new(),
            high_water: AtomicI64::new(0),
            health: WriterHealth::default(),
            stats: stats.clone(),
            committed,
        });
        let task = run(rx, connect, dialect, env.clone(), stats.clone());
        // The writer is a thread of its own on both stores; what drives the
        // task there differs.
        let drive: Box<dyn FnOnce() + Send> =
            match dialect {
                // A batch on the native connection never waits on the runtime: it
                // runs start to end on this thread, which parks between batches.
                // The runtime's handle is entered there for the timers the engine sets.
                // The thread runs above the request threads, where the system
                // allows it (store::priority); threads inherit their creator's
                // nice value, so no op may start a thread (or a blocking task,
                // whose pool thread this one could create) from here.
                Dialect::Sqlite => {
                    let handle = tokio::runtime::Handle::current();
                    let stats = stats.clone();
                    Box::new(move || {
                        let priority = priority::raise_current_thread(priority::WRITER_BOOST);
                        if let Some(nice) = priority.nice() {
                            stats.writer_nice.store(nice, Ordering::Relaxed);
                        }
                        priority.announce();
                        let _runtime = handle.enter();
                        block_on(task);
                    })
                }
                // A batch on PostgreSQL is a dozen round trips, one after the
                // other. As a task on the request runtime, the writer waited after
                // each reply for its turn behind the request tasks (each signs, tens
                // of µs), with the audit head locked all the while; with a runtime
                // of its own for the connection's I/O and the engine's timers, it
                // is woken when the reply arrives (docs/performance.md, issue 20).
                // If that runtime cannot be built, the task is dropped with the
                // queue: every submitter gets an error (fail closed). Ops run on
                // this runtime, not the request runtime: one that spawned a task
                // would see it run only while a batch waits, and none may block in
                // place (no op does either). Its priority is left as it is: the
                // server's process is the other half of its serial path, and
                // raising the writer alone measured no gain.
                Dialect::Postgres => Box::new(move || {
                    match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(runtime) => runtime.block_on(task),
                        Err(e) => tracing::error!(
                            error = %e,
                            "the writer's runtime did not start; every write fails"
                        ),
                    }
                }),
            };
        std::thread::Builder::new()
            .name("tessera-writer".into())
            .spawn(drive)
            .expect("the writer thread starts");
        Writer {
            tx,
            stats,
            env,
            timeout,
        }
    }

    /// Whether the last batch committed, and why not.
    pub fn health(&self) -> &WriterHealth {
        &self.env.health
    }

    /// The time on the writer's clock (ms).
    pub fn now_ms(&self) -> i64 {
        self.env.clock.now_ms()
    }

    /// Longest a submitter waits for a commit.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Installs the audit key; until then every audited write fails (closed).
    pub fn install_audit_key(&self, key: Arc<AuditKey>) {
        let _ = self.env.audit_key.set(key);
    }

    /// The installed audit key.
    pub fn audit_key(&self) -> Option<&Arc<AuditKey>> {
        self.env.audit_key.get()
    }

    /// The highest audit head this process has seen committed.
    pub fn audit_high_water(&self) -> i64 {
        self.env.high_water.load(Ordering::Acquire)
    }

    pub fn stats(&self) -> &WriterStats {
        &self.stats
    }

    /// Applies `op` durably; returns only after its transaction committed.
    pub async fn submit<O: WriteOp>(&self, op: O) -> Result<O::Output, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.enqueue(
            Box::new(Pending {
                op,
                out: None,
                reply,
            }),
            rx,
        )
        .await
    }

    /// Applies `op` durably with the other ops of its kind in the batch;
    /// returns only after its transaction committed.
    pub async fn submit_batched<O: BatchedOp>(&self, op: O) -> Result<O::Output, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.enqueue(
            Box::new(PendingBatched {
                op,
                out: None,
                reply,
            }),
            rx,
        )
        .await
    }

    async fn enqueue<T>(
        &self,
        job: Box<dyn Queued>,
        rx: oneshot::Receiver<Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        // One deadline for the queue and the commit: a frozen store answers
        // the request with a 503 in `store.timeout`, whatever the batch does.
        let deadline = tokio::time::Instant::now() + self.timeout;
        match tokio::time::timeout_at(deadline, self.tx.send(job)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(StoreError::Unavailable("writer stopped".into())),
            Err(_) => return Err(StoreError::Unavailable("writer queue full".into())),
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(StoreError::Unavailable("writer dropped the request".into())),
            Err(_) => Err(StoreError::Unavailable("write timed out".into())),
        }
    }
}

/// Runs `task` to its end on this thread, parking it while the task waits.
fn block_on<F: std::future::Future>(task: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut task = std::pin::pin!(task);
    loop {
        if let std::task::Poll::Ready(out) = task.as_mut().poll(&mut cx) {
            return out;
        }
        // A wake-up before this park makes it return at once; a spurious one
        // only polls again.
        std::thread::park();
    }
}

async fn run(
    mut rx: mpsc::Receiver<Box<dyn Queued>>,
    connect: Connector,
    dialect: Dialect,
    env: Arc<WriterEnv>,
    stats: Arc<WriterStats>,
) {
    let mut conn: Option<Connection> = None;
    let mut last_batch = 0;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        drain(&mut rx, &mut batch);
        if lingers(dialect, last_batch, batch.len()) {
            std::thread::sleep(LINGER);
            drain(&mut rx, &mut batch);
        }
        last_batch = batch.len();
        let c = match conn.take() {
            Some(c) => c,
            None => match connect().await {
                Ok(c) => c,
                Err(e) => {
                    env.health
                        .failed(Cause::of_message(&e.to_string()), &e.to_string());
                    env.tell_checkpoints(false);
                    fail_all(batch, &e);
                    continue;
                }
            },
        };
        conn = commit_batch(c, batch, dialect, &env, &stats).await;
    }
}

/// Whether the SQLite writer waits [`LINGER`] for more ops before it begins a
/// batch: when the batch is small ([`LINGER_BELOW`]) and the broker is busy
/// (the last batch had [`LINGER_AFTER`] ops or more: a lone request, or up
/// to three clients taking turns, are never held).
///
/// Why: on SQLite each commit costs the same whatever it holds (BEGIN, the
/// audit head, COMMIT and its fsync, which in a virtual machine is a trap to
/// the host per I/O); at 64 connections the batches were of 8 ops, so most of
/// that was paid per issuance. Waiting 250 µs gathered about 20: measured
/// (docs/performance.md, issue 20) 2–4% more issuances/s at lower CPU per
/// issuance, with p50 and p99 unchanged or lower; 600 µs was slower then.
/// With the writer above the request threads (store::priority) its batches
/// are shorter, and 400 µs gathers about 26: 2% more than 250 µs (ahead in
/// 5 of 5 rounds, p50 and p99 lower), 600 µs the same as 400, no wait 10%
/// less. Not on PostgreSQL: a batch there takes milliseconds of round
/// trips, during which half the connections queue for the next one.
fn lingers(dialect: Dialect, last_batch: usize, batch: usize) -> bool {
    dialect == Dialect::Sqlite && last_batch >= LINGER_AFTER && batch < LINGER_BELOW
}

/// Moves whatever is queued into `batch`, up to [`MAX_BATCH`].
fn drain(rx: &mut mpsc::Receiver<Box<dyn Queued>>, batch: &mut Vec<Box<dyn Queued>>) {
    while batch.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
}

fn fail_all(batch: Vec<Box<dyn Queued>>, e: &StoreError) {
    for job in batch {
        job.finish(Some(e.clone()));
    }
}

/// Commits the batch, retrying op by op on a database error. Returns the
/// connection if it is still usable.
async fn commit_batch(
    conn: Connection,
    batch: Vec<Box<dyn Queued>>,
    dialect: Dialect,
    env: &WriterEnv,
    stats: &WriterStats,
) -> Option<Connection> {
    let n = batch.len() as u64;
    env.health.batch_started(env.clock.now_ms());
    let conn = commit_or_retry(conn, batch, dialect, env, stats, n).await;
    env.health.batch_ended();
    conn
}

async fn commit_or_retry(
    mut conn: Connection,
    mut batch: Vec<Box<dyn Queued>>,
    dialect: Dialect,
    env: &WriterEnv,
    stats: &WriterStats,
    n: u64,
) -> Option<Connection> {
    let health = &env.health;
    match attempt(&mut conn, &mut batch, dialect, env).await {
        Ok(()) => {
            health.ok();
            env.tell_checkpoints(true);
            stats.commits.fetch_add(1, Ordering::Relaxed);
            stats.ops.fetch_add(n, Ordering::Relaxed);
            for job in batch {
                job.finish(None);
            }
            Some(conn)
        }
        Err(e) => {
            stats.failed_batches.fetch_add(1, Ordering::Relaxed);
            env.tell_checkpoints(false);
            // A refused statement keeps the connection, unless the refusal says the
            // connection itself is unusable now (SQLite read-only, I/O error, full
            // disk): then it is dropped and the next batch opens a fresh one, so the
            // broker recovers once the disk does.
            let lost = match &e {
                AttemptError::Db(db) => poisons_connection(dialect, db),
                _ => true,
            };
            // The store's trouble (not a refusal of what an op asked) is told
            // to `health` once per change, with the store's own words.
            match &e {
                AttemptError::Db(db) | AttemptError::Lost(db)
                    if lost || Cause::of(db) != Cause::Other =>
                {
                    health.failed(Cause::of(db), &db.to_string())
                }
                AttemptError::TimedOut => health.failed(Cause::TimedOut, "write batch timed out"),
                _ => {}
            }
            let err = match e {
                AttemptError::Db(db) => StoreError::from(db),
                AttemptError::Lost(db) => StoreError::Unavailable(db.to_string()),
                AttemptError::TimedOut => StoreError::Unavailable("write batch timed out".into()),
            };
            if lost || batch.len() == 1 {
                // A conflict is the caller's answer (409), not the store's trouble.
                if matches!(err, StoreError::Conflict(_)) {
                    tracing::debug!(error = %err, ops = n, "write refused: conflict");
                } else if lost {
                    // `health` said why, once per change.
                    tracing::debug!(error = %err, ops = n, "write batch failed");
                } else {
                    tracing::warn!(error = %err, ops = n, "write batch failed");
                }
                fail_all(batch, &err);
                return (!lost).then_some(conn);
            }
            // One op broke the batch: give every op its own transaction.
            for job in batch {
                let mut single = vec![job];
                match attempt(&mut conn, &mut single, dialect, env).await {
                    Ok(()) => {
                        health.ok();
                        env.tell_checkpoints(true);
                        stats.commits.fetch_add(1, Ordering::Relaxed);
                        stats.ops.fetch_add(1, Ordering::Relaxed);
                        fail_or_finish(single, None);
                    }
                    Err(AttemptError::Db(db)) if poisons_connection(dialect, &db) => {
                        health.failed(Cause::of(&db), &db.to_string());
                        fail_or_finish(single, Some(StoreError::from(db)));
                        return None;
                    }
                    Err(AttemptError::Db(db)) => fail_or_finish(single, Some(StoreError::from(db))),
                    Err(AttemptError::Lost(db)) => {
                        health.failed(Cause::of(&db), &db.to_string());
                        fail_or_finish(single, Some(StoreError::Unavailable(db.to_string())));
                        return None;
                    }
                    Err(AttemptError::TimedOut) => {
                        health.failed(Cause::TimedOut, "write timed out");
                        fail_or_finish(
                            single,
                            Some(StoreError::Unavailable("connection lost".into())),
                        );
                        return None;
                    }
                }
            }
            Some(conn)
        }
    }
}

fn fail_or_finish(jobs: Vec<Box<dyn Queued>>, e: Option<StoreError>) {
    for job in jobs {
        job.finish(e.clone());
    }
}

enum AttemptError {
    /// The database refused a statement; the connection is fine.
    Db(sqlx::Error),
    /// The connection failed.
    Lost(sqlx::Error),
    TimedOut,
}

/// SQLite result codes (primary code, the low byte of an extended code) after
/// which a connection may keep failing although the cause has gone: READONLY (8),
/// IOERR (10), FULL (13), CANTOPEN (14).
fn poisons_connection(dialect: Dialect, e: &sqlx::Error) -> bool {
    let Some(db) = e.as_database_error() else {
        return false;
    };
    dialect == Dialect::Sqlite
        && db
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            .is_some_and(|code| matches!(code & 0xff, 8 | 10 | 13 | 14))
}

fn classify(e: sqlx::Error) -> AttemptError {
    match e {
        sqlx::Error::Database(_) => AttemptError::Db(e),
        other => AttemptError::Lost(other),
    }
}

async fn attempt(
    conn: &mut Connection,
    batch: &mut [Box<dyn Queued>],
    dialect: Dialect,
    env: &WriterEnv,
) -> Result<(), AttemptError> {
    // The native connection never yields while SQLite works, so the timeout
    // below cannot cut it off: a watchdog interrupts it instead.
    let watchdog = match conn {
        Connection::Native(c) => Some(Watchdog::arm(c.get_interrupt_handle(), BATCH_TIMEOUT)),
        Connection::Sqlx(_) => None,
    };
    let result = tokio::time::timeout(BATCH_TIMEOUT, apply_all(conn, batch, dialect, env)).await;
    let interrupted = watchdog.is_some_and(Watchdog::disarm);
    let refused = match result {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(e)) if !interrupted => Some(e),
        // Timed out, or failed because the watchdog fired: the connection is
        // replaced (its transaction may or may not still be open).
        _ => None,
    };
    for job in batch.iter_mut() {
        job.discard();
    }
    let Some(e) = refused else {
        return Err(AttemptError::TimedOut);
    };
    match classify(e) {
        // The refusal is the cause; a ROLLBACK that fails too only means the
        // connection is gone with it (a full disk, a lost server): report the
        // refusal, never the ROLLBACK's own error.
        AttemptError::Db(db) => match stmt("ROLLBACK").execute(&mut conn.borrow()).await {
            Ok(_) => Err(AttemptError::Db(db)),
            Err(_) => Err(AttemptError::Lost(db)),
        },
        other => Err(other),
    }
}

/// Interrupts a native batch that runs past [`BATCH_TIMEOUT`] (a busy wait,
/// a runaway statement). Late firing is harmless: SQLite ignores an
/// interrupt while no statement runs, and a batch that committed is reported
/// as committed whatever the watchdog did.
struct Watchdog {
    fired: Arc<std::sync::atomic::AtomicBool>,
    timer: tokio::task::JoinHandle<()>,
}

impl Watchdog {
    fn arm(handle: rusqlite::InterruptHandle, after: Duration) -> Watchdog {
        let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = fired.clone();
        let timer = tokio::spawn(async move {
            tokio::time::sleep(after).await;
            flag.store(true, Ordering::Release);
            handle.interrupt();
        });
        Watchdog { fired, timer }
    }

    /// Stops the timer; whether it had fired.
    fn disarm(self) -> bool {
        self.timer.abort();
        self.fired.load(Ordering::Acquire)
    }
}

async fn apply_all(
    conn: &mut Connection,
    batch: &mut [Box<dyn Queued>],
    dialect: Dialect,
    env: &WriterEnv,
) -> Result<(), sqlx::Error> {
    let begin = match dialect {
        Dialect::Sqlite => "BEGIN IMMEDIATE",
        Dialect::Postgres => "BEGIN",
    };
    let started = std::time::Instant::now();
    let mut conn = conn.borrow();
    stmt(begin).execute(&mut conn).await?;
    let head = super::audit::lock_head(&mut conn, dialect).await?;
    let locked = std::time::Instant::now();
    let head_seq = head.seq;
    let seen = env.high_water.load(Ordering::Acquire);
    if head_seq < seen {
        tracing::error!(
            head_seq,
            seen,
            "the audit head moved back: rows were removed from the audit table; refusing to write"
        );
        return Err(sqlx::Error::Protocol(format!(
            "the audit head moved back from {seen} to {head_seq}"
        )));
    }
    let mut ctx = WriteCtx {
        conn,
        dialect,
        now_ms: env.clock.now_ms(),
        head,
        audit_rows: Vec::new(),
        audit_key: env.audit_key.get().cloned(),
    };
    // Everything in one batch was in flight at the same time, so any order is a
    // valid serialisation: first the ops one by one, then each batched kind in
    // bulk (kinds in the order their first op was submitted).
    let mut kinds: Vec<BatchKind> = Vec::new();
    for job in batch.iter_mut() {
        match job.batch_kind() {
            None if !job.abandoned() => job.run(&mut ctx).await?,
            Some(kind) if !kinds.iter().any(|k| k.id == kind.id) => kinds.push(kind),
            _ => {}
        }
    }
    for kind in kinds {
        let jobs: Vec<&mut (dyn Queued + 'static)> = batch
            .iter_mut()
            .filter(|j| !j.abandoned() && j.batch_kind().is_some_and(|k| k.id == kind.id))
            .map(|j| j.as_mut())
            .collect();
        if !jobs.is_empty() {
            (kind.apply)(&mut ctx, jobs).await?;
        }
    }
    ctx.flush_audit().await?;
    let applied = started.elapsed();
    if ctx.head.seq != head_seq {
        super::audit::set_head(&mut ctx.conn, dialect, &ctx.head).await?;
    }
    let committing = std::time::Instant::now();
    stmt("COMMIT").execute(&mut ctx.conn).await?;
    env.high_water.fetch_max(ctx.head.seq, Ordering::AcqRel);
    let commit = committing.elapsed();
    env.stats
        .head_held_us
        .fetch_add(locked.elapsed().as_micros() as u64, Ordering::Relaxed);
    // COMMIT is where SQLite syncs the WAL (checkpoints run on a thread of
    // their own, store::checkpoint): a slow batch with a small apply_us is the
    // disk's.
    tracing::debug!(
        ops = batch.len(),
        apply_us = applied.as_micros() as u64,
        commit_us = commit.as_micros() as u64,
        total_us = started.elapsed().as_micros() as u64,
        "batch committed"
    );
    Ok(())
}

/// An audit row on its own (decisions that change no other state, e.g. a denial).
pub struct AppendAudit(pub AuditEvent);

impl WriteOp for AppendAudit {
    type Output = ();
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move { ctx.audit(&self.0).await })
    }
}

/// A write of no consequence: proves the store accepts and commits writes
/// (readiness). It rewrites the probe row with 32 KiB of fresh bytes, so a
/// read-only disk, or one too full for an issuance, fails it.
pub struct Probe;

impl WriteOp for Probe {
    type Output = ();
    const GRANTS: bool = true;
    fn apply<'a>(&'a self, ctx: &'a mut WriteCtx<'_>) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            // Fresh pages each time (random bytes, so PostgreSQL cannot
            // compress them away): at least what an issuance writes.
            let q = match ctx.dialect {
                Dialect::Sqlite => {
                    "INSERT INTO store_probe (id, at_ms, filler) VALUES (1, ?1, randomblob(32768)) \
                     ON CONFLICT (id) DO UPDATE SET at_ms = excluded.at_ms, filler = excluded.filler"
                }
                Dialect::Postgres => {
                    "INSERT INTO store_probe (id, at_ms, filler) VALUES (1, $1, \
                     (SELECT string_agg(md5(random()::text), '')::bytea FROM generate_series(1, 1024))) \
                     ON CONFLICT (id) DO UPDATE SET at_ms = excluded.at_ms, filler = excluded.filler"
                }
            };
            stmt(q).bind(ctx.now_ms).execute(&mut ctx.conn).await?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    //! The engine on its own: batched kinds get every op of theirs in a batch
    //! and route each output back to its submitter; a kind that cannot account
    //! for every op fails closed.
    use super::*;
    use crate::store::location::StoreUrl;
    use crate::store::Store;
    use std::sync::Mutex;

    /// Answers `n * 10`; records the size of each `apply_batch` call.
    struct Times10(u32);

    static BATCH_SIZES: Mutex<Vec<usize>> = Mutex::new(Vec::new());

    impl BatchedOp for Times10 {
        type Output = u32;
        fn grants(&self) -> bool {
            false
        }
        fn apply_batch<'a>(
            _ctx: &'a mut WriteCtx<'_>,
            ops: &'a [&'a Self],
        ) -> BoxFuture<'a, Result<Vec<u32>, sqlx::Error>> {
            Box::pin(async move {
                BATCH_SIZES.lock().unwrap().push(ops.len());
                Ok(ops.iter().map(|op| op.0 * 10).collect())
            })
        }
    }

    /// Returns no output at all.
    struct Mute;

    impl BatchedOp for Mute {
        type Output = ();
        fn grants(&self) -> bool {
            false
        }
        fn apply_batch<'a>(
            _ctx: &'a mut WriteCtx<'_>,
            _ops: &'a [&'a Self],
        ) -> BoxFuture<'a, Result<Vec<()>, sqlx::Error>> {
            Box::pin(async { Ok(Vec::new()) })
        }
    }

    #[test]
    fn only_a_small_batch_under_load_on_sqlite_waits_for_more() {
        // A lone request (no batch yet, or a few ops taking turns) is never held.
        assert!(!lingers(Dialect::Sqlite, 0, 1));
        assert!(!lingers(Dialect::Sqlite, 1, 1));
        assert!(!lingers(Dialect::Sqlite, LINGER_AFTER - 1, 1));
        // Under load, a small batch waits; one already large does not.
        assert!(lingers(Dialect::Sqlite, LINGER_AFTER, 1));
        assert!(lingers(Dialect::Sqlite, 40, LINGER_BELOW - 1));
        assert!(!lingers(Dialect::Sqlite, 40, LINGER_BELOW));
        // PostgreSQL's batches already gather what queued during the last: never held.
        assert!(!lingers(Dialect::Postgres, 40, 1));
    }

    async fn store(dir: &std::path::Path) -> Store {
        Store::open(
            &StoreUrl::Sqlite(dir.join("t.db")),
            2,
            Clock::new(),
            Duration::from_secs(15),
        )
        .await
        .expect("store opens")
    }

    fn temp_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("tessera-writer-{}", crate::ids::new_id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    /// Committed pages reach the database file without the writer
    /// checkpointing them: the checkpoint thread copies every committed frame
    /// long before the WAL reaches the writer's own (backstop) checkpoint.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_thread_of_its_own_checkpoints_the_wal() {
        let dir = temp_dir();
        let store = store(&dir).await;
        // The wal-index header (SQLite's documented WAL format, in the -shm
        // file, native byte order): mxFrame, the last committed frame, at 16;
        // nBackfill, the last frame copied into the database file, at 96.
        let frames = || {
            let shm = std::fs::read(dir.join("t.db-shm")).unwrap_or_default();
            let at = |o: usize| {
                shm.get(o..o + 4)
                    .map(|b| u32::from_ne_bytes(b.try_into().unwrap()))
                    .unwrap_or(0)
            };
            (at(16), at(96))
        };
        // 20 commits of 32 KiB fresh bytes each: a few hundred WAL frames, far
        // below the backstop.
        for _ in 0..20 {
            store.writer().submit(Probe).await.expect("probe commits");
        }
        let (committed, _) = frames();
        assert!(
            committed > 0 && committed < super::super::checkpoint::BACKSTOP_PAGES / 4,
            "{committed} frames: some, and nowhere near the backstop"
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (committed, copied) = frames();
            if copied == committed {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{copied} of {committed} committed WAL frames checkpointed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(store);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batched_ops_share_an_apply_and_get_their_own_outputs() {
        let dir = temp_dir();
        let store = store(&dir).await;
        let writer = store.writer().clone();
        let jobs: Vec<_> = (0..64u32)
            .map(|n| {
                let w = writer.clone();
                tokio::spawn(async move {
                    // Plain ops in the same batches as the batched ones.
                    let probe = w.submit(Probe);
                    let (probed, out) = tokio::join!(probe, w.submit_batched(Times10(n)));
                    probed.expect("probe commits");
                    (n, out.expect("batched op commits"))
                })
            })
            .collect();
        for job in jobs {
            let (n, out) = job.await.expect("task");
            assert_eq!(out, n * 10);
        }
        let sizes = BATCH_SIZES.lock().unwrap().clone();
        assert_eq!(
            sizes.iter().sum::<usize>(),
            64,
            "every op applied once: {sizes:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Inserts row `id` into the probe table; `GRANTS` says whether it may be
    /// skipped once its submitter has gone.
    struct Insert<const GRANTS: bool>(i64);

    impl<const G: bool> WriteOp for Insert<G> {
        type Output = ();
        const GRANTS: bool = G;
        fn apply<'a>(
            &'a self,
            ctx: &'a mut WriteCtx<'_>,
        ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
            Box::pin(async move {
                let q = ctx.sql("INSERT INTO writer_test (id) VALUES ($1)");
                stmt(&q).bind(self.0).execute(&mut ctx.conn).await?;
                Ok(())
            })
        }
    }

    /// Holds the writer until told to go (says when it has started).
    struct Gate {
        started: std::sync::mpsc::Sender<()>,
        go: Mutex<std::sync::mpsc::Receiver<()>>,
    }

    impl WriteOp for Gate {
        type Output = ();
        fn apply<'a>(
            &'a self,
            _ctx: &'a mut WriteCtx<'_>,
        ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
            Box::pin(async move {
                let _ = self.started.send(());
                let _ = self.go.lock().unwrap().recv();
                Ok(())
            })
        }
    }

    /// A store with a table of its own for [`Insert`].
    async fn test_store(dir: &std::path::Path) -> Store {
        let store = store(dir).await;
        sqlx::query("CREATE TABLE writer_test (id INTEGER PRIMARY KEY)")
            .execute(store.pool())
            .await
            .unwrap();
        store
    }

    async fn probe_rows(store: &Store, id: i64) -> i64 {
        sqlx::query_scalar(&store.sql("SELECT COUNT(*) FROM writer_test WHERE id = $1"))
            .bind(id)
            .fetch_one(store.pool())
            .await
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_refused_op_does_not_fail_the_others_in_its_batch() {
        let dir = temp_dir();
        let store = test_store(&dir).await;
        let writer = store.writer().clone();
        writer
            .submit(Insert::<true>(1000))
            .await
            .expect("first insert");
        // Held behind a gate, every insert lands in one batch with the duplicate.
        let (started, started_rx) = std::sync::mpsc::channel();
        let (go, go_rx) = std::sync::mpsc::channel();
        let gate = tokio::spawn({
            let w = writer.clone();
            async move {
                w.submit(Gate {
                    started,
                    go: Mutex::new(go_rx),
                })
                .await
            }
        });
        tokio::task::spawn_blocking(move || started_rx.recv())
            .await
            .unwrap()
            .unwrap();
        let jobs: Vec<_> = (0..40i64)
            .map(|i| {
                let w = writer.clone();
                // Row 1000 exists: the 21st insert is refused.
                let id = if i == 20 { 1000 } else { 2000 + i };
                tokio::spawn(async move { (id, w.submit(Insert::<true>(id)).await) })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        go.send(()).unwrap();
        gate.await.unwrap().expect("gate commits");
        for job in jobs {
            let (id, out) = job.await.unwrap();
            if id == 1000 {
                assert!(matches!(out, Err(StoreError::Conflict(_))), "{out:?}");
            } else {
                out.expect("a good op in a failed batch commits on its own");
                assert_eq!(probe_rows(&store, id).await, 1);
            }
        }
        assert!(writer.stats().failed_batches.load(Ordering::Relaxed) >= 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_grant_nobody_waits_for_is_skipped_and_a_record_is_not() {
        let dir = temp_dir();
        let store = test_store(&dir).await;
        let writer = store.writer().clone();
        let (started, started_rx) = std::sync::mpsc::channel();
        let (go, go_rx) = std::sync::mpsc::channel();
        let gate = tokio::spawn({
            let w = writer.clone();
            async move {
                w.submit(Gate {
                    started,
                    go: Mutex::new(go_rx),
                })
                .await
            }
        });
        tokio::task::spawn_blocking(move || started_rx.recv())
            .await
            .unwrap()
            .unwrap();
        // Queued behind the gate, then given up on by their submitters.
        let grant = tokio::spawn({
            let w = writer.clone();
            async move { w.submit(Insert::<true>(7)).await }
        });
        let record = tokio::spawn({
            let w = writer.clone();
            async move { w.submit(Insert::<false>(8)).await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        grant.abort();
        record.abort();
        let _ = (grant.await, record.await);
        go.send(()).unwrap();
        gate.await.unwrap().expect("gate commits");
        writer.submit(Probe).await.expect("the writer goes on");
        assert_eq!(
            probe_rows(&store, 7).await,
            0,
            "an abandoned grant is skipped"
        );
        assert_eq!(
            probe_rows(&store, 8).await,
            1,
            "a record is applied regardless"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_batch_that_loses_an_output_fails_closed() {
        let dir = temp_dir();
        let store = store(&dir).await;
        let err = store.writer().submit_batched(Mute).await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
        // The writer goes on.
        store.writer().submit(Probe).await.expect("probe commits");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An endless statement on the native connection: only an interrupt ends it.
    fn run_forever(conn: &rusqlite::Connection) -> rusqlite::Result<i64> {
        conn.query_row(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) \
             SELECT count(*) FROM c",
            [],
            |row| row.get(0),
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn the_watchdog_interrupts_a_native_batch_that_runs_too_long() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let watchdog = Watchdog::arm(conn.get_interrupt_handle(), Duration::from_millis(200));
        let (conn, result) = tokio::task::spawn_blocking(move || {
            let r = run_forever(&conn);
            (conn, r)
        })
        .await
        .unwrap();
        let code = match result {
            Err(rusqlite::Error::SqliteFailure(f, _)) => f.extended_code,
            other => panic!("the statement was not interrupted: {other:?}"),
        };
        assert_eq!(code, rusqlite::ffi::SQLITE_INTERRUPT);
        assert!(watchdog.disarm(), "the watchdog says it fired");
        // The connection works again once nothing runs.
        let one: i64 = conn.query_row("SELECT 1", [], |r| r.get(0)).unwrap();
        assert_eq!(one, 1);
    }

    #[tokio::test]
    async fn a_disarmed_watchdog_never_fires() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let watchdog = Watchdog::arm(conn.get_interrupt_handle(), Duration::from_millis(50));
        assert!(!watchdog.disarm());
        tokio::time::sleep(Duration::from_millis(150)).await;
        let n: i64 = conn
            .query_row(
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000) \
                 SELECT count(*) FROM c",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 200_000);
    }
}
