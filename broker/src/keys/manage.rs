//! Loading, creating and rotating signing keys through the store.

use super::kek::Kek;
use super::ring_set::{KeySet, PublishedKey};
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
    // The newest active row that really is ours: a junk row planted by someone
    // without the KEK can neither become the signing key nor stop the broker.
    let active_row = rows
        .iter()
        .filter(|r| r.retired_at.is_none() && verified_public(kek, r).is_some())
        .max_by(|a, b| (a.created_at, &a.kid).cmp(&(b.created_at, &b.kid)))
        .ok_or(KeyStoreError::NoActiveKey)?;
    let der = kek
        .open(&active_row.sealed_private_key, &active_row.kid)
        .map_err(|_| KeyStoreError::Sealed(active_row.kid.clone()))?;
    let active =
        SigningKey::from_pkcs8(&der).map_err(|_| KeyStoreError::Sealed(active_row.kid.clone()))?;
    if active.kid() != active_row.kid {
        return Err(KeyStoreError::Sealed(active_row.kid.clone()));
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
    Ok(KeySet {
        active: Arc::new(active),
        published,
    })
}

/// The public key of a stored row, derived from its sealed private key; `None`
/// unless the private key opens, its kid is its thumbprint and the stored public
/// key matches.
fn verified_public(kek: &Kek, row: &KeyRow) -> Option<[u8; 32]> {
    let der = kek.open(&row.sealed_private_key, &row.kid).ok()?;
    let key = SigningKey::from_pkcs8(&der).ok()?;
    let stored = URL_SAFE_NO_PAD.decode(&row.public_key).ok()?;
    (key.kid() == row.kid && stored.as_slice() == key.public_key().as_slice())
        .then(|| key.public_key())
}

fn new_row(kek: &Kek, now: i64) -> KeyRow {
    let (key, der) = SigningKey::generate();
    KeyRow {
        kid: key.kid().to_owned(),
        public_key: URL_SAFE_NO_PAD.encode(key.public_key()),
        sealed_private_key: kek.seal(&der, key.kid()),
        created_at: now,
        retired_at: None,
        publish_until: None,
    }
}

/// Loads the key set, creating the first key when the store has none.
pub async fn load_or_create(store: &Store, kek: &Kek, now: i64) -> Result<KeySet, KeyStoreError> {
    match load(store, kek, now).await {
        Err(KeyStoreError::NoActiveKey) => {
            let row = new_row(kek, now);
            store
                .writer()
                .submit(InsertKey {
                    row,
                    retire_until: None,
                    audit: AuditEvent::new(events::KEY_CREATED, "broker", "allow"),
                })
                .await?;
            load(store, kek, now).await
        }
        other => other,
    }
}

/// Rotates: a new active key; the old ones stay published until `publish_until`.
pub async fn rotate(
    store: &Store,
    kek: &Kek,
    now: i64,
    publish_until: i64,
    mut audit: AuditEvent,
) -> Result<(KeySet, Vec<String>), KeyStoreError> {
    let row = new_row(kek, now);
    audit.event = events::KEY_ROTATED;
    let retired = store
        .writer()
        .submit(InsertKey {
            row,
            retire_until: Some(publish_until),
            audit,
        })
        .await?;
    Ok((load(store, kek, now).await?, retired))
}

/// Every signing key this broker ever used (retired ones included) whose row
/// opens under `kek`, as a key set for verifying what never expires (audit
/// checkpoints). `active` is the current signing key.
pub async fn every_key(
    store: &Store,
    kek: &Kek,
    active: Arc<SigningKey>,
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
    Ok(KeySet { active, published })
}
