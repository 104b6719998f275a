//! Walking the audit chain: finds the first row that was edited, deleted,
//! reordered or cut off, by recomputing every link from the genesis value
//! (the same function as [`super::AuditEvent`] rows were written with: keyed
//! rows with the audit key, rows from before the chain was keyed unkeyed).
//! Unkeyed rows are accepted only as the chain's prefix, up to the row that was
//! the head when the audit key was created (sealed with the key); any other
//! unkeyed row is a downgrade. Truncation after the last row cannot be seen from the database
//! alone: signed checkpoints held by witnesses ([`super::checkpoint`]) are what
//! prove it.
//!
//! When retention pruned the rows before the first kept one, the walk starts
//! there, from the link that row stores, and the chain must hold an
//! `audit.pruned` row authorising the prune up to at least that point (else
//! the missing rows are `deleted`); the exported segment proves the rest
//! (`tessera audit verify --segments`).
//!
//! Reads in pages so a long log is verified in bounded memory. A clean walk ends
//! at the head row (`audit_head`), which every writer batch updates in the same
//! transaction as the rows; a head ahead of the last row means rows were removed
//! from the end.

use super::{chain_hash, chain_mac, events, AuditKey, GENESIS_HASH};
use crate::store::audit::{self, StoredRow};
use crate::store::{Store, StoreError};

const PAGE: i64 = 1000;

pub use tessera_client::types::{
    AuditProblem as Problem, AuditVerifyReport as Report, PrunedPrefix,
};

/// Verifies the whole chain with `key`, the audit key the broker holds.
pub async fn verify(store: &Store, key: &AuditKey) -> Result<Report, StoreError> {
    // The head first, then the rows up to it: rows committed during the walk
    // are after the head read and not part of this verification (reading the
    // head last would take a commit during the walk for a truncation).
    let head = audit::head(store).await?;
    walk(store, key, head, true).await
}

/// The first problem in the rows the store holds up to `through`, if any
/// (retention checks what it exports and deletes: it never carries a
/// tampered row out of the store, where only the export could show it).
pub async fn problem_through(
    store: &Store,
    key: &AuditKey,
    through: i64,
) -> Result<Option<Problem>, StoreError> {
    let Some(row) = audit::row_link(store, through).await? else {
        return Ok(Some(Problem {
            seq: through,
            kind: "deleted".to_owned(),
            detail: "the row is not in the store".into(),
        }));
    };
    let head = audit::Head {
        seq: through,
        hash: row.hash,
    };
    Ok(walk(store, key, head, false).await?.first_problem)
}

/// Walks the rows from the first kept one to `head`. With `whole`, the
/// walk is of the whole chain: a pruned prefix must be authorised by an
/// `audit.pruned` row (itself naming an export recorded earlier in the
/// chain), which may lie after `head` otherwise.
async fn walk(
    store: &Store,
    key: &AuditKey,
    head: audit::Head,
    whole: bool,
) -> Result<Report, StoreError> {
    let audit::Head {
        seq: head_seq,
        hash: head_hash,
    } = head;
    // Retention may have pruned a prefix: the walk starts at the first row
    // kept (the first row of the first page, read in one statement), from
    // the link it stores, and the prune must be authorised below.
    let mut first = 1i64;
    let mut prev = GENESIS_HASH.to_owned();
    // The next row the walk expects; `None` until the first row is read.
    let mut next: Option<i64> = None;
    let mut authorised_through = 0i64;
    // Exports recorded in the chain (MAC-checked): id -> last row exported.
    let mut exports: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
    let mut pruned_through = None;
    let mut rows = 0i64;
    let mut unkeyed_rows = 0i64;
    let mut keyed_seen = false;
    let mut first_problem = None;
    'pages: loop {
        let page = audit::chain_page(store, next.unwrap_or(1), head_seq, PAGE).await?;
        if page.is_empty() {
            break;
        }
        for row in page {
            let row = match row {
                Ok(row) => row,
                Err(unreadable) => {
                    rows += 1;
                    first_problem = Some(Problem {
                        seq: unreadable.seq.or(next).unwrap_or(1),
                        kind: "edited".to_owned(),
                        detail: format!(
                            "the row cannot be read as an audit row ({})",
                            unreadable.detail
                        ),
                    });
                    break 'pages;
                }
            };
            let StoredRow {
                seq,
                at_ms,
                event,
                prev_hash,
                hash,
                key_id,
            } = row;
            let expected = match next {
                Some(e) => e,
                None => {
                    first = seq.max(1);
                    if first > 1 {
                        prev = prev_hash.clone();
                        pruned_through = Some(PrunedPrefix {
                            seq: first - 1,
                            hash: prev_hash.clone(),
                        });
                    }
                    first
                }
            };
            // A lean row's `prev_hash` is derived from the previous row (the
            // same row whose link `prev` holds, when none is missing); a row
            // written before migration 0008 keeps its own, checked below.
            let recomputed = match &key_id {
                Some(id) if *id == key.id => Some(chain_mac(key, &prev_hash, seq, at_ms, &event)),
                Some(_) => None,
                None => Some(chain_hash(&prev_hash, seq, at_ms, &event)),
            };
            rows += 1;
            let problem = if seq != expected {
                Some(Problem {
                    seq: expected,
                    kind: "deleted".to_owned(),
                    detail: format!("rows {expected}..{} are missing", seq - 1),
                })
            } else if recomputed.is_none() {
                Some(Problem {
                    seq,
                    kind: "unknown_key".to_owned(),
                    detail: "the row is linked with an audit key this broker does not hold".into(),
                })
            } else if key_id.is_none() && (keyed_seen || seq > key.unkeyed_until_seq) {
                Some(Problem {
                    seq,
                    kind: "downgraded".to_owned(),
                    detail: "an unkeyed row after the chain was keyed".into(),
                })
            } else if recomputed.as_deref() != Some(hash.as_str()) {
                Some(Problem {
                    seq,
                    kind: "edited".to_owned(),
                    detail: "the row does not match its hash".into(),
                })
            } else if prev_hash != prev {
                Some(Problem {
                    seq,
                    kind: "relinked".to_owned(),
                    detail: "the row does not follow the previous row's hash".into(),
                })
            } else {
                None
            };
            if let Some(p) = problem {
                first_problem = Some(p);
                break 'pages;
            }
            if key_id.is_some() {
                keyed_seen = true;
            } else {
                unkeyed_rows += 1;
            }
            // Only rows whose link just verified count: an export recorded
            // (by an admin, through the API) and a prune naming that export.
            if event.event == events::AUDIT_EXPORTED {
                if let Some((id, last)) = export_of(event.detail.as_deref()) {
                    exports.insert(id, last);
                }
            }
            if event.event == events::AUDIT_PRUNED {
                if let Some((n, id)) = prune_of(event.detail.as_deref()) {
                    if exports.get(&id).is_some_and(|last| *last >= n) {
                        authorised_through = authorised_through.max(n);
                    }
                }
            }
            prev = hash;
            next = Some(seq + 1);
        }
    }
    let end = next.unwrap_or(1);
    if whole && first_problem.is_none() && first > 1 && authorised_through < first - 1 {
        // Rows gone from the start with no `audit.pruned` row (MAC-checked
        // like every other, naming an export recorded in the chain) that
        // allowed it: deleted, not pruned.
        first_problem = Some(Problem {
            seq: 1,
            kind: "deleted".to_owned(),
            detail: format!(
                "rows 1..{} are missing and no audit.pruned row authorises their removal",
                first - 1
            ),
        });
    }
    if first_problem.is_none() && (head_seq != end - 1 || head_hash != prev) {
        first_problem = Some(Problem {
            seq: end,
            kind: "truncated".to_owned(),
            detail: format!("the chain ends at {} but its head says {head_seq}", end - 1),
        });
    }
    Ok(Report {
        ok: first_problem.is_none(),
        rows,
        head_seq,
        unkeyed_rows,
        head_hash: prev,
        first_problem,
        pruned_through,
    })
}

/// `(through, export id)` of an `audit.pruned` row's detail
/// (`through=N export=ID`).
fn prune_of(detail: Option<&str>) -> Option<(i64, String)> {
    let detail = detail?;
    let field = |name: &str| {
        detail
            .split_whitespace()
            .find_map(|part| part.strip_prefix(name))
    };
    Some((
        field("through=")?.parse().ok()?,
        field("export=")?.to_owned(),
    ))
}

/// `(export id, last row)` of an `audit.exported` row's detail
/// (`id=ID rows=A..B …`).
pub fn export_range(detail: Option<&str>) -> Option<(String, i64)> {
    export_of(detail)
}

fn export_of(detail: Option<&str>) -> Option<(String, i64)> {
    let detail = detail?;
    let field = |name: &str| {
        detail
            .split_whitespace()
            .find_map(|part| part.strip_prefix(name))
    };
    let (_, last) = field("rows=")?.split_once("..")?;
    Some((field("id=")?.to_owned(), last.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_parse_as_written() {
        assert_eq!(
            prune_of(Some("through=41 export=0193abc")),
            Some((41, "0193abc".to_owned()))
        );
        assert_eq!(prune_of(Some("through=41")), None);
        assert_eq!(
            export_of(Some("id=0193abc rows=1..41 checkpoint=41 sha256=ff")),
            Some(("0193abc".to_owned(), 41))
        );
        assert_eq!(export_of(Some("id=x rows=1-41")), None);
    }
}
