//! Tessera broker: mints capabilities bound to (user, task, resource, action) under
//! Cedar policy, exchanges them for downstream credentials, and revokes everything
//! a run was given when it ends.
//!
//! Where a request goes: [`api`] (HTTP, one module per resource) → [`policy`]
//! (Cedar decision and constraints) → [`keys`] (EdDSA signing) → [`store`] (durable
//! state; every write through the group-committing writer, with its [`audit`] row)
//! → [`backends`] (downstream credentials). [`app`] holds the one shared state;
//! [`cli`] is what the `tessera` binary dispatches to.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod api;
pub mod app;
pub mod audit;
pub mod backends;
pub mod boot;
pub mod boxed;
pub mod capability;
pub mod cli;
pub mod clock;
pub mod config;
pub mod dpop;
pub mod error;
pub mod failpoint;
pub mod gateway;
pub mod grammar;
pub mod grant;
pub mod health;
pub mod http_client;
pub mod ids;
pub mod injection;
pub mod instance;
pub mod jobs;
pub mod keys;
#[cfg(test)]
mod layering;
pub mod metrics;
pub mod names;
pub mod policy;
pub mod policy_reload;
pub mod policy_versions;
pub mod private_fs;
pub mod resource;
pub mod rlimit;
pub mod server;
pub mod settings;
pub mod store;
