//! End-to-end tests of the real router against real SQLite and real PostgreSQL.

#![allow(clippy::unwrap_used)]

mod helpers;

mod audit;
mod capabilities;
mod exchange;
mod inputs;
mod keys;
mod replicas;
mod runs;
mod store;
mod tls;
mod tokens;
