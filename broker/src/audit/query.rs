//! Reading the audit log: filtered, paged by sequence number.
//!
//! Why paging by `seq` and not by offset: the log only grows, so a cursor
//! ("rows after seq N") is stable while rows are appended, which is what
//! `audit tail --follow` and an export to a SIEM need — no row is skipped or
//! repeated between pages. Every filter is a bound parameter; nothing from a
//! request reaches the SQL text.

use crate::clock::rfc3339_ms;
use crate::store::{col, placeholder, Store, StoreError};
use serde::Serialize;

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

/// One stored row, as administrators and SIEMs see it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AuditRecord {
    pub seq: i64,
    pub at: String,
    pub event: String,
    pub actor: String,
    pub decision: String,
    pub reason: Option<String>,
    pub run_id: Option<String>,
    pub capability_id: Option<String>,
    pub user: Option<String>,
    pub task_id: Option<String>,
    pub action: Option<String>,
    pub resource: Option<String>,
    pub request_id: Option<String>,
    pub detail: Option<String>,
    pub prev_hash: String,
    pub hash: String,
}

enum Bind {
    Text(String),
    Int(i64),
}

/// The rows matching `filter`, at most `filter.limit` (capped at [`MAX_PAGE`]).
pub async fn list(store: &Store, filter: &AuditFilter) -> Result<Vec<AuditRecord>, StoreError> {
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
    let mut q = String::from(
        "SELECT seq, at_ms, event, actor, decision, reason, run_id, capability_id, user_name, \
         task_id, action, resource, request_id, detail, prev_hash, hash FROM audit",
    );
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
    rows.iter()
        .map(|row| {
            Ok(AuditRecord {
                seq: col(row, "seq")?,
                at: rfc3339_ms(col(row, "at_ms")?),
                event: col(row, "event")?,
                actor: col(row, "actor")?,
                decision: col(row, "decision")?,
                reason: col(row, "reason")?,
                run_id: col(row, "run_id")?,
                capability_id: col(row, "capability_id")?,
                user: col(row, "user_name")?,
                task_id: col(row, "task_id")?,
                action: col(row, "action")?,
                resource: col(row, "resource")?,
                request_id: col(row, "request_id")?,
                detail: col(row, "detail")?,
                prev_hash: col(row, "prev_hash")?,
                hash: col(row, "hash")?,
            })
        })
        .collect()
}
