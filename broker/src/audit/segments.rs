//! Exported segments: rows that left the store (retention pruned them after
//! an export) are proved by recomputing their links from the export itself.
//!
//! Why the broker does it: a keyed link is an HMAC under the audit key, which
//! only the broker holds (sealed by the KEK); the CLI sends the rows in pages
//! with the link before them, and chains the pages and the pruned prefix's
//! last link (`AuditVerifyReport::pruned_through`) together. A row altered in
//! the file fails its link; a row dropped or added breaks the sequence or the
//! next row's `prev_hash`.

use super::{chain_hash, chain_mac, AuditKey};
use crate::clock::parse_rfc3339_ms;
use crate::store::audit::StoredEvent;
use tessera_client::types::{AuditProblem, AuditRecord, SegmentCheckResponse};

/// Rows per request.
pub const MAX_ROWS: usize = 1000;

fn problem(seq: i64, kind: &str, detail: String) -> AuditProblem {
    AuditProblem {
        seq,
        kind: kind.to_owned(),
        detail,
    }
}

/// Checks `rows` (in order) against `prev_hash`, the link before the first.
pub fn check(key: &AuditKey, prev_hash: &str, rows: &[AuditRecord]) -> SegmentCheckResponse {
    let mut prev = prev_hash.to_owned();
    let mut expected: Option<i64> = None;
    let mut checked = 0i64;
    for row in rows {
        let found = match expected {
            Some(e) if row.seq != e => Some(problem(
                e,
                "deleted",
                format!("the segment jumps from row {} to row {}", e - 1, row.seq),
            )),
            _ if row.prev_hash != prev => Some(problem(
                row.seq,
                "relinked",
                "the row does not follow the previous row's hash".into(),
            )),
            _ => match parse_rfc3339_ms(&row.at) {
                None => Some(problem(
                    row.seq,
                    "edited",
                    "the row's time is not RFC 3339".into(),
                )),
                Some(at_ms) => {
                    let event = StoredEvent {
                        event: row.event.clone(),
                        actor: row.actor.clone(),
                        decision: row.decision.clone(),
                        reason: row.reason.clone(),
                        run_id: row.run_id.clone(),
                        capability_id: row.capability_id.clone(),
                        user: row.user.clone(),
                        action: row.action.clone(),
                        resource: row.resource.clone(),
                        request_id: row.request_id.clone(),
                        detail: row.detail.clone(),
                        task_id: row.task_id.clone(),
                    };
                    let keyed = chain_mac(key, &row.prev_hash, row.seq, at_ms, &event);
                    // Rows from before the chain was keyed may be unkeyed.
                    let unkeyed = (row.seq <= key.unkeyed_until_seq)
                        .then(|| chain_hash(&row.prev_hash, row.seq, at_ms, &event));
                    (keyed != row.hash && unkeyed.as_deref() != Some(row.hash.as_str())).then(
                        || problem(row.seq, "edited", "the row does not match its hash".into()),
                    )
                }
            },
        };
        if let Some(p) = found {
            return SegmentCheckResponse {
                ok: false,
                checked,
                last_hash: prev,
                first_problem: Some(p),
            };
        }
        checked += 1;
        prev = row.hash.clone();
        expected = Some(row.seq + 1);
    }
    SegmentCheckResponse {
        ok: true,
        checked,
        last_hash: prev,
        first_problem: None,
    }
}
