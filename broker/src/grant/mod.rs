//! One decision, many doors.
//!
//! A run obtains things through several doors — `POST /v1/capabilities`,
//! `POST /oauth/token`, the egress gateway's `CONNECT` (and absolute-form
//! requests), and each request the gateway injects credentials into — and more
//! will come. Each door differs only in what it hands out (a signed capability,
//! an access token, a connection, a relayed request) and in how it answers;
//! *whether* it may hand it out is decided here, once, in this order:
//!
//! 1. the run is active ([`decide`]; the store re-checks it when the decision
//!    is recorded);
//! 2. admission: the action and resource in the backend kind's grammar and the
//!    schema, and of a kind this [`Door`] hands out;
//! 3. the Cedar request ([`reauthorize::policy_request`], the one way it is
//!    built) and the decision: default deny, a forbid wins, the resource-set
//!    rule for wildcards; a denial is recorded and refused;
//! 4. the `@approval` gate ([`approval`]), the same at every door: a gated
//!    permit holds only through an approval bound to exactly this request,
//!    redeemed once;
//! 5. the rate charge ([`rate`]): the server's cap and the permit's `@rate`;
//! 6. the audit row of the decision, and the writer operation that records it
//!    ([`record`]): an issuance as `IssueCapability`, anything else as
//!    `RecordDecision` — committed before the door acts.
//!
//! Outside `policy/` and this module no file asks the Cedar engine to decide
//! (`layering.rs` checks it), so a new door cannot drift from the others.

pub mod approval;
pub mod ask;
pub mod decide;
pub mod door;
pub mod event;
pub mod rate;
pub mod reauthorize;
pub mod record;
pub mod refused;
pub mod run_token;

pub use ask::{Ask, Decided};
pub use decide::decide;
pub use door::Door;
pub use record::Permit;
pub use refused::{ApprovalRefusal, Refused};
