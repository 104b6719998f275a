//! Recomputing the audit chain from the rows, as a test's own check of it.

use crate::support::app::TestApp;
use sqlx::Row;
use tessera_broker::audit::{chain_mac, AuditEvent, GENESIS_HASH};

/// Recomputes every hash of the audit chain; returns the events in order.
/// Also checks that every row is stored lean: no `prev_hash`, and no actor
/// where the actor is the row's run (both are derived when read).
pub async fn verify_audit_chain(app: &TestApp) -> Vec<String> {
    let raw = sqlx::query("SELECT seq, actor, run_id, prev_hash FROM audit ORDER BY seq")
        .fetch_all(app.state.store.pool())
        .await
        .unwrap();
    for r in &raw {
        let seq: i64 = r.try_get("seq").unwrap();
        let stored_prev: Option<String> = r.try_get("prev_hash").unwrap();
        assert_eq!(stored_prev, None, "row {seq} stores its prev_hash");
        let actor: Option<String> = r.try_get("actor").unwrap();
        let run: Option<String> = r.try_get("run_id").unwrap();
        if let (Some(actor), Some(run)) = (&actor, &run) {
            assert_ne!(
                actor,
                &format!("run:{run}"),
                "row {seq} stores its run as actor"
            );
        }
        assert!(actor.is_some() || run.is_some(), "row {seq} has no actor");
    }
    let q = format!(
        "SELECT {} FROM audit a ORDER BY a.seq",
        tessera_broker::store::audit::SELECT
    );
    let rows = sqlx::query(&q)
        .fetch_all(app.state.store.pool())
        .await
        .unwrap();
    let events: Vec<String> = rows
        .iter()
        .map(|r| r.try_get::<String, _>("event").unwrap())
        .collect();
    let key = app
        .state
        .store
        .writer()
        .audit_key()
        .expect("audit key")
        .clone();
    let mut prev = GENESIS_HASH.to_owned();
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(
            r.try_get::<Option<String>, _>("key_id").unwrap().as_deref(),
            Some(key.id.as_str()),
            "every new row is keyed"
        );
        let seq: i64 = r.try_get("seq").unwrap();
        assert_eq!(seq, i as i64 + 1);
        assert_eq!(r.try_get::<String, _>("prev_hash").unwrap(), prev);
        let ev = audit_event_of(r);
        let h = chain_mac(&key, &prev, seq, r.try_get("at_ms").unwrap(), &ev);
        assert_eq!(r.try_get::<String, _>("hash").unwrap(), h, "row {seq}");
        prev = h;
    }
    let head = sqlx::query("SELECT seq, hash FROM audit_head")
        .fetch_one(app.state.store.pool())
        .await
        .unwrap();
    assert_eq!(head.try_get::<i64, _>("seq").unwrap(), rows.len() as i64);
    assert_eq!(head.try_get::<String, _>("hash").unwrap(), prev);
    events
}

/// An audit row read back as the event it was written from (what its link covers).
pub fn audit_event_of(r: &sqlx::any::AnyRow) -> AuditEvent {
    AuditEvent {
        event: Box::leak(r.try_get::<String, _>("event").unwrap().into_boxed_str()),
        actor: r.try_get("actor").unwrap(),
        decision: Box::leak(r.try_get::<String, _>("decision").unwrap().into_boxed_str()),
        reason: r.try_get("reason").unwrap(),
        run_id: r.try_get("run_id").unwrap(),
        capability_id: r.try_get("capability_id").unwrap(),
        user: r.try_get("user_name").unwrap(),
        action: r.try_get("action").unwrap(),
        resource: r.try_get("resource").unwrap(),
        request_id: r.try_get("request_id").unwrap(),
        detail: r.try_get("detail").unwrap(),
        task_id: r.try_get("task_id").unwrap(),
    }
}
