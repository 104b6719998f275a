//! `tessera audit verify|tail|export`: the audit log for security teams.
//!
//! `tail` and `export` page through `GET /v1/admin/audit` by sequence number, so
//! a long export runs in bounded memory and never skips or repeats a row while
//! the broker keeps appending. `export` writes one JSON object per line, oldest
//! first — what SIEM collectors ingest.

use super::remote::{admin, said, Remote};
use crate::clock::{parse_rfc3339_ms, rfc3339_ms};
use crate::grammar::parse_duration;
use anyhow::{bail, Context};
use clap::Subcommand;
use serde_json::Value;
use std::io::Write;
use tessera_client::types::{AuditQuery, AuditRecord, AuditVerifyReport, CheckpointsRequest};
use tessera_client::AdminClient;

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    #[command(
        after_help = "Examples:\n  tessera audit verify\n  tessera audit verify --checkpoints /var/lib/witness/checkpoints.jsonl --max-tail 2000\n  tessera audit verify --segments audit-0001.jsonl --segments audit-0002.jsonl --checkpoints witness.jsonl"
    )]
    /// Walk the chain and report the first edited, deleted or reordered row;
    /// with --checkpoints, also prove every checkpointed row is still there
    /// unchanged and name the rows after the last checkpoint as unverified;
    /// with --segments, prove the rows retention pruned from their export.
    Verify {
        /// A checkpoint file kept by a witness (one JSON checkpoint per line,
        /// as `audit.checkpoint_file` writes it).
        #[arg(long)]
        checkpoints: Option<std::path::PathBuf>,
        /// An export written by `audit export --through-checkpoint` (repeat
        /// for several): the rows retention pruned are verified from it.
        #[arg(long)]
        segments: Vec<std::path::PathBuf>,
        /// With --checkpoints: fail when more rows than this follow the last
        /// checkpoint (e.g. twice `audit.checkpoint_rows`): a long unverified
        /// tail means checkpoints stopped, or the witness lost some.
        #[arg(long, requires = "checkpoints")]
        max_tail: Option<i64>,
        #[command(flatten)]
        remote: Remote,
    },
    #[command(
        after_help = "Examples:\n  tessera audit tail -n 50\n  tessera audit tail --run RUN_ID --follow\n  tessera audit tail --event 'capability.*' --user alice"
    )]
    /// Print the most recent rows; with --follow, keep printing new ones.
    Tail {
        /// Only rows about this run.
        #[arg(long)]
        run: Option<String>,
        /// Only rows for this user.
        #[arg(long)]
        user: Option<String>,
        /// Only this event, or a family such as `capability.*`.
        #[arg(long)]
        event: Option<String>,
        /// How many recent rows to print first.
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: i64,
        /// Keep polling for new rows (Ctrl-C to stop).
        #[arg(long)]
        follow: bool,
        #[command(flatten)]
        remote: Remote,
    },
    #[command(
        after_help = "Examples:\n  tessera audit export --since 24h > audit.jsonl\n  tessera audit export --since 2026-11-01T00:00:00Z --until 2026-12-01T00:00:00Z | head\n  tessera audit export --through-checkpoint --output /archive/audit-$(date +%F).jsonl"
    )]
    /// Export rows as JSON lines (one object per row, oldest first) for a SIEM;
    /// with --through-checkpoint, every row the store holds up to its newest
    /// checkpoint, for retention (docs/operations.md).
    Export {
        /// From this time: RFC 3339 (2026-11-29T00:00:00Z) or an age (24h, 7d).
        #[arg(
            long,
            required_unless_present = "through_checkpoint",
            conflicts_with = "through_checkpoint"
        )]
        since: Option<String>,
        /// Until this time (exclusive), same forms as --since.
        #[arg(long, conflicts_with = "through_checkpoint")]
        until: Option<String>,
        /// Only rows about this run.
        #[arg(long, conflicts_with = "through_checkpoint")]
        run: Option<String>,
        /// Every row from the first the store keeps through the newest signed
        /// checkpoint, then that checkpoint's line; written to --output, synced,
        /// then recorded with the broker, which may then prune those rows.
        #[arg(long, requires = "output")]
        through_checkpoint: bool,
        /// The file to write (created, mode 0600; never overwritten).
        #[arg(long, requires = "through_checkpoint")]
        output: Option<std::path::PathBuf>,
        /// Output format; only `jsonl`.
        #[arg(long, default_value = "jsonl")]
        format: String,
        #[command(flatten)]
        remote: Remote,
    },
}

/// Rows per request while exporting.
const EXPORT_PAGE: i64 = 1000;
/// How often `tail --follow` asks for new rows.
const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

pub async fn run(command: AuditCommand) -> anyhow::Result<()> {
    match command {
        AuditCommand::Verify {
            checkpoints,
            segments,
            max_tail,
            remote,
        } => verify(&remote, checkpoints.as_deref(), &segments, max_tail).await,
        AuditCommand::Tail {
            run,
            user,
            event,
            lines,
            follow,
            remote,
        } => {
            let filters = AuditQuery {
                run: run.map(Into::into),
                user,
                event,
                ..AuditQuery::default()
            };
            tail(&remote, filters, lines, follow).await
        }
        AuditCommand::Export {
            since,
            until,
            run,
            format,
            through_checkpoint,
            output,
            remote,
        } => {
            if format != "jsonl" {
                bail!("--format: only jsonl is supported");
            }
            if through_checkpoint {
                let Some(output) = output else {
                    bail!("--through-checkpoint needs --output FILE");
                };
                return super::audit_segments::export_through_checkpoint(&remote, &output).await;
            }
            let Some(since) = since else {
                bail!("--since is required");
            };
            let now_ms = crate::clock::Clock::new().now_ms();
            let filters = AuditQuery {
                since: Some(rfc3339_ms(time_arg("--since", &since, now_ms)?)),
                until: until
                    .map(|u| time_arg("--until", &u, now_ms).map(rfc3339_ms))
                    .transpose()?,
                run: run.map(Into::into),
                ..AuditQuery::default()
            };
            export(&remote, filters).await
        }
    }
}

/// An RFC 3339 time, or an age before now (`24h`, `7d`, `90m`).
fn time_arg(flag: &str, text: &str, now_ms: i64) -> anyhow::Result<i64> {
    if let Some(ms) = parse_rfc3339_ms(text) {
        return Ok(ms);
    }
    let age = parse_duration(text).map_err(|_| {
        anyhow::anyhow!(
            "{flag}: expected an RFC 3339 time (2026-11-29T00:00:00Z) or an age (24h, 7d)"
        )
    })?;
    Ok(now_ms - i64::try_from(age.as_millis()).unwrap_or(i64::MAX / 2))
}

async fn verify(
    remote: &Remote,
    checkpoints: Option<&std::path::Path>,
    segment_files: &[std::path::PathBuf],
    max_tail: Option<i64>,
) -> anyhow::Result<()> {
    let client = admin(remote)?;
    let chain = client.verify_audit().await.map_err(said)?;
    let head = chain.head_seq;
    let mut problems: Vec<String> = vec![];
    if !chain.ok {
        match &chain.first_problem {
            Some(p) => problems.push(format!("row {}: {} ({})", p.seq, p.kind, p.detail)),
            None => problems.push("the broker says the chain does not verify".to_owned()),
        }
    }
    // The rows retention pruned, proved from their export.
    let segments = super::audit_segments::Segments::read(segment_files, &mut problems)?;
    let pruned_note = match (&chain.pruned_through, segments.is_empty()) {
        (None, _) => String::new(),
        (Some(p), true) => format!(
            "; rows 1..{} were pruned by retention and are not verified (pass their export with --segments)",
            p.seq
        ),
        (Some(p), false) => {
            let n = segments.verify_prefix(&client, p, &mut problems).await?;
            format!("; rows 1..{} pruned by retention verified from {n} exported rows", p.seq)
        }
    };
    let (checked, last_checkpoint) = match checkpoints {
        Some(path) => check_checkpoints(&client, path, &segments, &mut problems).await?,
        None => (0, None),
    };
    let tail = last_checkpoint.map(|l| head - l);
    if let (Some(max), Some(t)) = (max_tail, tail) {
        if t > max {
            problems.push(format!(
                "{t} rows follow the last checkpoint, more than --max-tail {max}: checkpoints stopped or were lost"
            ));
        }
    }
    let unverified_prefix = chain.pruned_through.is_some() && segments.is_empty();
    let status = match (problems.is_empty(), checkpoints.is_some(), tail) {
        (false, _, _) => "broken",
        // Rows retention pruned are proved only by their export: without it,
        // never call the log intact.
        _ if unverified_prefix => "unverified_prefix",
        (true, false, _) => "chain_intact_no_checkpoints",
        (true, true, Some(0)) => "intact",
        (true, true, _) => "unverified_tail",
    };
    if remote.json {
        let out = serde_json::json!({
            "status": status,
            "chain": chain,
            "checkpoints_checked": checked,
            "last_checkpoint_seq": last_checkpoint,
            "unverified_tail_rows": tail,
            "problems": problems,
        });
        println!("{out}");
    } else {
        print_verdict(&Verdict {
            status,
            chain: &chain,
            checked,
            last_checkpoint,
            tail,
            problems: &problems,
            pruned_note: &pruned_note,
        });
    }
    if status == "broken" {
        bail!("the audit log does not verify");
    }
    Ok(())
}

/// Checks every checkpoint in the witness's file `path` against the store,
/// adding what does not hold to `problems`: how many were checked, and the
/// newest row a matching one covers.
async fn check_checkpoints(
    client: &AdminClient,
    path: &std::path::Path,
    segments: &super::audit_segments::Segments,
    problems: &mut Vec<String>,
) -> anyhow::Result<(usize, Option<i64>)> {
    let mut checked = 0usize;
    let mut last_checkpoint: Option<i64> = None;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--checkpoints: cannot read {}", path.display()))?;
    let mut tokens = vec![];
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        match serde_json::from_str::<Value>(line)
            .ok()
            .and_then(|v| v["checkpoint"].as_str().map(str::to_owned))
        {
            Some(t) => tokens.push(t),
            None => problems.push(format!(
                "{}:{}: not a checkpoint line",
                path.display(),
                n + 1
            )),
        }
    }
    for chunk in tokens.chunks(100) {
        let request = CheckpointsRequest {
            checkpoints: chunk.to_vec(),
        };
        let v = client.check_checkpoints(&request).await.map_err(said)?;
        for (r, jws) in v.results.into_iter().zip(chunk) {
            checked += 1;
            let seq = r.seq;
            match r.status.as_str() {
                "matches" => last_checkpoint = last_checkpoint.max(Some(seq)),
                // Below the first kept row: proved by the export, if given.
                "pruned" => segments.check_pruned_claim(jws, problems),
                "missing" => problems.push(format!(
                    "checkpointed row {seq} is missing (rows were removed)"
                )),
                "changed" => problems.push(format!("checkpointed row {seq} was changed")),
                "bad_signature" => {
                    problems.push("a checkpoint is not signed by this broker".to_owned())
                }
                other => problems.push(format!("a checkpoint is {other}")),
            }
        }
    }
    if checked == 0 && problems.is_empty() {
        problems.push(format!("{} holds no checkpoint", path.display()));
    }
    Ok((checked, last_checkpoint))
}

/// What `audit verify` found, for people.
struct Verdict<'a> {
    status: &'static str,
    chain: &'a AuditVerifyReport,
    checked: usize,
    last_checkpoint: Option<i64>,
    tail: Option<i64>,
    problems: &'a [String],
    pruned_note: &'a str,
}

fn print_verdict(verdict: &Verdict) {
    let Verdict {
        status,
        chain,
        checked,
        last_checkpoint,
        tail,
        problems,
        pruned_note,
    } = *verdict;
    let head = chain.head_seq;
    let unkeyed = chain.unkeyed_rows;
    let unkeyed_note = if unkeyed > 0 {
        format!(" ({unkeyed} unkeyed rows from before the chain was keyed: they prove order, not authorship)")
    } else {
        String::new()
    };
    match status {
        "broken" => {
            println!("audit log BROKEN:");
            for p in problems {
                println!("  {p}");
            }
        }
        "unverified_prefix" => println!(
            "audit chain links verify: {} rows from row {}, head at {head}, {checked} checkpoints checked{unkeyed_note}{pruned_note}",
            chain.rows,
            chain.pruned_through.as_ref().map_or(1, |p| p.seq + 1)
        ),
        "chain_intact_no_checkpoints" => println!(
            "audit chain links verify: {} rows, head at {head}{unkeyed_note}{pruned_note}; \
             without --checkpoints a truncation of the newest rows cannot be seen",
            chain.rows
        ),
        "intact" => println!(
            "audit log intact: {} rows, head at {head}, {checked} checkpoints match, the last at the head{unkeyed_note}{pruned_note}",
            chain.rows
        ),
        _ => println!(
            "audit log verified through checkpoint at row {}: {checked} checkpoints match; \
             unverified tail of {} rows ({}..{head}) after the last checkpoint{unkeyed_note}{pruned_note}",
            last_checkpoint.unwrap_or(0),
            tail.unwrap_or(0),
            last_checkpoint.unwrap_or(0) + 1
        ),
    }
}

async fn page(
    client: &AdminClient,
    query: &AuditQuery,
) -> anyhow::Result<(Vec<AuditRecord>, Option<i64>)> {
    let v = client.audit(query).await.map_err(said)?;
    Ok((v.events, v.next_cursor))
}

async fn tail(
    remote: &Remote,
    filters: AuditQuery,
    lines: i64,
    follow: bool,
) -> anyhow::Result<()> {
    if !(1..=1000).contains(&lines) {
        bail!("-n/--lines must be 1-1000");
    }
    let client = admin(remote)?;
    let query = AuditQuery {
        order: Some("desc".into()),
        limit: Some(lines),
        ..filters.clone()
    };
    let (mut recent, _) = page(&client, &query).await?;
    recent.reverse();
    let mut last = recent.last().map_or(0, |e| e.seq);
    let mut out = std::io::stdout().lock();
    for e in &recent {
        print_event(&mut out, remote.json, e)?;
    }
    out.flush()?;
    drop(out);
    if !follow {
        return Ok(());
    }
    loop {
        tokio::time::sleep(FOLLOW_EVERY).await;
        loop {
            let query = AuditQuery {
                after: Some(last),
                limit: Some(EXPORT_PAGE),
                ..filters.clone()
            };
            let (events, next) = page(&client, &query).await?;
            let mut out = std::io::stdout().lock();
            for e in &events {
                print_event(&mut out, remote.json, e)?;
                last = e.seq;
            }
            out.flush()?;
            if next.is_none() {
                break;
            }
        }
    }
}

async fn export(remote: &Remote, filters: AuditQuery) -> anyhow::Result<()> {
    let client = admin(remote)?;
    let mut after: Option<i64> = None;
    let mut count = 0u64;
    loop {
        let query = AuditQuery {
            limit: Some(EXPORT_PAGE),
            after,
            ..filters.clone()
        };
        let (events, next) = page(&client, &query).await?;
        let mut out = std::io::stdout().lock();
        for e in &events {
            writeln!(out, "{}", serde_json::to_string(e)?).context("writing to stdout")?;
            count += 1;
        }
        out.flush()?;
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    eprintln!("tessera: exported {count} audit rows");
    Ok(())
}

fn print_event(out: &mut impl Write, json: bool, e: &AuditRecord) -> anyhow::Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_string(e)?)?;
        return Ok(());
    }
    let mut line = format!(
        "{} #{} {} {} actor={}",
        e.at, e.seq, e.event, e.decision, e.actor
    );
    for (key, value) in [
        ("reason", &e.reason),
        ("user", &e.user),
        ("task_id", &e.task_id),
        ("run_id", &e.run_id),
        ("capability_id", &e.capability_id),
        ("action", &e.action),
        ("resource", &e.resource),
        ("detail", &e.detail),
    ] {
        if let Some(v) = value {
            line.push_str(&format!(" {key}={v}"));
        }
    }
    writeln!(out, "{line}")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_absolute_or_ages() {
        let now = 1_800_000_000_000;
        assert_eq!(time_arg("--since", "24h", now).unwrap(), now - 86_400_000);
        assert_eq!(
            time_arg("--since", "2026-11-29T00:00:00Z", now).unwrap(),
            parse_rfc3339_ms("2026-11-29T00:00:00Z").unwrap()
        );
        assert!(time_arg("--since", "last tuesday", now).is_err());
    }
}
