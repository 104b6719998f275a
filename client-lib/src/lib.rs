//! Tessera client library: how a sandboxed tool asks for what it needs, when it
//! needs it, instead of inheriting secrets.
//!
//! The tool holds one run token (a file the runtime mounted, or an inherited
//! descriptor) and the broker's address. It asks for a capability — one action on
//! one resource — and exchanges it for the downstream credential:
//!
//! ```no_run
//! # async fn demo() -> Result<(), tessera_client::Error> {
//! use tessera_client::Client;
//!
//! // TESSERA_ADDR and TESSERA_RUN_TOKEN_FILE, set by the runtime.
//! let tessera = Client::from_env()?;
//!
//! // A PostgreSQL user that can SELECT from exactly one table.
//! let db = tessera.database("select", "pg-main:analytics.public.orders").await?;
//! println!("connect as {} to {}:{}", db.username, db.host, db.port); // db.dsn() has the password
//!
//! // A capability for a service that verifies Tessera tokens itself.
//! let cap = tessera.capability("read", "svc-reports:reports/2026/q1.csv").await?;
//! let access = tessera.exchange(&cap).await?;
//! // ... use access.field("token") ...
//! tessera.revoke(&cap).await?; // done with it: revoked, downstream included
//! # Ok(()) }
//! ```
//!
//! Errors say what happened ([`Error::Denied`], [`Error::ApprovalRequired`],
//! [`Error::RateLimited`] with the delay, [`Error::Expired`],
//! [`Error::Unavailable`], …) and carry the broker's request id for the audit log.
//! 503s, 429s and refused connections are retried with jittered backoff
//! ([`RetryPolicy`]); decisions never are. Tokens and credentials never appear in
//! `Debug` output.
//!
//! [`types`] holds the wire types of the broker's HTTP API; the broker depends on
//! this crate with default features off and gets only those, so both sides share
//! one definition (feature `openapi` adds their OpenAPI schemas, from which the
//! broker generates its document). Feature `aws` adds [`aws::TesseraCredentials`], an AWS SDK
//! credentials provider.

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod approval_types;
pub mod arguments;
pub mod error_code;
mod id;
mod oauth_types;
#[cfg(feature = "openapi")]
pub mod schema;
pub mod types;

#[cfg(feature = "client")]
mod admin;
#[cfg(feature = "client")]
mod client;
#[cfg(feature = "client")]
mod credentials;
#[cfg(feature = "client")]
pub mod dpop;
#[cfg(feature = "client")]
mod error;
#[cfg(feature = "client")]
pub mod refresh;

#[cfg(feature = "aws")]
pub mod aws;

#[cfg(feature = "client")]
pub use admin::{AdminClient, AdminClientBuilder};
#[cfg(feature = "client")]
pub use client::{
    broker_address, check_transport, AccessToken, Ask, Client, ClientBuilder, RetryPolicy,
    RUN_TOKEN_PREFIX,
};
#[cfg(feature = "client")]
pub use credentials::{AwsCredentials, Capability, DatabaseCredentials, Exchanged};
#[cfg(feature = "client")]
pub use error::Error;
pub use error_code::ErrorCode;
