//! The run index trails the issuances on SQLite (`store::run_index`):
//! whatever it has caught up with, a run's list, its end and its retention see
//! exactly the capabilities it was issued, never one of another run's, never
//! one fewer. On PostgreSQL (an index on `run_id`, nothing trails) the same
//! model holds.

use crate::both_stores;
use crate::support::app::{Db, TestApp};
use reqwest::StatusCode;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tessera_broker::store::run_index::{trails, CatchUp};

both_stores!(runs_see_exactly_their_capabilities_wherever_the_index_stands);

/// A small deterministic generator (xorshift), so a failure replays.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

struct Run {
    key: String,
    id: String,
    token: String,
    issued: BTreeSet<String>,
    ended: bool,
}

async fn listed(app: &TestApp, run: &Run) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let caps = app.run_capabilities(&run.key, &run.id).await;
    let ids: BTreeSet<String> = caps
        .iter()
        .map(|c| c["capability_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), caps.len(), "no capability listed twice");
    let states = caps
        .iter()
        .map(|c| {
            (
                c["capability_id"].as_str().unwrap().to_owned(),
                c["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    (ids, states)
}

async fn scalar(app: &TestApp, sql: &'static str, bind: &str) -> i64 {
    let q = app.state.store.sql(sql);
    let row = sqlx::query(&q)
        .bind(bind)
        .fetch_one(app.state.store.pool())
        .await
        .unwrap();
    sqlx::Row::try_get::<i64, _>(&row, "n").unwrap()
}

/// Random interleavings of issuing, catching the index up by a few audit
/// rows, listing and ending runs, checked against a model after every step.
async fn runs_see_exactly_their_capabilities_wherever_the_index_stands(app: TestApp) {
    let mut runs = Vec::new();
    for _ in 0..5 {
        let (key, id, token) = app.run_for("ursula").await;
        runs.push(Run {
            key,
            id,
            token,
            issued: BTreeSet::new(),
            ended: false,
        });
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut ends_with_a_tail = 0;
    for step in 0..120 {
        let r = rng.below(runs.len());
        match rng.below(10) {
            0..=4 if !runs[r].ended => {
                let cap = app
                    .capability_ok(&runs[r].token, "read", &format!("svc-reports:r/{step}"))
                    .await;
                let id = cap["capability_id"].as_str().unwrap().to_owned();
                runs[r].issued.insert(id);
            }
            5 | 6 => {
                let rows = 1 + rng.below(4) as i64;
                app.state
                    .store
                    .writer()
                    .submit(CatchUp { rows })
                    .await
                    .unwrap();
            }
            7 if !runs[r].ended => {
                if trails(app.state.store.dialect()) {
                    let indexed = scalar(
                        &app,
                        "SELECT COUNT(*) AS n FROM run_capabilities WHERE run_id = $1",
                        &runs[r].id,
                    )
                    .await as usize;
                    if indexed < runs[r].issued.len() {
                        ends_with_a_tail += 1;
                    }
                }
                let end: Value = app
                    .end_run(&runs[r].key, &runs[r].id)
                    .await
                    .json()
                    .await
                    .unwrap();
                assert_eq!(
                    end["revoked"]["capabilities"].as_u64().unwrap() as usize,
                    runs[r].issued.len(),
                    "step {step}: the end revokes every capability the run was issued"
                );
                runs[r].ended = true;
                let live = scalar(
                    &app,
                    "SELECT COUNT(*) AS n FROM capabilities WHERE run_id = $1 AND revoked_at IS NULL",
                    &runs[r].id,
                )
                .await;
                assert_eq!(live, 0, "step {step}: nothing of an ended run stays live");
            }
            _ => {}
        }
        // Every run lists exactly its own, in the state the model says.
        for run in &runs {
            let (ids, states) = listed(&app, run).await;
            assert_eq!(ids, run.issued, "step {step}: run {} lists its own", run.id);
            let want = if run.ended { "revoked" } else { "active" };
            assert!(
                states.values().all(|s| s == want),
                "step {step}: {states:?} should all be {want}"
            );
        }
    }
    assert_eq!(
        total_issued(&runs),
        app.count("capabilities").await as usize
    );
    if !trails(app.state.store.dialect()) {
        return;
    }
    assert!(
        ends_with_a_tail > 0,
        "some run ended while its capabilities were not all indexed"
    );
    // Caught up: the index holds every capability once, under its own run.
    app.state
        .store
        .writer()
        .submit(CatchUp { rows: i64::MAX })
        .await
        .unwrap();
    let total = app.count("capabilities").await;
    assert_eq!(app.count("run_capabilities").await, total);
    let matching: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM run_capabilities rc \
         JOIN capabilities c ON c.id = rc.capability_id AND c.run_id = rc.run_id",
    )
    .fetch_one(app.state.store.pool())
    .await
    .unwrap();
    assert_eq!(matching, total);
}

fn total_issued(runs: &[Run]) -> usize {
    runs.iter().map(|r| r.issued.len()).sum()
}

/// The background job catches the index up to the audit head by itself
/// (SQLite: on PostgreSQL nothing trails and the job does not run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_indexes_what_was_issued() {
    let app = TestApp::spawn(Db::Sqlite).await;
    tokio::spawn(tessera_broker::jobs::run_index::run(app.state.clone()));
    let (_, _, token) = app.run_for("ursula").await;
    for i in 0..7 {
        let resp = app
            .capability(&token, "read", &format!("svc-reports:j/{i}"))
            .await;
        assert_eq!(resp.status(), StatusCode::CREATED);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mark: i64 = sqlx::query_scalar("SELECT through_seq FROM run_capabilities_mark")
            .fetch_one(app.state.store.pool())
            .await
            .unwrap();
        if app.count("run_capabilities").await == 7
            && mark >= app.state.store.writer().audit_high_water()
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the job did not catch up (mark {mark})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
