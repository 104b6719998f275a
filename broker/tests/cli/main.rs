//! End-to-end test of the real `tessera` binary: `serve --dev` with nothing but an
//! empty folder, the admin CLI against it, and the README's walk-through over HTTP.
//!
//! One module per family of tests, each saying what it covers and why;
//! `support` holds what they share (the dev broker, the admin CLI, a run for a
//! sandbox command). Run one family with e.g. `cargo test --test cli egress::`.

#![allow(clippy::unwrap_used)]

mod support;

mod admin;
mod checkpoints;
mod egress;
mod errors;
mod exec;
mod first_run;
mod revocation;
mod token_confinement;
mod writer_priority;
