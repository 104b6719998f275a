//! What a run holds for credential injection, in this process's memory only:
//! its CA ([`ca`]), its placeholders and the AWS credentials its SigV4 rules
//! sign with ([`sessions`]).
//!
//! Why not under `gateway`: the gateway uses these, but the application holds
//! them and every door that ends a run (the API, the decision layer) forgets a
//! run's session. Kept here, the application state imports no gateway type
//! and the gateway is a client of this module like the others.

pub mod ca;
pub mod sessions;

pub use sessions::Sessions;
