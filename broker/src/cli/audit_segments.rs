//! Audit rows outside the store: `tessera audit export --through-checkpoint`
//! writes them (every row through the newest signed checkpoint, then that
//! checkpoint's line) and records the export with the broker, after which
//! retention may prune them; `tessera audit verify --segments` proves them
//! again from the file.
//!
//! Why in this order: the broker deletes nothing that is not in a file the
//! administrator has confirmed (synced, its SHA-256 recorded), and a pruned
//! prefix stays provable: its rows' links are recomputed by the broker (which
//! holds the audit key), chained from row 1, and must end at the link the
//! store's first kept row starts from.

use super::remote::{admin, said, Remote};
use anyhow::{bail, Context};
use base64::Engine;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use tessera_client::types::{
    AuditExportRequest, AuditQuery, AuditRecord, PrunedPrefix, SegmentCheckRequest,
};
use tessera_client::AdminClient;

const PAGE: i64 = 1000;

/// Writes every row the store holds through its newest checkpoint to `output`
/// (created, 0600), then the checkpoint's line; syncs it; records it.
pub async fn export_through_checkpoint(remote: &Remote, output: &Path) -> anyhow::Result<()> {
    let client = admin(remote)?;
    let latest = client
        .latest_audit_checkpoint()
        .await
        .map_err(said)?
        .latest
        .context(
            "the broker has signed no audit checkpoint yet; nothing can be exported for retention",
        )?;
    let mut file = create_private(output)?;
    let mut hasher = ring::digest::Context::new(&ring::digest::SHA256);
    let mut first: Option<i64> = None;
    let mut last: Option<(i64, String)> = None;
    let mut after: Option<i64> = None;
    'pages: loop {
        let query = AuditQuery {
            limit: Some(PAGE),
            after,
            ..AuditQuery::default()
        };
        let page = client.audit(&query).await.map_err(said)?;
        for row in &page.events {
            if row.seq > latest.seq {
                break 'pages;
            }
            if let Some((prev, _)) = &last {
                if row.seq != prev + 1 {
                    bail!(
                        "the store skips from row {prev} to row {}: run `tessera audit verify`",
                        row.seq
                    );
                }
            }
            let line = format!("{}\n", serde_json::to_string(row)?);
            file.write_all(line.as_bytes())?;
            hasher.update(line.as_bytes());
            first.get_or_insert(row.seq);
            last = Some((row.seq, row.hash.clone()));
        }
        match page.next_cursor {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    let (Some(first), Some((last_seq, last_hash))) = (first, last) else {
        bail!("no audit rows up to the newest checkpoint");
    };
    if last_seq != latest.seq || last_hash != latest.hash {
        bail!(
            "the rows end at {last_seq}, not at the checkpoint's row {} with its link: run `tessera audit verify`",
            latest.seq
        );
    }
    let line = format!(
        "{}\n",
        serde_json::json!({ "seq": latest.seq, "hash": latest.hash, "checkpoint": latest.checkpoint })
    );
    file.write_all(line.as_bytes())?;
    hasher.update(line.as_bytes());
    file.sync_all()
        .with_context(|| format!("syncing {}", output.display()))?;
    let sha256 = crate::ids::hex(hasher.finish().as_ref());
    let recorded = client
        .record_audit_export(&AuditExportRequest {
            first_seq: first,
            last_seq,
            last_hash,
            checkpoint: latest.checkpoint,
            sha256: sha256.clone(),
        })
        .await
        .map_err(said)?;
    eprintln!(
        "tessera: exported audit rows {first}..{last_seq} through the checkpoint of row {last_seq} to {} (sha256 {sha256}); recorded as export {}",
        output.display(),
        recorded.id
    );
    Ok(())
}

fn create_private(path: &Path) -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| {
            format!(
                "--output: cannot create {} (it must not exist)",
                path.display()
            )
        })
}

/// The rows and checkpoints of exported segments.
#[derive(Default)]
pub struct Segments {
    rows: BTreeMap<i64, AuditRecord>,
}

impl Segments {
    /// Reads every file; a line that is neither a row nor a checkpoint, or a
    /// row given twice with different contents, is a problem.
    pub fn read(files: &[PathBuf], problems: &mut Vec<String>) -> anyhow::Result<Segments> {
        let mut s = Segments::default();
        for path in files {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--segments: cannot read {}", path.display()))?;
            for (n, line) in text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
            {
                let at = format!("{}:{}", path.display(), n + 1);
                let Ok(v) = serde_json::from_str::<Value>(line) else {
                    problems.push(format!("{at}: not JSON"));
                    continue;
                };
                if v.get("checkpoint").is_some() {
                    continue;
                }
                match serde_json::from_value::<AuditRecord>(v) {
                    Ok(row) => match s.rows.get(&row.seq) {
                        Some(same) if *same == row => {}
                        Some(_) => problems.push(format!(
                            "{at}: row {} differs from the same row in another segment",
                            row.seq
                        )),
                        None => {
                            s.rows.insert(row.seq, row);
                        }
                    },
                    Err(e) => problems.push(format!("{at}: not an audit row ({e})")),
                }
            }
        }
        Ok(s)
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Proves rows 1..=pruned.seq from the segments: all present, every link
    /// recomputed by the broker, chained from the genesis value to the link
    /// the store's first kept row starts from. Returns how many were checked.
    pub async fn verify_prefix(
        &self,
        client: &AdminClient,
        pruned: &PrunedPrefix,
        problems: &mut Vec<String>,
    ) -> anyhow::Result<i64> {
        let wanted: Vec<&AuditRecord> = self.rows.range(1..=pruned.seq).map(|(_, r)| r).collect();
        if wanted.len() as i64 != pruned.seq {
            let mut missing = (1..=pruned.seq).filter(|s| !self.rows.contains_key(s));
            let first = missing.next().unwrap_or(0);
            problems.push(format!(
                "the exported segments lack {} of the pruned rows 1..{} (the first: row {first})",
                pruned.seq - wanted.len() as i64,
                pruned.seq
            ));
            return Ok(0);
        }
        let mut prev = crate::audit::GENESIS_HASH.to_owned();
        let mut checked = 0;
        for chunk in wanted.chunks(crate::audit::segments::MAX_ROWS) {
            let req = SegmentCheckRequest {
                prev_hash: prev.clone(),
                rows: chunk.iter().map(|r| (*r).clone()).collect(),
            };
            let v = client.check_audit_segment(&req).await.map_err(said)?;
            checked += v.checked;
            if let Some(p) = v.first_problem {
                problems.push(format!("exported row {}: {} ({})", p.seq, p.kind, p.detail));
                return Ok(checked);
            }
            prev = v.last_hash;
        }
        if prev != pruned.hash {
            problems.push(format!(
                "the exported rows end at a link the store's first kept row (row {}) does not follow",
                pruned.seq + 1
            ));
        }
        Ok(checked)
    }

    /// A checkpoint the broker verified whose row was pruned: the link it
    /// signs must be the exported row's (when segments were given).
    pub fn check_pruned_claim(&self, jws: &str, problems: &mut Vec<String>) {
        let Some((seq, hash)) = checkpoint_claim(jws) else {
            problems.push("a checkpoint cannot be read".into());
            return;
        };
        if self.rows.is_empty() {
            return;
        }
        match self.rows.get(&seq) {
            Some(row) if row.hash == hash => {}
            Some(_) => problems.push(format!(
                "checkpointed row {seq} differs from its exported copy"
            )),
            None => problems.push(format!(
                "checkpointed row {seq} was pruned and is in no exported segment"
            )),
        }
    }
}

/// `(seq, hash)` a checkpoint signs (its signature checked by the broker).
fn checkpoint_claim(jws: &str) -> Option<(i64, String)> {
    let payload = jws.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    Some((v["seq"].as_i64()?, v["hash"].as_str()?.to_owned()))
}
