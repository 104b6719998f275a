//! The open-file limit: raised to its hard limit at start, because every
//! client connection is a descriptor and the common soft default (1,024) is
//! what a thousand idle sockets exhaust.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// The soft limit on open files, if it can be read.
pub fn open_files() -> Option<u64> {
    getrlimit(Resource::RLIMIT_NOFILE)
        .ok()
        .map(|(soft, _)| soft)
}

/// Raises the soft limit to the hard limit; returns (before, after).
pub fn raise_open_files() -> Option<(u64, u64)> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft >= hard {
        return Some((soft, soft));
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => Some((soft, hard)),
        Err(_) => Some((soft, soft)),
    }
}
