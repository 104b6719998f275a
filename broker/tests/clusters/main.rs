//! Tests on private PostgreSQL 15 and 17 clusters that the tests start
//! themselves (`support::pg_cluster`, scripts/postgres.sh): the slowest tests
//! of the suite (initdb, a hardened cluster, ten thousand live users).
//!
//! Why a binary of their own: `scripts/test.sh` runs the test binaries side by
//! side, so these minutes pass while the rest of the suite runs instead of
//! after it. They share the API tests' support code (the same `TestApp`).

#![allow(clippy::unwrap_used)]

// Each binary uses part of the shared support code.
#[path = "../api/support/mod.rs"]
#[allow(dead_code, unused_imports, unused_macros)]
mod support;

mod db_contained;
mod pg_cluster;
