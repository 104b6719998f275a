//! The audit row of a run's decision, begun one way at every door: the run,
//! its user and task, the action and resource as asked (bounded).

use crate::audit::AuditEvent;
use crate::store::runs::RunRecord;

/// Longest action and resource an audit row keeps of a request.
const MAX_ACTION: usize = 64;
const MAX_RESOURCE: usize = 512;

/// `event` of `run` for `action` on `resource`, allowed until a refusal says otherwise.
pub fn for_run(run: &RunRecord, event: &'static str, action: &str, resource: &str) -> AuditEvent {
    let mut ev = AuditEvent::new(event, format!("run:{}", run.id), "allow");
    ev.run_id = Some(run.id.clone());
    ev.user = Some(run.user.clone());
    ev.task_id = Some(run.task_id.clone());
    ev.action = Some(bounded(action, MAX_ACTION));
    ev.resource = Some(bounded(resource, MAX_RESOURCE));
    ev
}

fn bounded(s: &str, max: usize) -> String {
    if s.len() <= max {
        s.to_owned()
    } else {
        s.chars().take(max).collect()
    }
}
