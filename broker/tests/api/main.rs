//! End-to-end tests of the real router against real SQLite and real PostgreSQL.

#![allow(clippy::unwrap_used)]

mod support;

mod admin;
mod approvals;
mod audit;
mod audit_log;
mod aws;
mod aws_operations;
mod capabilities;
mod client;
mod client_aws;
mod client_db;
mod crash_revocation;
mod db_mysql;
mod db_postgres;
mod doors;
mod edge;
mod exchange;
mod gateway;
mod holds;
mod inject;
mod inputs;
mod keys;
mod oauth;
mod operations;
mod policy_reload;
mod policy_soundness;
mod replicas;
mod retention;
mod run_index;
mod runs;
mod shutdown;
mod store;
mod tls;
mod tokens;
