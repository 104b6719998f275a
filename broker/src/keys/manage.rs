//! Loading, creating and rotating signing keys through the store.

use super::kek::Kek;
use super::ring_set::{KeySet, PublishedKey, Signer};
use super::signing::SigningKey;
use crate::audit::{events, AuditEvent};
use crate::store::keys::{load_all, InsertKey, KeyRow};
use crate::store::{Store, StoreError};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum KeyStoreError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("signing key {0} cannot be opened with this key-encryption key")]
    Sealed(String),
    #[error("no active signing key in the store")]
    NoActiveKey,
}

/// Builds the key set from the store at `now`.
pub async fn load(store: &Store, kek: &Kek, now: i64) -> Result<KeySet, KeyStoreError> {
    let rows = load_all(store).await?;
    // The keys that sign now or are scheduled to, and really are ours: a junk
    // row planted by someone without the KEK can neither sign nor stop the broker.
    let signers: Vec<Signer> = rows
        .iter()
        .filter(|r| r.retired_at.is_none_or(|at| now < at))
        .filter_map(|r| {
            open_row(kek, r).map(|key| Signer {
                key: Arc::new(key),
                from: r.signs_from.unwrap_or(r.created_at),
            })
        })
        .collect();
    if signers.is_empty() {
        return Err(KeyStoreError::NoActiveKey);
    }
    // A public key is trusted only if it comes from a private key sealed under our
    // KEK with its own kid: someone who can write the table but lacks the KEK
    // cannot slip a key of theirs into the JWKS.
    let published = rows
        .iter()
        .filter(|r| r.retired_at.is_none() || r.publish_until.is_some_and(|u| now <= u))
        .filter_map(|r| match verified_public(kek, r) {
            Some(public) => Some(PublishedKey {
                kid: r.kid.clone(),
                public,
                publish_until: if r.retired_at.is_none() { None } else { r.publish_until },
            }),
            None => {
                tracing::error!(kid = %r.kid, "signing key row does not open under this KEK; not published");
                None
            }
        })
        .collect();
    Ok(KeySet::new(signers, published))
}

/// The private key of a stored row; `None` unless it opens under `kek`, its
/// kid is its thumbprint and the stored public key matches.
fn open_row(kek: &Kek, row: &KeyRow) -> Option<SigningKey> {
    let der = kek.open(&row.sealed_private_key, &row.kid).ok()?;
    let key = SigningKey::from_pkcs8(&der).ok()?;
    let stored = URL_SAFE_NO_PAD.decode(&row.public_key).ok()?;
    (key.kid() == row.kid && stored.as_slice() == key.public_key().as_slice()).then_some(key)
}

/// The public key of a stored row, derived from its sealed private key; `None`
/// unless the private key opens, its kid is its thumbprint and the stored public
/// key matches.
fn verified_public(kek: &Kek, row: &KeyRow) -> Option<[u8; 32]> {
    open_row(kek, row).map(|key| key.public_key())
}

fn new_row(kek: &Kek, now: i64, signs_from: i64) -> KeyRow {
    let (key, der) = SigningKey::generate();
    KeyRow {
        kid: key.kid().to_owned(),
        public_key: URL_SAFE_NO_PAD.encode(key.public_key()),
        sealed_private_key: kek.seal(&der, key.kid()),
        created_at: now,
        retired_at: None,
        publish_until: None,
        signs_from: Some(signs_from),
    }
}

/// Loads the key set, creating the first key when the store has none of ours
/// (once, however many replicas start together: the insert is skipped when
/// another committed a key first; rows that do not open under this KEK, seen
/// just before, do not count).
pub async fn load_or_create(store: &Store, kek: &Kek, now: i64) -> Result<KeySet, KeyStoreError> {
    match load(store, kek, now).await {
        Err(KeyStoreError::NoActiveKey) => {
            let not_ours = load_all(store)
                .await?
                .into_iter()
                .filter(|r| open_row(kek, r).is_none())
                .map(|r| r.kid)
                .collect();
            let row = new_row(kek, now, now);
            store
                .writer()
                .submit(InsertKey {
                    row,
                    retire: None,
                    not_ours,
                    audit: AuditEvent::new(events::KEY_CREATED, "broker", "allow"),
                })
                .await?;
            load(store, kek, now).await
        }
        other => other,
    }
}

/// What a rotation did.
#[derive(Debug)]
pub struct Rotated {
    pub kid: String,
    /// When the new key starts signing (Unix second).
    pub signs_from: i64,
    /// The keys it takes over from.
    pub retired: Vec<String>,
}

/// Rotates: a new key, published at once and signing `prepublish` seconds
/// after its commit; the keys it takes over from sign until then and stay
/// published `keep` seconds longer.
pub async fn rotate(
    store: &Store,
    kek: &Kek,
    now: i64,
    prepublish: i64,
    keep: i64,
    mut audit: AuditEvent,
) -> Result<(KeySet, Rotated), KeyStoreError> {
    let row = new_row(kek, now, now);
    let kid = row.kid.clone();
    audit.event = events::KEY_ROTATED;
    let (retired, signs_from) = store
        .writer()
        .submit(InsertKey {
            row,
            retire: Some((prepublish, keep)),
            not_ours: Vec::new(),
            audit,
        })
        .await?;
    let rotated = Rotated {
        kid,
        signs_from,
        retired,
    };
    Ok((load(store, kek, now).await?, rotated))
}

/// Every signing key this broker ever used (retired ones included) whose row
/// opens under `kek`, as a key set for verifying what never expires (audit
/// checkpoints). `signer` is the key that signs now.
pub async fn every_key(
    store: &Store,
    kek: &Kek,
    signer: Arc<SigningKey>,
) -> Result<KeySet, KeyStoreError> {
    let rows = load_all(store).await?;
    let published = rows
        .iter()
        .filter_map(|r| {
            verified_public(kek, r).map(|public| PublishedKey {
                kid: r.kid.clone(),
                public,
                publish_until: None,
            })
        })
        .collect();
    let signers = vec![Signer {
        key: signer,
        from: i64::MIN,
    }];
    Ok(KeySet::new(signers, published))
}
