//! Whether a run can still be used: the one rule every write that issues,
//! charges or approves for a run checks inside its transaction.
//!
//! Why a leaf of its own: runs, approvals and charges all ask it, and ending a
//! run cancels its approvals; with the rule in `runs.rs` those files would
//! import one another in a circle.

/// Whether a run can still be used at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    Active,
    Ended,
    Expired,
}

impl RunState {
    /// A run ended before its expiry was ended; one that reached its expiry
    /// (whether or not the sweeper has recorded that yet) expired.
    pub fn of(ended_at: Option<i64>, expires_at: i64, now: i64) -> RunState {
        match ended_at {
            Some(t) if t < expires_at => RunState::Ended,
            Some(_) => RunState::Expired,
            None if now >= expires_at => RunState::Expired,
            None => RunState::Active,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Active => "active",
            RunState::Ended => "ended",
            RunState::Expired => "expired",
        }
    }
}
