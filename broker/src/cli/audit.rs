//! `tessera audit verify|tail|export`: the audit log for security teams.
//!
//! `tail` and `export` page through `GET /v1/admin/audit` by sequence number, so
//! a long export runs in bounded memory and never skips or repeats a row while
//! the broker keeps appending. `export` writes one JSON object per line, oldest
//! first — what SIEM collectors ingest.

use super::remote::{call, call_query};
use super::{AuditCommand, Remote};
use crate::clock::{parse_rfc3339_ms, rfc3339_ms};
use crate::grammar::parse_duration;
use anyhow::{bail, Context};
use serde_json::Value;
use std::io::Write;

/// Rows per request while exporting.
const EXPORT_PAGE: i64 = 1000;
/// How often `tail --follow` asks for new rows.
const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

pub async fn run(command: AuditCommand) -> anyhow::Result<()> {
    match command {
        AuditCommand::Verify {
            checkpoints,
            max_tail,
            remote,
        } => verify(&remote, checkpoints.as_deref(), max_tail).await,
        AuditCommand::Tail {
            run,
            user,
            event,
            lines,
            follow,
            remote,
        } => {
            let mut filters = Vec::new();
            filters.extend(run.map(|r| ("run", r)));
            filters.extend(user.map(|u| ("user", u)));
            filters.extend(event.map(|e| ("event", e)));
            tail(&remote, filters, lines, follow).await
        }
        AuditCommand::Export {
            since,
            until,
            run,
            format,
            remote,
        } => {
            if format != "jsonl" {
                bail!("--format: only jsonl is supported");
            }
            let now_ms = crate::clock::Clock::new().now_ms();
            let mut filters = vec![("since", rfc3339_ms(time_arg("--since", &since, now_ms)?))];
            if let Some(u) = until {
                filters.push(("until", rfc3339_ms(time_arg("--until", &u, now_ms)?)));
            }
            filters.extend(run.map(|r| ("run", r)));
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
    max_tail: Option<i64>,
) -> anyhow::Result<()> {
    let chain = call(remote, reqwest::Method::GET, "/v1/admin/audit/verify", None).await?;
    let head = chain["head_seq"].as_i64().unwrap_or(0);
    let unkeyed = chain["unkeyed_rows"].as_i64().unwrap_or(0);
    let mut problems: Vec<String> = vec![];
    if chain["ok"] != true {
        let p = &chain["first_problem"];
        problems.push(format!(
            "row {}: {} ({})",
            p["seq"],
            p["kind"].as_str().unwrap_or(""),
            p["detail"].as_str().unwrap_or("")
        ));
    }
    let mut checked = 0usize;
    let mut last_checkpoint: Option<i64> = None;
    if let Some(path) = checkpoints {
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
            let body = serde_json::json!({ "checkpoints": chunk });
            let v = call(
                remote,
                reqwest::Method::POST,
                "/v1/admin/audit/checkpoints/check",
                Some(body),
            )
            .await?;
            for r in v["results"].as_array().cloned().unwrap_or_default() {
                checked += 1;
                let seq = r["seq"].as_i64().unwrap_or(0);
                match r["status"].as_str().unwrap_or("") {
                    "matches" => last_checkpoint = last_checkpoint.max(Some(seq)),
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
    }
    let tail = last_checkpoint.map(|l| head - l);
    if let (Some(max), Some(t)) = (max_tail, tail) {
        if t > max {
            problems.push(format!(
                "{t} rows follow the last checkpoint, more than --max-tail {max}: checkpoints stopped or were lost"
            ));
        }
    }
    let status = match (problems.is_empty(), checkpoints.is_some(), tail) {
        (false, _, _) => "broken",
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
        let unkeyed_note = if unkeyed > 0 {
            format!(" ({unkeyed} unkeyed rows from before the chain was keyed: they prove order, not authorship)")
        } else {
            String::new()
        };
        match status {
            "broken" => {
                println!("audit log BROKEN:");
                for p in &problems {
                    println!("  {p}");
                }
            }
            "chain_intact_no_checkpoints" => println!(
                "audit chain links verify: {} rows, head at {head}{unkeyed_note}; \
                 without --checkpoints a truncation of the newest rows cannot be seen",
                chain["rows"]
            ),
            "intact" => println!(
                "audit log intact: {} rows, head at {head}, {checked} checkpoints match, the last at the head{unkeyed_note}",
                chain["rows"]
            ),
            _ => println!(
                "audit log verified through checkpoint at row {}: {checked} checkpoints match; \
                 unverified tail of {} rows ({}..{head}) after the last checkpoint{unkeyed_note}",
                last_checkpoint.unwrap_or(0),
                tail.unwrap_or(0),
                last_checkpoint.unwrap_or(0) + 1
            ),
        }
    }
    if status == "broken" {
        bail!("the audit log does not verify");
    }
    Ok(())
}

async fn page(
    remote: &Remote,
    query: &[(&str, String)],
) -> anyhow::Result<(Vec<Value>, Option<i64>)> {
    let v = call_query(remote, reqwest::Method::GET, "/v1/admin/audit", query, None).await?;
    let events = v["events"].as_array().cloned().unwrap_or_default();
    Ok((events, v["next_cursor"].as_i64()))
}

async fn tail(
    remote: &Remote,
    filters: Vec<(&'static str, String)>,
    lines: i64,
    follow: bool,
) -> anyhow::Result<()> {
    if !(1..=1000).contains(&lines) {
        bail!("-n/--lines must be 1-1000");
    }
    let mut query = filters.clone();
    query.push(("order", "desc".into()));
    query.push(("limit", lines.to_string()));
    let (mut recent, _) = page(remote, &query).await?;
    recent.reverse();
    let mut last = recent.last().and_then(|e| e["seq"].as_i64()).unwrap_or(0);
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
            let mut query = filters.clone();
            query.push(("after", last.to_string()));
            query.push(("limit", EXPORT_PAGE.to_string()));
            let (events, next) = page(remote, &query).await?;
            let mut out = std::io::stdout().lock();
            for e in &events {
                print_event(&mut out, remote.json, e)?;
                last = e["seq"].as_i64().unwrap_or(last);
            }
            out.flush()?;
            if next.is_none() {
                break;
            }
        }
    }
}

async fn export(remote: &Remote, filters: Vec<(&'static str, String)>) -> anyhow::Result<()> {
    let mut after: Option<i64> = None;
    let mut count = 0u64;
    loop {
        let mut query = filters.clone();
        query.push(("limit", EXPORT_PAGE.to_string()));
        if let Some(a) = after {
            query.push(("after", a.to_string()));
        }
        let (events, next) = page(remote, &query).await?;
        let mut out = std::io::stdout().lock();
        for e in &events {
            writeln!(out, "{e}").context("writing to stdout")?;
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

fn print_event(out: &mut impl Write, json: bool, e: &Value) -> anyhow::Result<()> {
    if json {
        writeln!(out, "{e}")?;
        return Ok(());
    }
    let s = |k: &str| e[k].as_str().unwrap_or("-").to_owned();
    let mut line = format!(
        "{} #{} {} {} actor={}",
        s("at"),
        e["seq"],
        s("event"),
        s("decision"),
        s("actor")
    );
    for key in [
        "reason",
        "user",
        "task_id",
        "run_id",
        "capability_id",
        "action",
        "resource",
        "detail",
    ] {
        if let Some(v) = e[key].as_str() {
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
