//! Durable state on SQLite (embedded default) or PostgreSQL, through sqlx.
//!
//! Both dialects share one schema shape (`migrations/sqlite`, `migrations/postgres`)
//! and one set of queries, written with `$N` placeholders and rewritten to `?N`
//! for SQLite by [`Store::sql`]. Reads go through a pool; every write goes through
//! the [`writer::Writer`], which groups concurrent requests' writes into shared
//! commits (group commit) and answers each request only after its commit.
//!
//! Any store failure maps to [`StoreError::Unavailable`] and, at the HTTP edge, a
//! 503: the broker fails closed and issues nothing it could not record.

pub mod approvals;
pub mod approvers;
pub mod audit;
pub mod capabilities;
pub mod charges;
pub mod checkpoint;
pub mod decisions;
pub mod health;
pub mod holds;
pub mod instances;
pub mod keys;
pub mod location;
pub mod policy_versions;
pub mod priority;
pub mod query;
pub mod rate;
pub mod retention;
pub mod revocations;
pub mod run_index;
pub mod run_state;
pub mod runs;
pub mod runtimes;
pub mod sql;
pub mod webhooks;
pub mod writer;

use crate::clock::Clock;
pub use location::StoreUrl;
use secrecy::ExposeSecret;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyConnection, AnyPool, Connection, Executor};
use std::borrow::Cow;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("{0} already exists")]
    Conflict(&'static str),
    #[error("store data unreadable: {0}")]
    Corrupt(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &e {
            if db.is_unique_violation() {
                return StoreError::Conflict("record");
            }
        }
        StoreError::Unavailable(e.to_string())
    }
}

pub use sql::{placeholder, sql_for, Dialect};

static SQLITE_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");
static POSTGRES_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    dialect: Dialect,
    writer: writer::Writer,
    clock: Clock,
    probe: Arc<ProbeState>,
}

/// How long a successful write probe answers readiness checks.
const PROBE_REUSE_MS: i64 = 10_000;
/// Write probes are at least this far apart, whoever asks.
const PROBE_GAP_MS: i64 = 1_000;

#[derive(Default)]
struct ProbeState {
    last_ok_ms: AtomicI64,
    last_attempt_ms: AtomicI64,
    last_result: AtomicBool,
    in_flight: AtomicBool,
}

/// Connection URL and the statements each new connection runs first.
fn connect_spec(url: &StoreUrl) -> (String, Dialect, &'static [&'static str]) {
    match url {
        StoreUrl::Sqlite(path) => (
            format!("sqlite://{}?mode=rwc", path.display()),
            Dialect::Sqlite,
            &[
                "PRAGMA journal_mode = WAL",
                "PRAGMA synchronous = FULL",
                "PRAGMA busy_timeout = 5000",
                "PRAGMA foreign_keys = ON",
                // Statement journals and temporary b-trees in memory, not in temp
                // files: they only ever undo a statement inside its transaction, so
                // durability (the WAL, `synchronous = FULL`) is untouched
                // (docs/performance.md, issue 20).
                "PRAGMA temp_store = MEMORY",
                // A committing connection checkpoints in-line only past this
                // many WAL pages: a thread of its own checkpoints long before
                // (store::checkpoint), off the writer's commit cycle.
                "PRAGMA wal_autocheckpoint = 10000",
            ],
        ),
        StoreUrl::Postgres(u) => (
            u.expose_secret().to_owned(),
            Dialect::Postgres,
            &["SET statement_timeout = '10s'"],
        ),
    }
}

/// A connection to `url` with `init` run on it. `statements`, on
/// PostgreSQL, is how many prepared statements it keeps, whatever the URL
/// says (`None`: what the URL's `statement-cache-capacity` says, else sqlx's
/// default of 100).
async fn open_connection(
    url: &str,
    init: &'static [&'static str],
    statements: Option<usize>,
) -> Result<AnyConnection, StoreError> {
    let mut opts =
        AnyConnectOptions::from_str(url).map_err(|e| StoreError::Unavailable(e.to_string()))?;
    if let Some(n) = statements {
        keep_prepared(&mut opts, n);
    }
    let mut conn = tokio::time::timeout(Duration::from_secs(5), AnyConnection::connect_with(&opts))
        .await
        .map_err(|_| StoreError::Unavailable("connect timed out".into()))??;
    for stmt in init {
        conn.execute(*stmt).await?;
    }
    Ok(conn)
}

/// Sets how many prepared statements a PostgreSQL connection keeps (sqlx
/// reads it from the URL's query). A value the URL sets is replaced: below
/// the writer's working set the cache evicts, and 0 makes sqlx leave every
/// statement it prepares on the server, never closed. The rest of the URL is
/// left as written unless it names the parameter.
fn keep_prepared(opts: &mut AnyConnectOptions, n: usize) {
    const PARAM: &str = "statement-cache-capacity";
    let url = &mut opts.database_url;
    if !matches!(url.scheme(), "postgres" | "postgresql") {
        return;
    }
    if url.query_pairs().any(|(k, _)| k == PARAM) {
        let others: Vec<(String, String)> = url
            .query_pairs()
            .filter(|(k, _)| k != PARAM)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        url.query_pairs_mut().clear().extend_pairs(others);
    }
    url.query_pairs_mut().append_pair(PARAM, &n.to_string());
}

/// The writer's own connection to a SQLite file: native (rusqlite), with the
/// same pragmas as every pooled connection and a statement cache large enough
/// for every statement the writer runs.
fn open_native(
    path: &std::path::Path,
    init: &'static [&'static str],
) -> Result<writer::Connection, StoreError> {
    native_connection(path, init)
        .map(writer::Connection::Native)
        .map_err(|e| StoreError::Unavailable(e.to_string()))
}

/// A native connection to the SQLite file at `path`, with `init` run on it.
fn native_connection(
    path: &std::path::Path,
    init: &'static [&'static str],
) -> Result<rusqlite::Connection, sqlx::Error> {
    // No URI interpretation: the path is a file name, as the pool reads it.
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
        | rusqlite::OpenFlags::SQLITE_OPEN_CREATE
        | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = rusqlite::Connection::open_with_flags(path, flags).map_err(query::native)?;
    conn.set_prepared_statement_cache_capacity(query::WRITER_STATEMENT_CACHE);
    for stmt in init {
        query::native_exec(&conn, stmt)?;
    }
    Ok(conn)
}

impl Store {
    /// Connects, applies migrations and starts the writer.
    /// `timeout` bounds every wait for the store on the request path: a
    /// connection from the pool, and an op's commit.
    pub async fn open(
        store_url: &StoreUrl,
        max_connections: u32,
        clock: Clock,
        timeout: Duration,
    ) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let (url, dialect, init) = connect_spec(store_url);
        let pool = AnyPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(timeout)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    for stmt in init {
                        conn.execute(*stmt).await?;
                    }
                    Ok(())
                })
            })
            .connect(&url)
            .await?;
        let migrator = match dialect {
            Dialect::Sqlite => &SQLITE_MIGRATOR,
            Dialect::Postgres => &POSTGRES_MIGRATOR,
        };
        migrator
            .run(&pool)
            .await
            .map_err(|e| StoreError::Unavailable(format!("migration failed: {e}")))?;
        let connect: writer::Connector = match store_url {
            StoreUrl::Sqlite(path) => {
                let path = path.clone();
                Box::new(move || {
                    let opened = open_native(&path, init);
                    Box::pin(async move { opened })
                })
            }
            StoreUrl::Postgres(_) => {
                let writer_url = url.clone();
                Box::new(move || {
                    let u = writer_url.clone();
                    Box::pin(async move {
                        Ok(writer::Connection::Sqlx(
                            open_connection(&u, init, Some(query::WRITER_STATEMENT_CACHE)).await?,
                        ))
                    })
                })
            }
        };
        let checkpoints = match store_url {
            StoreUrl::Sqlite(path) => Some(checkpoint::start(path.clone(), move |p| {
                native_connection(p, init)
            })),
            StoreUrl::Postgres(_) => None,
        };
        let writer = writer::Writer::start(dialect, clock.clone(), connect, timeout, checkpoints);
        Ok(Store {
            pool,
            dialect,
            writer,
            clock,
            probe: Arc::new(ProbeState {
                last_ok_ms: AtomicI64::new(i64::MIN / 2),
                ..Default::default()
            }),
        })
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    pub fn writer(&self) -> &writer::Writer {
        &self.writer
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Rewrites `$N` placeholders for SQLite (`?N`, which binds by explicit index).
    pub fn sql(&self, q: &'static str) -> Cow<'static, str> {
        sql_for(self.dialect, q)
    }

    /// True when the store answers a read within the store timeout.
    pub async fn answers_read(&self) -> bool {
        let read = sqlx::query("SELECT 1").execute(&self.pool);
        matches!(
            tokio::time::timeout(self.writer.timeout(), read).await,
            Ok(Ok(_))
        )
    }

    /// True when the store answers a read and commits a write probe in time:
    /// a broker that cannot record cannot issue, so it is not ready. With
    /// `fresh` (the last batch failed), an earlier success is not reused.
    pub async fn ping(&self, fresh: bool) -> bool {
        if !self.answers_read().await {
            return false;
        }
        // The write probe goes through the one writer (and, on PostgreSQL, the
        // audit head lock), so an unauthenticated caller must not be able to
        // drive it: a success is reused for a while, probes are at least
        // PROBE_GAP_MS apart, and one runs at a time.
        let now = self.clock.now_ms();
        let probe = &self.probe;
        if !fresh && now - probe.last_ok_ms.load(Ordering::Relaxed) < PROBE_REUSE_MS {
            return true;
        }
        if now - probe.last_attempt_ms.load(Ordering::Relaxed) < PROBE_GAP_MS
            || probe.in_flight.swap(true, Ordering::AcqRel)
        {
            return probe.last_result.load(Ordering::Relaxed);
        }
        probe.last_attempt_ms.store(now, Ordering::Relaxed);
        let write = self.writer.submit(writer::Probe);
        let ok = matches!(
            tokio::time::timeout(self.writer.timeout(), write).await,
            Ok(Ok(()))
        );
        if ok {
            probe.last_ok_ms.store(now, Ordering::Relaxed);
        }
        probe.last_result.store(ok, Ordering::Relaxed);
        probe.in_flight.store(false, Ordering::Release);
        ok
    }
}

/// Reads a column that the schema guarantees, mapping a mismatch to `Corrupt`.
pub(crate) fn col<T: query::Column>(
    row: &impl query::Columns,
    name: &str,
) -> Result<T, StoreError> {
    row.column(name)
        .map_err(|e| StoreError::Corrupt(format!("column {name}: {e}")))
}

/// Decodes a whole row into `T` (a `#[derive(sqlx::FromRow)]` struct), mapping
/// a mismatch to `Corrupt` like [`col`].
pub(crate) fn decode<'r, T>(row: &'r sqlx::any::AnyRow) -> Result<T, StoreError>
where
    T: sqlx::FromRow<'r, sqlx::any::AnyRow>,
{
    T::from_row(row).map_err(|e| StoreError::Corrupt(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The writer's PostgreSQL connection keeps its whole working set
    /// prepared, whatever the URL says; nothing else in the URL changes (its
    /// password, a socket directory, other parameters).
    #[test]
    fn the_writer_keeps_its_statement_cache_whatever_the_url_says() {
        let cache = |url: &str| {
            let mut opts = AnyConnectOptions::from_str(url).expect("url");
            keep_prepared(&mut opts, 512);
            opts.database_url.to_string()
        };
        assert_eq!(
            cache("postgres://u:p%40ss@127.0.0.1:5432/db?sslmode=disable"),
            "postgres://u:p%40ss@127.0.0.1:5432/db?sslmode=disable&statement-cache-capacity=512"
        );
        assert_eq!(
            cache("postgresql:///db?host=/var/run/postgresql"),
            "postgresql:///db?host=/var/run/postgresql&statement-cache-capacity=512"
        );
        assert_eq!(
            cache("postgres://127.0.0.1/db"),
            "postgres://127.0.0.1/db?statement-cache-capacity=512"
        );
        // Below the working set, or 0 (every statement left on the server): replaced.
        for set in ["0", "100", "4096"] {
            assert_eq!(
                cache(&format!(
                    "postgres://127.0.0.1/db?statement-cache-capacity={set}&application_name=t"
                )),
                "postgres://127.0.0.1/db?application_name=t&statement-cache-capacity=512"
            );
        }
        assert_eq!(cache("sqlite:///tmp/t.db"), "sqlite:///tmp/t.db");
    }

    /// Every SQLite connection the store opens, pooled or the writer's native
    /// one, is durable (WAL, `synchronous = FULL`), enforces foreign keys and
    /// keeps its statement journals in memory.
    #[tokio::test]
    async fn sqlite_connections_are_durable_and_journal_in_memory() {
        sqlx::any::install_default_drivers();
        let dir = std::env::temp_dir().join(format!("tessera-pragma-{}", crate::ids::new_id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (url, _, init) = connect_spec(&StoreUrl::Sqlite(dir.join("t.db")));
        let mut conn = open_connection(&url, init, None).await.unwrap();
        let int = |v: Option<i64>| v.unwrap_or(-1);
        let synchronous: Option<i64> = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_optional(&mut conn)
            .await
            .unwrap();
        let temp_store: Option<i64> = sqlx::query_scalar("PRAGMA temp_store")
            .fetch_optional(&mut conn)
            .await
            .unwrap();
        let journal: Option<String> = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_optional(&mut conn)
            .await
            .unwrap();
        assert_eq!(int(synchronous), 2, "FULL");
        assert_eq!(int(temp_store), 2, "MEMORY");
        assert_eq!(journal.as_deref(), Some("wal"));
        drop(conn);

        // The writer's own (native) connection: the same pragmas.
        let writer::Connection::Native(native) = open_native(&dir.join("t.db"), init).unwrap()
        else {
            panic!("a SQLite writer connection is native");
        };
        let pragma = |name: &str| -> String {
            native
                .query_row(&format!("PRAGMA {name}"), [], |row| {
                    Ok(match row.get_ref(0)? {
                        rusqlite::types::ValueRef::Integer(i) => i.to_string(),
                        rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into(),
                        other => format!("{other:?}"),
                    })
                })
                .unwrap()
        };
        assert_eq!(pragma("synchronous"), "2", "FULL");
        assert_eq!(pragma("temp_store"), "2", "MEMORY");
        assert_eq!(pragma("journal_mode"), "wal");
        assert_eq!(pragma("foreign_keys"), "1");
        assert_eq!(pragma("busy_timeout"), "5000");
        assert_eq!(
            pragma("wal_autocheckpoint"),
            checkpoint::BACKSTOP_PAGES.to_string()
        );
        drop(native);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A new SQLite store migrated up to, not including, 0008 (lean audit rows).
    async fn sqlite_before_0008() -> (std::path::PathBuf, sqlx::AnyConnection) {
        sqlite_before(8).await
    }

    /// A new SQLite store migrated up to, not including, `version`.
    async fn sqlite_before(version: i64) -> (std::path::PathBuf, sqlx::AnyConnection) {
        sqlx::any::install_default_drivers();
        let dir = std::env::temp_dir().join(format!("tessera-mig-{}", crate::ids::new_id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (url, _, init) = connect_spec(&StoreUrl::Sqlite(dir.join("t.db")));
        let mut conn = open_connection(&url, init, None).await.unwrap();
        let before = sqlx::migrate::Migrator {
            migrations: SQLITE_MIGRATOR
                .migrations
                .iter()
                .filter(|m| m.version < version)
                .cloned()
                .collect(),
            ..sqlx::migrate::Migrator::DEFAULT
        };
        before.run(&mut conn).await.unwrap();
        (dir, conn)
    }

    /// 0011 on a store with capabilities and a lease: every row kept, each
    /// capability indexed under its run, the mark at the last audit row, no
    /// foreign key from capabilities to runs (retention would read the whole
    /// table per deleted run), and leases still bound to their capability.
    #[tokio::test]
    async fn the_run_index_migration_keeps_every_capability_and_indexes_it() {
        use sqlx::Row;
        let (dir, mut conn) = sqlite_before(11).await;
        for q in [
            "INSERT INTO runtimes (id, name, key_hash, users, task_kinds, created_at) \
             VALUES ('rt', 'rt', 'h', '*', '*', 1)",
            "INSERT INTO runs (id, token_hash, runtime_id, runtime_name, user_name, task_id, \
             task_kind, task_attributes, labels, created_at, expires_at) \
             VALUES ('r1', 't1', 'rt', 'rt', 'u', 'k', 'k', '{}', '[]', 1, 9), \
                    ('r2', 't2', 'rt', 'rt', 'u', 'k', 'k', '{}', '[]', 1, 9)",
            "INSERT INTO capabilities (id, run_id, kid, action, resource, backend, policies, \
             issued_at, expires_at, uses, uses_left, slot) \
             VALUES ('c1', 'r1', 'k', 'read', 'b:x', 'b', 'p', 1, 9, 3, 2, NULL), \
                    ('c2', 'r2', 'k', 'read', 'b:y', 'b', 'p', 1, 9, 1, 1, 's')",
            "INSERT INTO leases (id, capability_id, run_id, backend, kind, created_at, expires_at) \
             VALUES ('l1', 'c1', 'r1', 'b', 'token', 1, 9)",
            "INSERT INTO audit (seq, at_ms, event, decision, hash) VALUES (7, 1, 'x', 'allow', 'h')",
        ] {
            sqlx::query(q).execute(&mut conn).await.unwrap();
        }
        SQLITE_MIGRATOR.run(&mut conn).await.unwrap();
        let rows = sqlx::query("SELECT id, run_id, uses_left, slot FROM capabilities ORDER BY id")
            .fetch_all(&mut conn)
            .await
            .unwrap();
        let got: Vec<(String, String, i64, Option<String>)> = rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect();
        assert_eq!(
            got,
            vec![
                ("c1".into(), "r1".into(), 2, None),
                ("c2".into(), "r2".into(), 1, Some("s".into()))
            ]
        );
        let pairs = sqlx::query("SELECT run_id, capability_id FROM run_capabilities ORDER BY 1")
            .fetch_all(&mut conn)
            .await
            .unwrap();
        let pairs: Vec<(String, String)> = pairs.iter().map(|r| (r.get(0), r.get(1))).collect();
        assert_eq!(
            pairs,
            vec![("r1".into(), "c1".into()), ("r2".into(), "c2".into())]
        );
        let mark: i64 = sqlx::query_scalar("SELECT through_seq FROM run_capabilities_mark")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(mark, 7);
        let parents: Vec<String> =
            sqlx::query_scalar("SELECT \"table\" FROM pragma_foreign_key_list('capabilities')")
                .fetch_all(&mut conn)
                .await
                .unwrap();
        assert!(parents.is_empty(), "{parents:?}");
        let broken = sqlx::query("PRAGMA foreign_key_check")
            .fetch_all(&mut conn)
            .await
            .unwrap();
        assert!(broken.is_empty());
        // The lease's key to its capability holds as before.
        let orphan = sqlx::query(
            "INSERT INTO leases (id, capability_id, run_id, backend, kind, created_at, expires_at) \
             VALUES ('l2', 'nope', 'r1', 'b', 'token', 1, 9)",
        )
        .execute(&mut conn)
        .await;
        assert!(orphan.is_err(), "a lease of no capability is refused");
        drop(conn);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The old audit key took any value; a row whose `seq` is not an integer
    /// (an edited file) stops 0008 with the guard's name, and the table is
    /// left as it was (the migration's transaction rolls back).
    #[tokio::test]
    async fn a_seq_that_is_not_an_integer_stops_the_lean_migration_by_name() {
        use sqlx::Row;
        for bad in ["NULL", "2.5", "'two'"] {
            let (dir, mut conn) = sqlite_before_0008().await;
            sqlx::query(&format!(
                "INSERT INTO audit (seq, at_ms, event, actor, decision, prev_hash, hash) \
                 VALUES ({bad}, 1, 'run.created', 'admin', 'allow', '', 'h')"
            ))
            .execute(&mut conn)
            .await
            .unwrap();
            let err = SQLITE_MIGRATOR.run(&mut conn).await.unwrap_err();
            assert!(
                format!("{err:#}").contains("audit_seq_is_an_integer"),
                "{bad}: {err:#}"
            );
            let rows: i64 = sqlx::query("SELECT COUNT(*) AS n FROM audit")
                .fetch_one(&mut conn)
                .await
                .unwrap()
                .get("n");
            assert_eq!(rows, 1, "{bad}: the table is unchanged");
            drop(conn);
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    /// Migration 0008 rebuilds SQLite's audit table (lean rows): every row
    /// written before it survives with its values, reads back as it was
    /// hashed, and a lean row written after it reads its derived `actor` and
    /// `prev_hash` exactly as the chain needs them.
    #[tokio::test]
    async fn the_lean_audit_migration_keeps_every_row_as_it_was_hashed() {
        use crate::audit::{chain_hash, events, AuditEvent, GENESIS_HASH};
        use sqlx::Row;
        let (dir, mut conn) = sqlite_before_0008().await;

        // Three rows as a broker before 0008 wrote them: actor and prev_hash stored.
        let mut events_written = Vec::new();
        let mut prev = GENESIS_HASH.to_owned();
        for (seq, actor, run) in [
            (1, "run:r1", Some("r1")),
            (2, "admin", None),
            (3, "run:r2", Some("r2")),
        ] {
            let mut ev = AuditEvent::new(events::CAPABILITY_ISSUED, actor, "allow");
            ev.run_id = run.map(str::to_owned);
            let hash = chain_hash(&prev, seq, 1000 + seq, &ev);
            sqlx::query(
                "INSERT INTO audit (seq, at_ms, event, actor, decision, run_id, prev_hash, hash) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(seq)
            .bind(1000 + seq)
            .bind(ev.event)
            .bind(&ev.actor)
            .bind(ev.decision)
            .bind(&ev.run_id)
            .bind(&prev)
            .bind(&hash)
            .execute(&mut conn)
            .await
            .unwrap();
            events_written.push((ev, hash.clone()));
            prev = hash;
        }
        SQLITE_MIGRATOR.run(&mut conn).await.unwrap();

        // A lean row after it, as the writer stores one now.
        let mut ev = AuditEvent::new(events::CAPABILITY_ISSUED, "run:r3", "allow");
        ev.run_id = Some("r3".into());
        let hash = chain_hash(&prev, 4, 1004, &ev);
        sqlx::query(
            "INSERT INTO audit (seq, at_ms, event, decision, run_id, hash) VALUES (4, 1004, ?, ?, ?, ?)",
        )
        .bind(ev.event)
        .bind(ev.decision)
        .bind(&ev.run_id)
        .bind(&hash)
        .execute(&mut conn)
        .await
        .unwrap();
        events_written.push((ev, hash));

        let q = format!("SELECT {} FROM audit a ORDER BY a.seq", audit::SELECT);
        let rows = sqlx::query(&q).fetch_all(&mut conn).await.unwrap();
        assert_eq!(rows.len(), 4);
        let mut prev = GENESIS_HASH.to_owned();
        for (row, (ev, hash)) in rows.iter().zip(&events_written) {
            let read: audit::StoredRow = decode(row).unwrap();
            assert_eq!(read.prev_hash, prev, "row {}", read.seq);
            assert_eq!(read.event.actor, ev.actor, "row {}", read.seq);
            assert_eq!(&read.hash, hash);
            assert_eq!(
                chain_hash(&read.prev_hash, read.seq, read.at_ms, &read.event),
                read.hash,
                "row {} reads as it was hashed",
                read.seq
            );
            prev = read.hash;
        }
        // The sequence number is the rowid: no second index on it.
        let indexes: Vec<String> = sqlx::query(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'audit'",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<String, _>("name"))
        .collect();
        assert!(indexes.is_empty(), "{indexes:?}");
        drop(conn);
        let _ = std::fs::remove_dir_all(dir);
    }
}
