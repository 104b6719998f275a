//! Credential injection (issue 18): for a host with an `http` rule, the gateway
//! terminates the tool's TLS with the run's own CA, decides every request,
//! takes the tool's credentials off it and puts the rule's on, so the tool
//! calls the API without ever holding a usable secret (docs/gateway.md).
//!
//! - [`crate::injection`]: each run's CA, placeholders and AWS credentials
//!   (memory only; outside the gateway, as ending a run forgets them);
//! - [`intercept`]: the intercepted connection and its requests;
//! - [`credential`]: stripping and injecting; [`upstream`]: verified TLS to the API.
//!
//! Hosts without a rule are never intercepted: their tunnels carry the tool's
//! own TLS, untouched, as before.

pub mod credential;
pub mod intercept;
pub mod upstream;
