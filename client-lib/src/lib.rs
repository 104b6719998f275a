//! Tessera client library.
//!
//! [`types`] holds the wire types of the broker's HTTP API; the broker itself
//! depends on this crate (default features off) so both sides share one
//! definition. The HTTP client proper (feature `client`) is tracked in its own
//! issue; today this crate is the contract.

pub mod types;
