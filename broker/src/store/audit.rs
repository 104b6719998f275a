//! The audit table's SQL: every statement that writes, lists or walks audit
//! rows and the chain's head, over one column list.
//!
//! Why one module: a row's link is a hash over its columns, so the writer that
//! inserts rows, the query that lists them and the walk that verifies them must
//! agree on what a row is. They share [`COLUMNS`] and [`StoredRow`] here rather
//! than spelling the list three times, where a column added to one and not the
//! others would be written and never verified (or verified and never written).
//!
//! Listing pages by `seq`, not by offset: the log only grows, so a cursor
//! ("rows after seq N") is stable while rows are appended, which is what
//! `audit tail --follow` and an export to a SIEM need — no row is skipped or
//! repeated between pages. Every filter is a bound parameter; nothing from a
//! request reaches the SQL text.

use super::query::{stmt, Conn};
use super::sql::{values_placeholders, ROWS_PER_INSERT};
use super::{decode, placeholder, sql_for, Dialect, Store, StoreError};
use crate::audit::AuditEvent;
use serde::Serialize;

/// The columns an audit row is written with (a macro, so static queries stay
/// `&'static str`). `prev_hash` is not among them: a new row stores NULL there
/// and readers derive it ([`audit_select!`]).
macro_rules! audit_columns {
    () => {
        "seq, at_ms, event, actor, decision, reason, run_id, capability_id, user_name, action, \
         resource, request_id, detail, task_id, hash, key_id"
    };
}

/// An audit row as read, from `audit a`: the columns of [`COLUMNS`] plus
/// `prev_hash`, with the two values a lean row leaves out derived exactly as
/// they were hashed (migration 0008):
/// - `actor` NULL is the row's run, `run:<run_id>`;
/// - `prev_hash` NULL is the previous row's `hash`, the genesis value for the
///   first row; `''` if that row is missing, which verification reports as a
///   deletion before it looks at links.
///
/// Rows written before 0008 keep their stored values, read as they are.
macro_rules! audit_select {
    () => {
        "a.seq, a.at_ms, a.event, COALESCE(a.actor, 'run:' || a.run_id, '') AS actor, \
         a.decision, a.reason, a.run_id, a.capability_id, a.user_name, a.action, a.resource, \
         a.request_id, a.detail, a.task_id, \
         COALESCE(a.prev_hash, \
                  CASE WHEN a.seq = 1 THEN \
                  '0000000000000000000000000000000000000000000000000000000000000000' END, \
                  (SELECT p.hash FROM audit p WHERE p.seq = a.seq - 1), '') AS prev_hash, \
         a.hash, a.key_id"
    };
}

/// Every column an audit row is written with, in the order [`insert`] binds them.
pub const COLUMNS: &str = audit_columns!();
/// How many [`COLUMNS`] there are.
const COLUMN_COUNT: usize = 16;
/// What a read of audit rows selects, from `audit a` ([`audit_select!`]).
pub const SELECT: &str = audit_select!();

/// An audit row's event as stored: the fields of [`AuditEvent`], in its order,
/// so it serialises (and hashes) exactly as it did when written.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct StoredEvent {
    pub event: String,
    pub actor: String,
    pub decision: String,
    pub reason: Option<String>,
    pub run_id: Option<String>,
    pub capability_id: Option<String>,
    #[sqlx(rename = "user_name")]
    pub user: Option<String>,
    pub action: Option<String>,
    pub resource: Option<String>,
    pub request_id: Option<String>,
    pub detail: Option<String>,
    /// Omitted from the canonical form when null, like [`AuditEvent::task_id`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}

/// One audit row as stored: its place in the chain and its event.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredRow {
    pub seq: i64,
    pub at_ms: i64,
    #[sqlx(flatten)]
    pub event: StoredEvent,
    pub prev_hash: String,
    pub hash: String,
    /// The audit key the row is linked with; `None` for an unkeyed row.
    pub key_id: Option<String>,
}

/// A row the writer chained in this batch, for [`insert`]. Its link's input,
/// the previous row's hash, is not stored ([`audit_select!`] derives it).
pub(crate) struct ChainedRow {
    pub seq: i64,
    /// Shared with the op that submitted it when it can be (an issuance):
    /// the writer copies no event it need not.
    pub event: std::sync::Arc<AuditEvent>,
    pub hash: String,
}

/// The actor as stored: NULL when it is the row's run (read back by
/// [`audit_select!`] as `run:<run_id>`).
fn stored_actor(e: &AuditEvent) -> Option<&str> {
    match (&e.run_id, e.actor.strip_prefix("run:")) {
        (Some(run), Some(actor_run)) if run == actor_run => None,
        _ => Some(&e.actor),
    }
}

/// Writes a batch's chained rows, all at `at_ms` and linked with `key_id`,
/// with multi-row INSERTs.
pub(crate) async fn insert(
    conn: &mut Conn<'_>,
    dialect: Dialect,
    at_ms: i64,
    key_id: Option<&str>,
    rows: &[ChainedRow],
) -> Result<(), sqlx::Error> {
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let q = format!(
            "INSERT INTO audit ({COLUMNS}) VALUES {}",
            values_placeholders(dialect, chunk.len(), COLUMN_COUNT)
        );
        let mut query = stmt(&q);
        for r in chunk {
            let e = &r.event;
            // In the order of COLUMNS.
            query = query
                .bind(r.seq)
                .bind(at_ms)
                .bind(e.event)
                .bind(stored_actor(e))
                .bind(e.decision)
                .bind(&e.reason)
                .bind(&e.run_id)
                .bind(&e.capability_id)
                .bind(&e.user)
                .bind(&e.action)
                .bind(&e.resource)
                .bind(&e.request_id)
                .bind(&e.detail)
                .bind(&e.task_id)
                .bind(&r.hash)
                .bind(key_id);
        }
        query.execute(conn).await?;
    }
    Ok(())
}

/// The chain's head: the last row's `seq` and link (0 and the genesis hash
/// before the first row).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Head {
    pub seq: i64,
    pub hash: String,
}

/// The head as committed.
pub async fn head(store: &Store) -> Result<Head, StoreError> {
    let row = sqlx::query("SELECT seq, hash FROM audit_head WHERE id = 1")
        .fetch_one(store.pool())
        .await?;
    decode(&row)
}

/// The head, read in the writer's open transaction and locked to it: on
/// PostgreSQL with `FOR UPDATE`, which serialises the batches of all replicas;
/// on SQLite the transaction's `BEGIN IMMEDIATE` already holds the only write lock.
pub(crate) async fn lock_head(conn: &mut Conn<'_>, dialect: Dialect) -> Result<Head, sqlx::Error> {
    let q = match dialect {
        Dialect::Sqlite => "SELECT seq, hash FROM audit_head WHERE id = 1",
        Dialect::Postgres => "SELECT seq, hash FROM audit_head WHERE id = 1 FOR UPDATE",
    };
    let row = stmt(q).fetch_one(conn).await?;
    Ok(Head {
        seq: row.try_get("seq")?,
        hash: row.try_get("hash")?,
    })
}

/// Moves the head to the last row written in this transaction.
pub(crate) async fn set_head(
    conn: &mut Conn<'_>,
    dialect: Dialect,
    head: &Head,
) -> Result<(), sqlx::Error> {
    let q = sql_for(
        dialect,
        "UPDATE audit_head SET seq = $1, hash = $2 WHERE id = 1",
    );
    stmt(&q)
        .bind(head.seq)
        .bind(&head.hash)
        .execute(conn)
        .await?;
    Ok(())
}

/// A row of the chain that does not decode as an audit row (a column of the
/// wrong type, written by whoever can write the database): what verification
/// reports, not a reason to stop reading.
#[derive(Debug, Clone)]
pub struct UnreadableRow {
    /// Its sequence number, if that column at least reads.
    pub seq: Option<i64>,
    pub detail: String,
}

/// Rows `from..=to` in order, at most `limit`: one page of a walk along the
/// chain. Each row is decoded on its own, so one unreadable row is reported
/// where it is instead of failing the page (and the verification with it).
pub async fn chain_page(
    store: &Store,
    from: i64,
    to: i64,
    limit: i64,
) -> Result<Vec<Result<StoredRow, UnreadableRow>>, StoreError> {
    let q = store.sql(concat!(
        "SELECT ",
        audit_select!(),
        " FROM audit a WHERE a.seq >= $1 AND a.seq <= $2 ORDER BY a.seq LIMIT $3"
    ));
    let rows = sqlx::query(&q)
        .bind(from)
        .bind(to)
        .bind(limit)
        .fetch_all(store.pool())
        .await?;
    Ok(rows
        .iter()
        .map(|row| {
            decode(row).map_err(|e| UnreadableRow {
                seq: sqlx::Row::try_get::<i64, _>(row, "seq").ok(),
                detail: e.to_string(),
            })
        })
        .collect())
}

/// Where the row at `seq` sits in time and in the chain.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RowLink {
    pub at_ms: i64,
    pub hash: String,
}

/// The time and link of the row at `seq`, if there is one.
pub async fn row_link(store: &Store, seq: i64) -> Result<Option<RowLink>, StoreError> {
    let q = store.sql("SELECT at_ms, hash FROM audit WHERE seq = $1");
    let row = sqlx::query(&q)
        .bind(seq)
        .fetch_optional(store.pool())
        .await?;
    row.as_ref().map(decode).transpose()
}

/// The first row the store still holds (above 1 once retention pruned a
/// prefix), or `None` for an empty log.
pub async fn first_seq(store: &Store) -> Result<Option<i64>, StoreError> {
    let row = sqlx::query("SELECT MIN(seq) AS first FROM audit")
        .fetch_one(store.pool())
        .await?;
    super::col(&row, "first")
}

/// Whether any row is linked with an audit key.
pub async fn any_keyed_row(store: &Store) -> Result<bool, StoreError> {
    let row = sqlx::query("SELECT seq FROM audit WHERE key_id IS NOT NULL LIMIT 1")
        .fetch_optional(store.pool())
        .await?;
    Ok(row.is_some())
}

/// Largest page a caller may ask for.
pub const MAX_PAGE: i64 = 1000;

/// Which rows, in which order. All filters are exact matches except `event`,
/// which also takes a family prefix (`capability.*`).
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub run_id: Option<String>,
    pub capability_id: Option<String>,
    pub user: Option<String>,
    pub event: Option<String>,
    pub decision: Option<String>,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    /// Rows with `seq` greater than this (ascending order) or less than this
    /// (descending order).
    pub cursor: Option<i64>,
    pub descending: bool,
    pub limit: i64,
}

enum Bind {
    Text(String),
    Int(i64),
}

/// The rows matching `filter`, at most `filter.limit` (capped at [`MAX_PAGE`]).
pub async fn list(store: &Store, filter: &AuditFilter) -> Result<Vec<StoredRow>, StoreError> {
    let mut clauses: Vec<String> = Vec::new();
    let mut binds: Vec<Bind> = Vec::new();
    let dialect = store.dialect();
    let mut push = |clause: &str, bind: Bind| {
        binds.push(bind);
        clauses.push(format!("{clause} {}", placeholder(dialect, binds.len())));
    };
    for (column, value) in [
        ("run_id =", &filter.run_id),
        ("capability_id =", &filter.capability_id),
        ("user_name =", &filter.user),
        ("decision =", &filter.decision),
    ] {
        if let Some(v) = value {
            push(column, Bind::Text(v.clone()));
        }
    }
    match filter.event.as_deref() {
        Some(family) if family.ends_with(".*") => {
            let prefix = &family[..family.len() - 1];
            // Event names are [a-z_.]; the prefix carries no LIKE wildcard.
            push("event LIKE", Bind::Text(format!("{prefix}%")));
        }
        Some(exact) => push("event =", Bind::Text(exact.to_owned())),
        None => {}
    }
    if let Some(ms) = filter.since_ms {
        push("at_ms >=", Bind::Int(ms));
    }
    if let Some(ms) = filter.until_ms {
        push("at_ms <", Bind::Int(ms));
    }
    if let Some(seq) = filter.cursor {
        push(
            if filter.descending { "seq <" } else { "seq >" },
            Bind::Int(seq),
        );
    }
    let mut q = format!("SELECT {SELECT} FROM audit a");
    if !clauses.is_empty() {
        q.push_str(" WHERE ");
        q.push_str(&clauses.join(" AND "));
    }
    q.push_str(if filter.descending {
        " ORDER BY seq DESC"
    } else {
        " ORDER BY seq"
    });
    q.push_str(&format!(" LIMIT {}", filter.limit.clamp(1, MAX_PAGE)));
    let mut query = sqlx::query(&q);
    for b in binds {
        query = match b {
            Bind::Text(t) => query.bind(t),
            Bind::Int(i) => query.bind(i),
        };
    }
    let rows = query.fetch_all(store.pool()).await?;
    rows.iter().map(decode).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{chain_hash, events, GENESIS_HASH};

    #[test]
    fn the_column_count_is_the_column_list() {
        assert_eq!(COLUMNS.split(',').count(), COLUMN_COUNT);
    }

    #[test]
    fn the_derived_first_link_is_the_genesis_value() {
        assert!(SELECT.contains(&format!("'{GENESIS_HASH}'")));
    }

    #[test]
    fn only_the_rows_own_run_is_left_out_as_actor() {
        let mut ev = AuditEvent::new(events::CAPABILITY_ISSUED, "run:r1", "allow");
        assert_eq!(
            stored_actor(&ev),
            Some("run:r1"),
            "no run to derive it from"
        );
        ev.run_id = Some("r1".into());
        assert_eq!(stored_actor(&ev), None);
        ev.run_id = Some("r2".into());
        assert_eq!(stored_actor(&ev), Some("run:r1"), "another run");
        ev.run_id = Some("r".into());
        assert_eq!(stored_actor(&ev), Some("run:r1"), "a prefix of it");
        ev.actor = "admin".into();
        assert_eq!(stored_actor(&ev), Some("admin"));
    }

    fn stored(e: &AuditEvent) -> StoredEvent {
        StoredEvent {
            event: e.event.to_owned(),
            actor: e.actor.clone(),
            decision: e.decision.to_owned(),
            reason: e.reason.clone(),
            run_id: e.run_id.clone(),
            capability_id: e.capability_id.clone(),
            user: e.user.clone(),
            action: e.action.clone(),
            resource: e.resource.clone(),
            request_id: e.request_id.clone(),
            detail: e.detail.clone(),
            task_id: e.task_id.clone(),
        }
    }

    #[test]
    fn a_stored_event_hashes_as_the_event_written() {
        let mut ev = AuditEvent::new(events::CAPABILITY_ISSUED, "run:1", "allow");
        ev.run_id = Some("run_1".into());
        ev.user = Some("alice".into());
        ev.detail = Some("d".into());
        for task_id in [None, Some("t-1".to_owned())] {
            ev.task_id = task_id;
            let s = stored(&ev);
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                serde_json::to_string(&ev).unwrap()
            );
            assert_eq!(
                chain_hash(GENESIS_HASH, 1, 10, &s),
                chain_hash(GENESIS_HASH, 1, 10, &ev)
            );
        }
    }
}
