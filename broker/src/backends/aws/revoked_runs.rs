//! `deny_revoked_runs = true`: when a run ends, its AWS sessions stop working now,
//! not at their expiry.
//!
//! STS sessions cannot be deleted. What can be changed at once is the role they
//! were assumed from: this module keeps one inline role policy,
//! [`POLICY_NAME`], whose statements deny everything to sessions tagged with an
//! ended run (`aws:PrincipalTag/tessera:run`). IAM applies it to sessions that
//! already exist (after IAM's usual propagation delay, seconds).
//!
//! Bounded: a run needs listing only while one of its sessions could still do
//! anything, i.e. until its capability expired (after that the session policy's
//! `DateLessThan` denies everything anyway) plus [`CLOCK_SKEW_SECS`]. Runs are
//! grouped in statements by that deadline rounded up to [`BUCKET_SECS`]
//! (`Sid` = `TesseraRevokedRunsUntil<unix>`); every update drops the statements
//! whose deadline has passed. Statements this module did not write are kept.
//!
//! Concurrency: updates are read-modify-write of one document. Within a broker
//! they are serialised by a lock; across replicas two updates can race, so each
//! update reads the document back and retries until its runs are present. This
//! narrows the window without closing it (IAM has no compare-and-set); the
//! session policy's expiry stays the hard bound.

use super::policy_doc::{counted_chars, Effect, OneOrMany, PolicyDocument, Statement, VERSION};
use std::collections::{BTreeMap, BTreeSet};

pub const POLICY_NAME: &str = "tessera-revoked-runs";
pub const TAG_KEY: &str = "aws:PrincipalTag/tessera:run";
pub const SID_PREFIX: &str = "TesseraRevokedRunsUntil";
pub const BUCKET_SECS: i64 = 300;
pub const CLOCK_SKEW_SECS: i64 = 60;
/// IAM's limit for all inline policies of a role together (characters, no whitespace).
pub const MAX_ROLE_POLICY_CHARS: usize = 10_240;

/// The lease's reference, chosen at exchange: the run and the capability's expiry.
pub fn lease_ref(run_id: &str, capability_exp: i64) -> String {
    format!("tessera:run={run_id};until={capability_exp}")
}

/// The run id and the time until which its sessions must stay denied.
pub fn parse_ref(r: &str) -> Option<(&str, i64)> {
    let rest = r.strip_prefix("tessera:run=")?;
    let (run, until) = rest.split_once(";until=")?;
    Some((run, until.parse().ok()?))
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MergeError {
    #[error("the revoked-runs role policy would be {0} characters; IAM allows {MAX_ROLE_POLICY_CHARS} for all inline policies of a role")]
    TooLarge(usize),
}

/// Adds `runs` (`(run id, deny until)`) to `current`, drops expired statements.
/// Returns `None` when nothing is left (the policy should be deleted).
pub fn merge(
    current: Option<&PolicyDocument>,
    runs: &[(String, i64)],
    now: i64,
) -> Result<Option<PolicyDocument>, MergeError> {
    let mut buckets: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
    let mut foreign = Vec::new();
    for st in current.map(|d| d.statement.as_slice()).unwrap_or_default() {
        match ours(st) {
            Some((until, members)) => buckets.entry(until).or_default().extend(members),
            None => foreign.push(st.clone()),
        }
    }
    for (run, until) in runs {
        let deadline = until + CLOCK_SKEW_SECS;
        let bucket = (deadline + BUCKET_SECS - 1).div_euclid(BUCKET_SECS) * BUCKET_SECS;
        buckets.entry(bucket).or_default().insert(run.clone());
    }
    buckets.retain(|until, members| *until > now && !members.is_empty());
    let mut statements = foreign;
    for (until, members) in buckets {
        let statement = Statement {
            sid: Some(format!("{SID_PREFIX}{until}")),
            effect: Effect::Deny,
            action: OneOrMany::One("*".to_owned()),
            resource: OneOrMany::One("*".to_owned()),
            condition: BTreeMap::from([(
                "StringEquals".to_owned(),
                BTreeMap::from([(
                    TAG_KEY.to_owned(),
                    OneOrMany::Many(members.into_iter().collect()),
                )]),
            )]),
        };
        statements.push(serde_json::to_value(statement).unwrap_or(serde_json::Value::Null));
    }
    if statements.is_empty() {
        return Ok(None);
    }
    let doc = PolicyDocument {
        version: VERSION.to_owned(),
        statement: statements,
    };
    let chars = counted_chars(&doc.to_json());
    if chars > MAX_ROLE_POLICY_CHARS {
        return Err(MergeError::TooLarge(chars));
    }
    Ok(Some(doc))
}

/// A statement this module wrote: its deadline and runs.
fn ours(st: &serde_json::Value) -> Option<(i64, Vec<String>)> {
    let st: Statement = serde_json::from_value(st.clone()).ok()?;
    let until: i64 = st.sid.as_deref()?.strip_prefix(SID_PREFIX)?.parse().ok()?;
    let values = st.condition.get("StringEquals")?.get(TAG_KEY)?;
    Some((
        until,
        match values {
            OneOrMany::One(v) => vec![v.clone()],
            OneOrMany::Many(v) => v.clone(),
        },
    ))
}

/// True when every run of `runs` is denied by `doc`.
pub fn covers(doc: Option<&PolicyDocument>, runs: &[(String, i64)], now: i64) -> bool {
    let denied: BTreeSet<String> = doc
        .map(|d| d.statement.as_slice())
        .unwrap_or_default()
        .iter()
        .filter_map(ours)
        .filter(|(until, _)| *until > now)
        .flat_map(|(_, members)| members)
        .collect();
    runs.iter().all(|(run, _)| denied.contains(run))
}

/// Parses a role policy as IAM returns it: URL-encoded JSON (RFC 3986) on AWS,
/// plain JSON on some compatible servers.
pub fn parse_document(text: &str) -> Option<PolicyDocument> {
    serde_json::from_str(text).ok().or_else(|| {
        let decoded = percent_encoding::percent_decode_str(text)
            .decode_utf8()
            .ok()?;
        serde_json::from_str(&decoded).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(v: &[(&str, i64)]) -> Vec<(String, i64)> {
        v.iter().map(|(r, t)| ((*r).to_owned(), *t)).collect()
    }

    #[test]
    fn refs_round_trip() {
        let r = lease_ref("0190-abc", 1_800_000_000);
        assert_eq!(parse_ref(&r), Some(("0190-abc", 1_800_000_000)));
        assert_eq!(parse_ref("garbage"), None);
    }

    #[test]
    fn adds_groups_and_prunes() {
        let now = 1_000_000;
        let doc = merge(
            None,
            &runs(&[("r1", now + 100), ("r2", now + 110), ("r3", now + 900)]),
            now,
        )
        .unwrap()
        .unwrap();
        assert_eq!(doc.statement.len(), 2, "{doc:?}");
        assert!(covers(
            Some(&doc),
            &runs(&[("r1", 0), ("r2", 0), ("r3", 0)]),
            now
        ));
        let json = doc.to_json();
        assert!(json.contains("\"Effect\":\"Deny\""));
        assert!(json.contains("aws:PrincipalTag/tessera:run"));
        // Later: r1/r2's bucket has passed, r3's has not.
        let later = now + 100 + CLOCK_SKEW_SECS + BUCKET_SECS;
        let doc2 = merge(Some(&doc), &[], later).unwrap().unwrap();
        assert_eq!(doc2.statement.len(), 1);
        assert!(covers(Some(&doc2), &runs(&[("r3", 0)]), later));
        assert!(!covers(Some(&doc2), &runs(&[("r1", 0)]), later));
        // Much later: nothing left, the policy goes.
        assert_eq!(merge(Some(&doc2), &[], now + 10_000).unwrap(), None);
    }

    #[test]
    fn foreign_statements_survive_and_adding_twice_is_idempotent() {
        let now = 5_000;
        let foreign = serde_json::json!({"Sid": "Admin", "Effect": "Deny", "Action": "s3:DeleteBucket", "Resource": "*"});
        let base = PolicyDocument {
            version: VERSION.to_owned(),
            statement: vec![foreign.clone()],
        };
        let once = merge(Some(&base), &runs(&[("r1", now + 10)]), now)
            .unwrap()
            .unwrap();
        let twice = merge(Some(&once), &runs(&[("r1", now + 10)]), now)
            .unwrap()
            .unwrap();
        assert_eq!(once, twice);
        assert_eq!(once.statement[0], foreign);
    }

    #[test]
    fn stays_within_the_iam_limit() {
        let now = 0;
        let many: Vec<(String, i64)> = (0..400)
            .map(|i| (format!("0190c7a2-0000-7000-8000-{i:012}"), 100))
            .collect();
        assert!(matches!(
            merge(None, &many, now),
            Err(MergeError::TooLarge(_))
        ));
    }

    #[test]
    fn reads_url_encoded_documents() {
        let doc = merge(None, &runs(&[("r1", 100)]), 0).unwrap().unwrap();
        let json = doc.to_json();
        let encoded =
            percent_encoding::utf8_percent_encode(&json, percent_encoding::NON_ALPHANUMERIC)
                .to_string();
        assert_eq!(parse_document(&encoded), Some(doc.clone()));
        assert_eq!(parse_document(&json), Some(doc));
    }
}
