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
/// and is genuine (`verifies`: a row planted without the KEK, with the very
/// files about to be published, must not stand in for them). `seal` computes
/// the new row's MAC from (version, published_at).
pub struct Publish {
    pub sha256: String,
    pub sources: String,
    pub trigger: String,
    pub replica: String,
    #[allow(clippy::type_complexity)]
    pub seal: Box<dyn Fn(i64, i64) -> String + Send + Sync>,
    pub verifies: Box<dyn Fn(&VersionRow) -> bool + Send + Sync>,
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
            let (last, last_sha) = match newest {
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
                    let sha = if (self.verifies)(&row) {
                        row.sha256
                    } else {
                        String::new()
                    };
                    (row.version, sha)
                }
                None => (0, String::new()),
            };
            let mut ev = self.audit.clone();
            let base = ev.detail.take().unwrap_or_default();
            if last_sha == self.sha256 {
                if self.audit_unchanged {
                    ev.detail = Some(format!("{base} version={last} unchanged=true"));
                    ctx.audit(&ev).await?;
                }
                return Ok(Published::Unchanged(last));
            }
            // A planted row numbered i64::MAX must not wrap the count.
            let version = last
                .checked_add(1)
                .ok_or_else(|| sqlx::Error::Protocol("policy version numbers ran out".into()))?;
            let now = ctx.now();
            let q = ctx.sql(
                "INSERT INTO policy_versions (version, sha256, sources, trigger, replica, published_at, mac) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            );
            stmt(&q)
                .bind(version)
                .bind(&self.sha256)
                .bind(&self.sources)
                .bind(&self.trigger)
                .bind(&self.replica)
                .bind(now)
                .bind((self.seal)(version, now))
                .execute(&mut ctx.conn)
                .await?;
            ev.detail = Some(format!("{base} version={version}"));
            ctx.audit(&ev).await?;
            Ok(Published::New(version))
        })
    }
}
