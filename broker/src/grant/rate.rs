//! What a decision is charged: the run's share of the server-wide cap
//! (`limits.max_rate`) always, and the satisfied permit's `@rate` when it has
//! one. A refusal pays the server-wide share too, so a tool looping on denied
//! requests is throttled like any other.

use crate::app::App;
use crate::grammar::Rate;
use crate::store::charges::RateCharge;
use crate::store::runs::RunRecord;

/// The GCRA charge of `rate` against `bucket`.
pub fn charge(bucket: String, rate: &Rate) -> RateCharge {
    let window_us = i64::try_from(rate.per.as_micros()).unwrap_or(i64::MAX / 4);
    RateCharge {
        bucket,
        interval_us: (window_us / i64::from(rate.count.max(1))).max(1),
        window_us,
    }
}

/// The run's charge against the server-wide rate cap (`limits.max_rate`).
pub fn server(app: &App, run: &RunRecord) -> RateCharge {
    charge(format!("run:{}", run.id), &app.config.limits.max_rate)
}

/// Every charge of an allowed decision: the server's, and the permit's `@rate`.
pub fn allowed(
    app: &App,
    run: &RunRecord,
    permit_rate: Option<&(Rate, String)>,
) -> Vec<RateCharge> {
    let mut rate = vec![server(app, run)];
    if let Some((r, policy_id)) = permit_rate {
        rate.push(charge(format!("run:{}:policy:{policy_id}", run.id), r));
    }
    rate
}
