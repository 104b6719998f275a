//! This broker process as other processes see it: an instance id, registered in
//! the store with a heartbeat, that owns the revocation work it claims.
//!
//! Why: outbox claims must belong to a *live* process. A claim names its
//! instance and lapses after a short lease that the instance's heartbeat
//! renews; a process that stops (SIGTERM) releases what it holds, and one that
//! died is recognised at once by the next start on the same machine (its pid no
//! longer runs with the recorded start time) or, from another machine, by its
//! stale heartbeat — so claimed work is taken over within seconds, never
//! after a fixed two-minute claim.

/// How often a live instance renews its heartbeat and its claims.
pub const HEARTBEAT_SECS: i64 = 2;
/// A heartbeat older than this means the instance is gone. Longer than the
/// claim lease, so a slow heartbeat (a busy writer, a paused VM, some clock
/// skew between replicas) costs a claim at most, never a live instance's
/// standing; the lease is what bounds a takeover from another machine.
pub const STALE_AFTER_SECS: i64 = 30;
/// How long a claim holds without renewal (a claimant that stops renewing,
/// e.g. cut off from the store, loses its claims after this).
pub const CLAIM_LEASE_SECS: i64 = 15;

/// Who this process is.
#[derive(Debug, Clone)]
pub struct Instance {
    pub id: String,
    /// `hostname boot-id pid-namespace`: processes with the same machine
    /// string can see each other's pids.
    pub machine: String,
    pub pid: i64,
    /// The process start time (clock ticks since boot, `/proc/<pid>/stat`
    /// field 22): with the pid, names one process even after pid reuse.
    pub pid_start: String,
}

/// An instance as the store records it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct InstanceRow {
    pub id: String,
    pub machine: String,
    pub pid: i64,
    pub pid_start: String,
    pub heartbeat_at: i64,
    pub stopped_at: Option<i64>,
}

impl Instance {
    pub fn this_process() -> Instance {
        let pid = std::process::id() as i64;
        Instance {
            id: format!("inst_{}", crate::ids::new_id()),
            machine: machine_identity(),
            pid,
            pid_start: process_start(pid).unwrap_or_default(),
        }
    }

    /// Whether the instance `row` describes is certainly gone at `now`.
    pub fn sees_dead(&self, row: &InstanceRow, now: i64) -> bool {
        if row.id == self.id {
            return false;
        }
        if row.stopped_at.is_some() || row.heartbeat_at + STALE_AFTER_SECS <= now {
            return true;
        }
        // Same machine and pid namespace: the process table is the truth —
        // where it can be read. No such process: gone. A process whose start
        // time differs: the pid was reused, gone. Unreadable (`hidepid`,
        // another user): unknown, so the heartbeat decides.
        if self.machine.is_empty() || row.machine != self.machine || row.pid_start.is_empty() {
            return false;
        }
        match process_exists(row.pid) {
            Some(false) => true,
            Some(true) => process_start(row.pid).is_some_and(|start| start != row.pid_start),
            None => false,
        }
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn machine_identity() -> String {
    let boot = read_trimmed("/proc/sys/kernel/random/boot_id");
    let host = read_trimmed("/proc/sys/kernel/hostname");
    let pidns = std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    if boot.is_empty() || pidns.is_empty() {
        // Without these a pid means nothing across processes: rely on heartbeats.
        return String::new();
    }
    format!("{host} {boot} {pidns}")
}

/// Whether a process `pid` exists (`kill(pid, 0)`: ESRCH means no, EPERM
/// means it exists but is not ours); `None` if that cannot be told.
fn process_exists(pid: i64) -> Option<bool> {
    use nix::errno::Errno;
    let pid = i32::try_from(pid).ok().filter(|p| *p > 0)?;
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) | Err(Errno::EPERM) => Some(true),
        Err(Errno::ESRCH) => Some(false),
        Err(_) => None,
    }
}

/// Field 22 of `/proc/<pid>/stat` (after the parenthesised command name, which
/// may itself hold spaces or parentheses).
fn process_start(pid: i64) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Fields after the name start at field 3 (state); start time is field 22.
    after_name.split_whitespace().nth(19).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row_of(i: &Instance, heartbeat_at: i64) -> InstanceRow {
        InstanceRow {
            id: i.id.clone(),
            machine: i.machine.clone(),
            pid: i.pid,
            pid_start: i.pid_start.clone(),
            heartbeat_at,
            stopped_at: None,
        }
    }

    #[test]
    fn a_live_process_on_this_machine_is_not_dead() {
        let me = Instance::this_process();
        assert!(!me.pid_start.is_empty(), "this test runs on Linux");
        let other = Instance::this_process(); // same process, another instance id
        assert!(!me.sees_dead(&row_of(&other, 100), 100));
        // Its own row never counts as dead, even when stale.
        assert!(!me.sees_dead(&row_of(&me, 0), 100));
    }

    #[test]
    fn stopped_stale_or_vanished_instances_are_dead() {
        let me = Instance::this_process();
        let other = Instance::this_process();
        let mut stopped = row_of(&other, 100);
        stopped.stopped_at = Some(100);
        assert!(me.sees_dead(&stopped, 100));
        assert!(me.sees_dead(&row_of(&other, 100), 100 + STALE_AFTER_SECS));
        // The same pid with another start time is another process (pid reuse).
        let mut reused = row_of(&other, 100);
        reused.pid_start = "1".into();
        assert!(me.sees_dead(&reused, 100));
        // A child that has exited.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i64;
        child.wait().unwrap();
        let mut gone = row_of(&other, 100);
        gone.pid = pid;
        assert!(me.sees_dead(&gone, 100));
        // A pid that cannot be a process is not taken as proof of anything.
        let mut nonsense = row_of(&other, 100);
        nonsense.pid = -1;
        assert!(!me.sees_dead(&nonsense, 100));
        // Another machine: only the heartbeat tells.
        let mut remote = row_of(&other, 100);
        remote.machine = "elsewhere".into();
        remote.pid_start = "1".into();
        assert!(!me.sees_dead(&remote, 101));
    }
}
