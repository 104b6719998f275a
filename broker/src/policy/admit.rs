//! What a run and a capability request must pass before policy decides them.
//!
//! Why one place: the broker (`api/runs.rs`, `api/capabilities.rs`) and every
//! policy tool (`tessera policy explain`, `policy test`, simulation) must refuse
//! the same requests with the same codes. A second copy of a check drifts: a case
//! file that passes for a request the broker would refuse tests nothing.
//!
//! Invariants: names follow [`crate::names`], resources and actions
//! [`crate::resource::parse`] (which includes the canonical-path rule), and the
//! action must be declared in the policy schema; the limits on labels and task
//! attributes are the broker's.

use std::collections::BTreeMap;
use tessera_client::types::ErrorCode;

use super::PolicyEngine;
use crate::config::BackendConfig;
use crate::names;
use crate::resource::{self, Resource, ResourceError, MAX_ACTION_LEN};

/// Most labels a run may carry.
pub const MAX_LABELS: usize = 32;
/// Most task attributes a run may carry.
pub const MAX_ATTRIBUTES: usize = 32;

/// A refused request: the field, the stable error code and a message safe to
/// show the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub field: &'static str,
    pub code: ErrorCode,
    pub message: String,
}

fn refused(field: &'static str, code: ErrorCode, message: impl Into<String>) -> Refused {
    Refused {
        field,
        code,
        message: message.into(),
    }
}

/// The fields of a run as a runtime sends them.
pub struct RunFields<'a> {
    pub user: &'a str,
    pub task_id: &'a str,
    pub task_kind: &'a str,
    pub task_attributes: &'a BTreeMap<String, String>,
    pub labels: &'a [String],
}

/// The checks a run must pass when a runtime starts it.
pub fn check_run(run: &RunFields<'_>) -> Result<(), Refused> {
    if !names::is_user(run.user) {
        return Err(refused(
            "user",
            ErrorCode::InvalidUser,
            "user must be 1-128 of [A-Za-z0-9._@+-]",
        ));
    }
    if !names::is_task_id(run.task_id) {
        return Err(refused(
            "task.id",
            ErrorCode::InvalidTask,
            "task.id must be 1-128 of [A-Za-z0-9._:-]",
        ));
    }
    if !names::is_kind_or_label(run.task_kind) {
        return Err(refused(
            "task.kind",
            ErrorCode::InvalidTask,
            "task.kind must be 1-64 of [a-z0-9._:-]",
        ));
    }
    if run.task_attributes.len() > MAX_ATTRIBUTES
        || !run
            .task_attributes
            .iter()
            .all(|(k, v)| names::is_attribute_key(k) && names::is_attribute_value(v))
    {
        return Err(refused(
            "task.attributes",
            ErrorCode::InvalidTask,
            "task.attributes: at most 32, keys 1-64 of [A-Za-z0-9._-], values at most 256 bytes without control, bidirectional-control, line-separator or invisible characters",
        ));
    }
    if run.labels.len() > MAX_LABELS || !run.labels.iter().all(|l| names::is_kind_or_label(l)) {
        return Err(refused(
            "labels",
            ErrorCode::InvalidLabels,
            "labels: at most 32, each 1-64 of [a-z0-9._:-]",
        ));
    }
    Ok(())
}

/// The checks a capability request must pass before policy sees it: the action's
/// charset, the resource against the backend kind's grammar (canonical paths
/// included) and the action against its vocabulary, then the schema.
pub fn check_capability<'a>(
    engine: &PolicyEngine,
    backends: &BTreeMap<String, BackendConfig>,
    action: &str,
    resource: &'a str,
) -> Result<Resource<'a>, Refused> {
    if action.is_empty()
        || action.len() > MAX_ACTION_LEN
        || !action.chars().all(|c| c.is_ascii_graphic())
    {
        return Err(refused(
            "action",
            ErrorCode::InvalidAction,
            "action must be 1-64 printable ASCII characters",
        ));
    }
    let res = resource::parse(resource, action, backends).map_err(|e| {
        let field = if e == ResourceError::Action {
            "action"
        } else {
            "resource"
        };
        refused(field, e.code(), e.to_string())
    })?;
    if !engine.is_known_action(action) {
        return Err(refused(
            "action",
            ErrorCode::UnknownAction,
            "action is not declared in the policy schema",
        ));
    }
    Ok(res)
}
