//! The egress gateway (issue 17): what a sandboxed tool may connect to. So far,
//! the address rules every connection will be checked against
//! ([`addresses`]); the proxy, its policy decisions and its audit rows are not
//! built yet.

pub mod addresses;
