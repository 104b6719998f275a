//! Tessera broker: mints capabilities bound to (user, task, resource, action) under
//! Cedar policy, exchanges them for downstream credentials, and revokes everything
//! a run was given when it ends.
//!
//! # Layout
//!
//! Where a request goes: a door ([`api`] for HTTP, [`gateway`] for the egress
//! proxy) → [`grant`] (who is asking, the one Cedar decision of [`policy`], the
//! approval gate, the rate, the record) → [`keys`] (signing) → [`store`]
//! (durable state; every write through the group-committing writer, with its
//! [`audit`] row) → [`backends`] (downstream credentials). Each file imports
//! only files below it (the `layering` tests read the sources and fail on a
//! circle or an arrow that runs up). Every top-level module:
//!
//! Starting and running
//! - [`boot`]: the boot sequence `tessera serve` runs, until it is told to stop;
//! - [`app`]: the one application state every handler and job shares;
//! - [`config`]: `tessera.toml` and `TESSERA_*` overrides, validated whole;
//! - [`settings`]: what every setting is resolved with (a leaf `config` and the
//!   backends share);
//! - [`server`]: serving a router on a listener, plain or TLS, with a bounded edge;
//! - [`jobs`]: background work (revocation, expiry, keys, policy sync,
//!   checkpoints, retention, webhooks), started and stopped together;
//! - [`health`]: readiness that names each reason not to take traffic;
//! - [`metrics`]: the Prometheus families of `/metrics`;
//! - [`instance`]: this process as the other replicas see it;
//! - [`rlimit`]: the open-file limit, raised at start;
//! - [`cli`]: the `tessera` commands (`serve` and the clients of a running broker).
//!
//! Doors
//! - [`api`]: the HTTP API, one module per resource, and its OpenAPI document;
//! - [`gateway`]: the egress proxy: every connection and injected request decided;
//! - [`injection`]: what a run holds for credential injection (its CA, placeholders);
//! - [`dpop`]: DPoP proofs (RFC 9449) for key-bound tokens.
//!
//! Deciding
//! - [`grant`]: one decision, many doors: run, admission, Cedar, approval, rate, record;
//! - [`policy`]: the Cedar engine, its annotations, the policy in force, policy tests;
//! - [`policy_versions`]: one published policy version for every replica;
//! - [`policy_reload`]: reloading policy, audited, fail closed;
//! - [`resource`], [`names`], [`grammar`]: what a request may name, checked
//!   before policy sees it (resources and actions; users, tasks and labels;
//!   durations, rates and approval gates);
//! - [`capability`]: capability tokens' claims and their strict verification.
//!
//! Keeping state
//! - [`store`]: SQLite or PostgreSQL through one writer; the audit rows it chains;
//! - [`audit`]: audit events, the keyed chain, checkpoints, verification;
//! - [`keys`]: signing keys, the key-encryption key, JWTs;
//! - [`backends`]: the downstream credentials a capability is exchanged for.
//!
//! Small leaves
//! - [`ids`]: identifiers, randomness, hex and SHA-256;
//! - [`secret`]: the bearer secrets (run tokens, runtime keys, the admin token,
//!   approver keys), each a type that checks its shape, hashes and never prints;
//! - [`clock`]: the broker's "now";
//! - [`error`]: the one HTTP error type;
//! - [`boxed`]: the boxed future trait methods return;
//! - [`http_client`]: the outgoing HTTPS client (one TLS stack);
//! - [`private_fs`]: files that hold secrets, created and trusted only if private;
//! - [`failpoint`]: where a debug build can be told to crash, for the tests.

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
pub mod secret;
pub mod server;
pub mod settings;
pub mod store;
