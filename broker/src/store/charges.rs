//! What every recorded decision costs, applied in the writer's transaction:
//! its run is re-checked, its rate buckets charged, the approval it redeems
//! taken, and its audit row written — or, when the store refuses it, its
//! refusal written instead. An issuance ([`super::capabilities`]) and a
//! decision that issues nothing ([`super::decisions`]) are charged here alike,
//! so a door cannot be cheaper to loop on than another.
//!
//! Invariants: each charge is decided in order exactly as if applied alone
//! (run active? every bucket admitted? approval still approved and
//! unredeemed?), against state read inside the transaction; a refused charge
//! changes no bucket and redeems nothing.

use super::query::stmt;
use super::rate;
use super::run_state::RunState;
use super::sql::ROWS_PER_INSERT;
use super::writer::WriteCtx;
use crate::audit::{events, AuditEvent};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// One GCRA charge (microseconds): `bucket` may take one request every
/// `interval_us`, with bursts up to `window_us` worth.
#[derive(Debug, Clone)]
pub struct RateCharge {
    pub bucket: String,
    pub interval_us: i64,
    pub window_us: i64,
}

/// The events a door's refusals are recorded as when the store refuses them:
/// the SIEM rule for egress must not have to know the capability events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefusedAs {
    /// An ended run, a redeemed approval.
    pub denied: &'static str,
    /// A rate.
    pub rate_limited: &'static str,
}

impl RefusedAs {
    pub const CAPABILITY: RefusedAs = RefusedAs {
        denied: events::CAPABILITY_DENIED,
        rate_limited: events::CAPABILITY_RATE_LIMITED,
    };
    pub const EGRESS: RefusedAs = RefusedAs {
        denied: events::EGRESS_DENIED,
        rate_limited: events::EGRESS_DENIED,
    };
}

/// One decision to charge.
pub struct Charge<'a> {
    pub rate: &'a [RateCharge],
    /// Its audit row; names the run (`run_id`).
    pub audit: &'a Arc<AuditEvent>,
    /// `(approval, for)`: the approved approval this decision redeems, and the
    /// id it is redeemed for (a capability, or the decision's own).
    pub redeems: Option<(&'a str, &'a str)>,
    pub refused_as: RefusedAs,
}

/// What charging one decision did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charged {
    /// Charged, its approval redeemed, its audit row written.
    Applied,
    RunInactive(RunState),
    RateLimited {
        retry_after_us: i64,
    },
    ApprovalUnavailable,
}

/// Runs `SELECT … WHERE <column> IN (…)` over `keys`, in chunks.
async fn select_in(
    ctx: &mut WriteCtx<'_>,
    select_where: &str,
    keys: BTreeSet<&str>,
) -> Result<Vec<super::query::Row>, sqlx::Error> {
    let keys: Vec<&str> = keys.into_iter().collect();
    let mut rows = Vec::new();
    for chunk in keys.chunks(ROWS_PER_INSERT) {
        let q = format!(
            "{select_where} IN ({})",
            super::sql::in_list(ctx.dialect, chunk.len())
        );
        let mut query = stmt(&q);
        for key in chunk {
            query = query.bind(*key);
        }
        rows.extend(query.fetch_all(&mut ctx.conn).await?);
    }
    Ok(rows)
}

/// The audit row of a refused charge: no capability id, the given reason.
fn refused(ev: &AuditEvent, event: &'static str, reason: String) -> Arc<AuditEvent> {
    let mut ev = ev.clone();
    ev.event = event;
    ev.decision = "deny";
    ev.capability_id = None;
    ev.reason = Some(reason);
    Arc::new(ev)
}

/// Charges `charges` together: one query for their runs, one for their rate
/// buckets, one multi-row UPSERT for the buckets they moved. Returns one
/// outcome per charge, in order.
pub async fn apply(
    ctx: &mut WriteCtx<'_>,
    charges: &[Charge<'_>],
) -> Result<Vec<Charged>, sqlx::Error> {
    if charges.is_empty() {
        return Ok(Vec::new());
    }
    let now = ctx.now();
    let now_us = ctx.now_ms * 1000;

    let run_ids: BTreeSet<&str> = charges
        .iter()
        .filter_map(|c| c.audit.run_id.as_deref())
        .collect();
    let mut runs: HashMap<String, RunState> = HashMap::new();
    for row in select_in(
        ctx,
        "SELECT id, ended_at, expires_at FROM runs WHERE id",
        run_ids,
    )
    .await?
    {
        let state = RunState::of(row.try_get("ended_at")?, row.try_get("expires_at")?, now);
        runs.insert(row.try_get("id")?, state);
    }
    let mut tats = read_buckets(ctx, charges.iter().flat_map(|c| c.rate)).await?;

    let mut dirty: BTreeSet<String> = BTreeSet::new();
    let mut outcomes: Vec<Charged> = Vec::with_capacity(charges.len());
    for c in charges {
        let run_id = c.audit.run_id.as_deref();
        let state = run_id
            .and_then(|id| runs.get(id))
            .copied()
            .unwrap_or(RunState::Ended);
        if state != RunState::Active {
            let reason = format!("run_{}", state.as_str());
            ctx.audit_shared(refused(c.audit, c.refused_as.denied, reason))
                .await?;
            outcomes.push(Charged::RunInactive(state));
            continue;
        }
        let next = match rate::charge(now_us, &buckets_of(c.rate, &tats)) {
            Ok(next) => next,
            Err(retry_after_us) => {
                ctx.audit_shared(refused(
                    c.audit,
                    c.refused_as.rate_limited,
                    "rate_limited".into(),
                ))
                .await?;
                outcomes.push(Charged::RateLimited { retry_after_us });
                continue;
            }
        };
        if let (Some((approval, redeemed_for)), Some(run_id)) = (c.redeems, run_id) {
            if !redeem(ctx, approval, run_id, redeemed_for, now).await? {
                ctx.audit_shared(refused(
                    c.audit,
                    c.refused_as.denied,
                    "approval_unavailable".into(),
                ))
                .await?;
                outcomes.push(Charged::ApprovalUnavailable);
                continue;
            }
        }
        for (r, tat) in c.rate.iter().zip(next) {
            tats.insert(r.bucket.clone(), tat);
            dirty.insert(r.bucket.clone());
        }
        ctx.audit_shared(c.audit.clone()).await?;
        outcomes.push(Charged::Applied);
    }

    let moved: Vec<(&str, i64)> = dirty
        .iter()
        .map(|b| (b.as_str(), tats.get(b).copied().unwrap_or(now_us)))
        .collect();
    write_buckets(ctx, &moved).await?;
    Ok(outcomes)
}

/// The theoretical arrival times of `rate`'s buckets, as stored.
async fn read_buckets(
    ctx: &mut WriteCtx<'_>,
    rate: impl Iterator<Item = &RateCharge>,
) -> Result<HashMap<String, i64>, sqlx::Error> {
    let keys: BTreeSet<&str> = rate.map(|r| r.bucket.as_str()).collect();
    let mut tats = HashMap::new();
    for row in select_in(
        ctx,
        "SELECT bucket, tat_us FROM rate_limits WHERE bucket",
        keys,
    )
    .await?
    {
        tats.insert(row.try_get("bucket")?, row.try_get("tat_us")?);
    }
    Ok(tats)
}

/// `rate` as GCRA buckets, at the arrival times `tats` holds.
fn buckets_of(rate: &[RateCharge], tats: &HashMap<String, i64>) -> Vec<rate::Bucket> {
    rate.iter()
        .map(|r| rate::Bucket {
            tat_us: tats.get(&r.bucket).copied(),
            interval_us: r.interval_us,
            window_us: r.window_us,
        })
        .collect()
}

/// Stores the buckets' new arrival times, in multi-row UPSERTs.
async fn write_buckets(ctx: &mut WriteCtx<'_>, moved: &[(&str, i64)]) -> Result<(), sqlx::Error> {
    for chunk in moved.chunks(ROWS_PER_INSERT) {
        let q = format!(
            "INSERT INTO rate_limits (bucket, tat_us) VALUES {} \
             ON CONFLICT (bucket) DO UPDATE SET tat_us = excluded.tat_us",
            super::sql::values_placeholders(ctx.dialect, chunk.len(), 2)
        );
        let mut query = stmt(&q);
        for (bucket, tat) in chunk {
            query = query.bind(*bucket).bind(*tat);
        }
        query.execute(&mut ctx.conn).await?;
    }
    Ok(())
}

/// Charges `rate` alone, for a request that records no decision row of its
/// own (an approval asked for again while it is open): `Err` with the wait in
/// microseconds when a bucket is over, and then nothing moved.
pub async fn rate_only(
    ctx: &mut WriteCtx<'_>,
    rate: &[RateCharge],
) -> Result<Result<(), i64>, sqlx::Error> {
    if rate.is_empty() {
        return Ok(Ok(()));
    }
    let now_us = ctx.now_ms * 1000;
    let tats = read_buckets(ctx, rate.iter()).await?;
    let next = match rate::charge(now_us, &buckets_of(rate, &tats)) {
        Ok(next) => next,
        Err(retry_after_us) => return Ok(Err(retry_after_us)),
    };
    let moved: Vec<(&str, i64)> = rate.iter().map(|r| r.bucket.as_str()).zip(next).collect();
    write_buckets(ctx, &moved).await?;
    Ok(Ok(()))
}

/// Redeems approval `id` for capability `capability_id` of `run_id`: true when
/// it was approved, unexpired, unredeemed and that run's (now redeemed).
async fn redeem(
    ctx: &mut WriteCtx<'_>,
    id: &str,
    run_id: &str,
    capability_id: &str,
    now: i64,
) -> Result<bool, sqlx::Error> {
    let q = ctx.sql(
        "UPDATE approvals SET capability_id = $1 WHERE id = $2 AND run_id = $3 \
         AND status = 'approved' AND capability_id IS NULL AND expires_at > $4",
    );
    Ok(stmt(&q)
        .bind(capability_id)
        .bind(id)
        .bind(run_id)
        .bind(now)
        .execute(&mut ctx.conn)
        .await?
        .rows_affected()
        == 1)
}
