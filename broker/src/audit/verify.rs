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
    let audit::Head {
        seq: head_seq,
        hash: head_hash,
    } = audit::head(store).await?;
    // Retention may have pruned a prefix: the walk starts at the first row
    // kept, from the link it stores, and the prune must be authorised below.
    let first = audit::first_seq(store).await?.unwrap_or(1).max(1);
    let mut prev = GENESIS_HASH.to_owned();
    let mut expected = first;
    let mut authorised_through = 0i64;
    let mut pruned_through = None;
    let mut rows = 0i64;
    let mut unkeyed_rows = 0i64;
    let mut keyed_seen = false;
    let mut first_problem = None;
    'pages: loop {
        let page = audit::chain_page(store, expected, head_seq, PAGE).await?;
        if page.is_empty() {
            break;
        }
        for row in page {
            let row = match row {
                Ok(row) => row,
                Err(unreadable) => {
                    rows += 1;
                    first_problem = Some(Problem {
                        seq: unreadable.seq.unwrap_or(expected),
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
            if seq == first && first > 1 {
                prev = prev_hash.clone();
                pruned_through = Some(PrunedPrefix {
                    seq: first - 1,
                    hash: prev_hash.clone(),
                });
            }
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
            if event.event == events::AUDIT_PRUNED {
                if let Some(n) = pruned_bound(event.detail.as_deref()) {
                    authorised_through = authorised_through.max(n);
                }
            }
            prev = hash;
            expected = seq + 1;
        }
    }
    if first_problem.is_none() && first > 1 && authorised_through < first - 1 {
        // Rows gone from the start with no `audit.pruned` row (MAC-checked
        // like every other) that allowed it: deleted, not pruned.
        first_problem = Some(Problem {
            seq: 1,
            kind: "deleted".to_owned(),
            detail: format!(
                "rows 1..{} are missing and no audit.pruned row authorises their removal",
                first - 1
            ),
        });
    }
    if first_problem.is_none() && (head_seq != expected - 1 || head_hash != prev) {
        first_problem = Some(Problem {
            seq: expected,
            kind: "truncated".to_owned(),
            detail: format!(
                "the chain ends at {} but its head says {head_seq}",
                expected - 1
            ),
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

/// `through=N` of an `audit.pruned` row's detail.
fn pruned_bound(detail: Option<&str>) -> Option<i64> {
    detail?
        .split_whitespace()
        .find_map(|part| part.strip_prefix("through="))?
        .parse()
        .ok()
}
