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

/// The newest version, without its files (what the sync loop reads each tick).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct VersionHead {
    pub version: i64,
    pub sha256: String,
    pub published_at: i64,
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

pub async fn newest(store: &Store) -> Result<Option<VersionHead>, StoreError> {
    let q =
        "SELECT version, sha256, published_at FROM policy_versions ORDER BY version DESC LIMIT 1";
    match sqlx::query(q).fetch_optional(store.pool()).await? {
        Some(row) => Ok(Some(decode(&row)?)),
        None => Ok(None),
    }
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

/// The newest `limit` versions numbered above `version`, newest first.
pub async fn above(store: &Store, version: i64, limit: i64) -> Result<Vec<VersionRow>, StoreError> {
    let q = store.sql(
        "SELECT version, sha256, sources, trigger, replica, published_at, mac \
         FROM policy_versions WHERE version > $1 ORDER BY version DESC LIMIT $2",
    );
    let rows = sqlx::query(&q)
        .bind(version)
        .bind(limit)
        .fetch_all(store.pool())
        .await?;
    rows.iter().map(decode).collect()
}

/// Seals a version row and checks a seal: implemented where the KEK is
/// ([`crate::policy_versions::PolicySeal`]); the store only asks.
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
            let newest = stmt(
                "SELECT version, sha256, sources, trigger, replica, published_at, mac \
                 FROM policy_versions ORDER BY version DESC LIMIT 1",
            )
            .fetch_optional(&mut ctx.conn)
            .await?;
            let (last, genuine_sha) = match newest {
                Some(row) => {
                    let row = VersionRow {
                        version: row.try_get("version")?,
                        sha256: row.try_get("sha256")?,
                        sources: row.try_get("sources")?,
                        trigger: row.try_get("trigger")?,
                        replica: row.try_get("replica")?,
                        published_at: row.try_get("published_at")?,
                        mac: row.try_get("mac")?,
                    };
                    let genuine = self.seal.verifies(&row);
                    (row.version, genuine.then_some(row.sha256))
                }
                None => (0, None),
            };
            let mut ev = self.audit.clone();
            let base = ev.detail.take().unwrap_or_default();
            if genuine_sha.as_deref() == Some(self.sha256.as_str()) && last >= self.after {
                if self.audit_unchanged {
                    ev.detail = Some(format!("{base} version={last} unchanged=true"));
                    ctx.audit(&ev).await?;
                }
                return Ok(Published::Unchanged(last));
            }
            // A planted row numbered i64::MAX must not wrap the count.
            let version = last
                .max(self.after)
                .checked_add(1)
                .ok_or_else(|| sqlx::Error::Protocol("policy version numbers ran out".into()))?;
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
