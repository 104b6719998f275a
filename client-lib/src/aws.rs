//! AWS SDK integration: a `ProvideCredentials` that fetches through Tessera.
//!
//! Why: inside a sandbox, an AWS SDK client should hold credentials scoped to one
//! action on one resource, obtained when needed and refreshed before they lapse —
//! never a long-lived key from the environment. One line wires it in:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let tessera = tessera_client::Client::from_env()?;
//! let creds = tessera_client::aws::TesseraCredentials::new(
//!     tessera, "s3:GetObject", "aws-prod:arn:aws:s3:::reports/2026/*");
//! // aws_config::from_env().credentials_provider(creds).load().await
//! # let _ = creds; Ok(()) }
//! ```
//!
//! Each refresh is a new capability and one exchange (one use); the credentials are
//! refreshed a minute (at most a fifth of their lifetime) before they expire.

use crate::refresh::{Now, Refreshing};
use crate::Client;
use aws_credential_types::provider::{self, error::CredentialsError, ProvideCredentials};
use aws_credential_types::Credentials;
use std::sync::Arc;
use std::time::Duration;

/// Refresh margin before expiry (bounded by a fifth of the lifetime).
const MARGIN: Duration = Duration::from_secs(60);

/// AWS credentials for one action on one resource, fetched through Tessera.
#[derive(Clone)]
pub struct TesseraCredentials {
    inner: Arc<Refreshing<Credentials>>,
}

impl std::fmt::Debug for TesseraCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TesseraCredentials")
    }
}

impl TesseraCredentials {
    pub fn new(client: Client, action: &str, resource: &str) -> Self {
        Self::with_clock(
            client,
            action,
            resource,
            Arc::new(std::time::SystemTime::now),
        )
    }

    /// Like [`TesseraCredentials::new`], deciding refreshes by `now` (tests).
    pub fn with_clock(client: Client, action: &str, resource: &str, now: Now) -> Self {
        let (action, resource) = (action.to_owned(), resource.to_owned());
        // Each provider is its own slot: a refresh supersedes (revokes) the
        // capability of the credentials it replaces.
        static PROVIDERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = PROVIDERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let slot = format!("aws-provider:{}:{started}:{n}", std::process::id());
        let refreshing = Refreshing::new(MARGIN, move || {
            let (client, action, resource, slot) = (
                client.clone(),
                action.clone(),
                resource.clone(),
                slot.clone(),
            );
            async move {
                let ask = crate::Ask {
                    slot: Some(&slot),
                    ..Default::default()
                };
                let c = client
                    .aws_credentials_with(&action, &resource, &ask)
                    .await?;
                let expires = c.expires().ok_or_else(|| {
                    crate::Error::Protocol("AWS credentials without an expiry".into())
                })?;
                let creds = Credentials::new(
                    c.access_key_id.clone(),
                    c.secret_access_key().to_owned(),
                    Some(c.session_token().to_owned()),
                    Some(expires),
                    "tessera",
                );
                Ok((creds, expires))
            }
        });
        TesseraCredentials {
            inner: Arc::new(refreshing.with_clock(now)),
        }
    }

    /// Replaces the clock refresh decisions use (tests).
    pub fn with_refreshing(inner: Refreshing<Credentials>) -> Self {
        TesseraCredentials {
            inner: Arc::new(inner),
        }
    }
}

impl ProvideCredentials for TesseraCredentials {
    fn provide_credentials<'a>(&'a self) -> provider::future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        provider::future::ProvideCredentials::new(async move {
            self.inner
                .get()
                .await
                .map(|c| (*c).clone())
                .map_err(CredentialsError::provider_error)
        })
    }
}
