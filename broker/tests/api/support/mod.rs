//! What the API tests (and `tests/clusters`, which includes this module) share:
//! the app builder ([`app`]), fixtures for the machine's PostgreSQL and MariaDB
//! ([`postgres`], [`mysql`]), moto for AWS ([`moto`], [`aws`]), a
//! cuttable TCP proxy ([`proxy`]), a DNS server ([`dns`]) and HTTP/HTTPS
//! servers ([`upstream`]) on loopback for the egress gateway, what its tests read back
//! ([`egress`]), and readers for tokens and the audit chain.
//! Test files import from here and never from each other.

pub mod app;
pub mod audit_chain;
pub mod aws;
pub mod dns;
pub mod egress;
pub mod moto;
pub mod mysql;
pub mod pki;
pub mod postgres;
pub mod proxy;
pub mod tokens;
pub mod upstream;
