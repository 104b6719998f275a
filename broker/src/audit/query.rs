//! Reading the audit log as administrators and SIEMs see it: filtered, paged
//! by sequence number (the SQL, and why it pages by `seq`, is in
//! `store::audit`); each row with its time as RFC 3339.

use crate::clock::rfc3339_ms;
use crate::store::audit::StoredRow;
use crate::store::{Store, StoreError};

pub use crate::store::audit::{AuditFilter, MAX_PAGE};

pub use tessera_client::types::AuditRecord;

impl From<StoredRow> for AuditRecord {
    fn from(row: StoredRow) -> Self {
        let e = row.event;
        AuditRecord {
            seq: row.seq,
            at: rfc3339_ms(row.at_ms),
            event: e.event,
            actor: e.actor,
            decision: e.decision,
            reason: e.reason,
            run_id: e.run_id,
            capability_id: e.capability_id,
            user: e.user,
            task_id: e.task_id,
            action: e.action,
            resource: e.resource,
            request_id: e.request_id,
            detail: e.detail,
            prev_hash: row.prev_hash,
            hash: row.hash,
        }
    }
}

/// The rows matching `filter`, at most `filter.limit` (capped at [`MAX_PAGE`]).
pub async fn list(store: &Store, filter: &AuditFilter) -> Result<Vec<AuditRecord>, StoreError> {
    let rows = crate::store::audit::list(store, filter).await?;
    Ok(rows.into_iter().map(AuditRecord::from).collect())
}
