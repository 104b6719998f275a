//! Published policy versions (see [`crate::policy_versions`]).
//!
//! A version is inserted by the writer, so its number is taken inside the
//! batch that holds the audit head: on PostgreSQL the batches of all replicas
//! are serialised there, so two replicas publishing at once get two numbers,
//! and a replica publishing what is already the newest version adds nothing.

use super::query::stmt;
use super::writer::{BoxFuture, WriteCtx, WriteOp};
use super::{decode, Store, StoreError};
use crate::audit::AuditEvent;

/// What the sync loop reads each tick: the highest number and how many rows
/// there are. Either changes with every insert, also one below a planted row
/// numbered higher than any genuine version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    pub highest: i64,
    pub rows: i64,
}

pub async fn marker(store: &Store) -> Result<Option<Marker>, StoreError> {
    let q = "SELECT MAX(version) AS highest, COUNT(*) AS n FROM policy_versions";
    let row = sqlx::query(q).fetch_one(store.pool()).await?;
    let highest: Option<i64> = super::col(&row, "highest")?;
    let rows: i64 = super::col(&row, "n")?;
    Ok(highest.map(|highest| Marker { highest, rows }))
}

/// One published version as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct VersionRow {
    pub version: i64,
    pub sha256: String,
    /// The files as JSON ([`crate::policy::files::PolicyFiles`]).
    pub sources: String,
    pub trigger: String,
    pub replica: String,
    pub published_at: i64,
    pub mac: String,
}

pub async fn load(store: &Store, version: i64) -> Result<Option<VersionRow>, StoreError> {
    let q = store.sql(
        "SELECT version, sha256, sources, trigger, replica, published_at, mac \
         FROM policy_versions WHERE version = $1",
    );
    match sqlx::query(&q)
        .bind(version)
        .fetch_optional(store.pool())
        .await?
    {
        Some(row) => Ok(Some(decode(&row)?)),
        None => Ok(None),
    }
}

/// The versions numbered above a floor, newest first, read a page at a
/// time: however many rows were planted above a genuine version, it is
/// reached.
pub struct Descending {
    floor: i64,
    below: i64,
    page: std::collections::VecDeque<VersionRow>,
    done: bool,
}

const PAGE: i64 = 32;

impl Descending {
    pub fn new(floor: i64) -> Self {
        Descending {
            floor,
            below: i64::MAX,
            page: Default::default(),
            done: false,
        }
    }

    pub async fn next(&mut self, store: &Store) -> Result<Option<VersionRow>, StoreError> {
        if self.page.is_empty() && !self.done {
            let q = store.sql(
                "SELECT version, sha256, sources, trigger, replica, published_at, mac \
                 FROM policy_versions WHERE version > $1 AND version <= $2 \
                 ORDER BY version DESC LIMIT $3",
            );
            let rows = sqlx::query(&q)
                .bind(self.floor)
                .bind(self.below)
                .bind(PAGE)
                .fetch_all(store.pool())
                .await?;
            self.done = (rows.len() as i64) < PAGE;
            for row in &rows {
                self.page.push_back(decode(row)?);
            }
            if let Some(last) = self.page.back() {
                // Above the floor, so never i64::MIN: no wrap.
                self.below = last.version - 1;
            }
        }
        Ok(self.page.pop_front())
    }
}

/// Seals a version row and checks a seal: implemented where the KEK is
/// ([`crate::policy::in_force::PolicySeal`]); the store only asks.
pub trait Seal: Send + Sync {
    /// The MAC of `row` (its `mac` field ignored).
    fn seal(&self, row: &VersionRow) -> String;
    fn verifies(&self, row: &VersionRow) -> bool;
}

/// What [`Publish`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// A new version with this number.
    New(i64),
    /// The newest version already has these files: nothing written (and,
    /// unless `audit_unchanged`, nothing audited).
    Unchanged(i64),
}

impl Published {
    pub fn version(self) -> i64 {
        match self {
            Published::New(v) | Published::Unchanged(v) => v,
        }
    }
}

/// Publishes files as the next version unless the newest has the same hash
/// and is genuine (a row planted without the KEK, with the very files about to
/// be published, must not stand in for them). The number follows both the
/// newest row and the version the publisher enforces (`after`), so rows
/// removed from the store never make a number be used twice.
pub struct Publish {
    pub sha256: String,
    pub sources: String,
    pub trigger: String,
    pub replica: String,
    pub after: i64,
    pub seal: std::sync::Arc<dyn Seal>,
    /// Written with a new version; with an unchanged one only if
    /// `audit_unchanged` (an administrator's reload is audited even when it
    /// changes nothing; a replica's watch seeing what another published is not).
    pub audit: AuditEvent,
    pub audit_unchanged: bool,
}

impl WriteOp for Publish {
    type Output = Published;
    fn apply<'a>(
        &'a self,
        ctx: &'a mut WriteCtx<'_>,
    ) -> BoxFuture<'a, Result<Published, sqlx::Error>> {
        Box::pin(async move {
            // The highest number in use, and the newest row that is sealed
            // (rows above it were written without the KEK: skipped, paged
            // through however many there are).
            let mut highest: Option<i64> = None;
            let mut genuine: Option<VersionRow> = None;
            let mut below = i64::MAX;
            'pages: loop {
                let q = ctx.sql(
                    "SELECT version, sha256, sources, trigger, replica, published_at, mac \
                     FROM policy_versions WHERE version <= $1 ORDER BY version DESC LIMIT $2",
                );
                let page = stmt(&q)
                    .bind(below)
                    .bind(PAGE)
                    .fetch_all(&mut ctx.conn)
                    .await?;
                let full = page.len() as i64 == PAGE;
                for row in &page {
                    let row = VersionRow {
                        version: row.try_get("version")?,
                        sha256: row.try_get("sha256")?,
                        sources: row.try_get("sources")?,
                        trigger: row.try_get("trigger")?,
                        replica: row.try_get("replica")?,
                        published_at: row.try_get("published_at")?,
                        mac: row.try_get("mac")?,
                    };
                    highest.get_or_insert(row.version);
                    if self.seal.verifies(&row) {
                        genuine = Some(row);
                        break 'pages;
                    }
                    below = row.version.saturating_sub(1);
                }
                if !full {
                    break;
                }
            }
            let sealed = genuine.as_ref().map_or(0, |r| r.version);
            let last = highest.unwrap_or(0);
            let genuine_sha = genuine.map(|r| r.sha256);
            let mut ev = self.audit.clone();
            let base = ev.detail.take().unwrap_or_default();
            if genuine_sha.as_deref() == Some(self.sha256.as_str()) && sealed >= self.after {
                if self.audit_unchanged {
                    ev.detail = Some(format!("{base} version={sealed} unchanged=true"));
                    ctx.audit(&ev).await?;
                }
                return Ok(Published::Unchanged(sealed));
            }
            // Above every row, unsealed ones included (they stay as evidence);
            // if a planted row took the last number, right above the newest
            // sealed version instead, replacing whatever unsealed row is there.
            let version = match last.max(self.after).checked_add(1) {
                Some(v) => v,
                None => {
                    // `sealed` and `after` are genuine numbers, far below i64::MAX.
                    let v = sealed.max(self.after) + 1;
                    let q = ctx.sql("DELETE FROM policy_versions WHERE version = $1");
                    stmt(&q).bind(v).execute(&mut ctx.conn).await?;
                    v
                }
            };
            let mut row = VersionRow {
                version,
                sha256: self.sha256.clone(),
                sources: self.sources.clone(),
                trigger: self.trigger.clone(),
                replica: self.replica.clone(),
                published_at: ctx.now(),
                mac: String::new(),
            };
            row.mac = self.seal.seal(&row);
            let q = ctx.sql(
                "INSERT INTO policy_versions (version, sha256, sources, trigger, replica, published_at, mac) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            );
            stmt(&q)
                .bind(row.version)
                .bind(&row.sha256)
                .bind(&row.sources)
                .bind(&row.trigger)
                .bind(&row.replica)
                .bind(row.published_at)
                .bind(&row.mac)
                .execute(&mut ctx.conn)
                .await?;
            ev.detail = Some(format!("{base} version={version}"));
            ctx.audit(&ev).await?;
            Ok(Published::New(version))
        })
    }
}
