//! The command `tessera exec` runs, as a process tree `exec` owns and ends.
//!
//! Why: `exec` revokes what it obtained when the command is done, so "done"
//! must mean every process the command started, not just the first one — a
//! `sh -c 'daemon &'` or a `setsid` child would otherwise keep using the
//! credentials after they were handed back, and a `--token` JWT or `--aws` keys
//! stay valid until they expire. So:
//! - the command leads a process group of its own (signals go to all of it),
//!   and, when `exec` owns the terminal, the terminal is handed to that group
//!   for the command's life (so interactive tools keep working);
//! - `exec` is a child subreaper: a descendant that leaves the group or the
//!   session, orphaned, is re-parented to `exec` instead of init, so it stays
//!   findable;
//! - the command gets `PR_SET_PDEATHSIG` = SIGKILL: if `exec` is killed, the
//!   kernel kills the command (a hostile command can undo this for itself —
//!   which is why the capabilities also lapse on the broker, see `holds`);
//! - when the command exits, what it left behind gets SIGTERM, then SIGKILL
//!   after the grace period, and is reaped.
//!
//! What it cannot do without cgroups or a PID namespace: a process that
//! double-forks faster than it is killed can outrun a sweep for a while (each
//! sweep kills what it finds, and sweeps repeat until none is left or the
//! grace ends); the broker-side hold bounds what such a process can still use.
//!
//! The one `unsafe` block of the workspace is here: `pre_exec`, whose closure
//! runs between fork and exec and calls only async-signal-safe system calls
//! (`prctl`, `getppid`, `sigprocmask`, `tcsetpgrp`, `setns`, `setgroups`,
//! `setgid`, `setuid`), allocating nothing.
//!
//! The command's user (`--user`) is switched here rather than by
//! `Command::uid`, because std switches before `pre_exec` runs, and joining the
//! `--isolate-net` namespace needs the privileges the switch drops. The parent
//! death signal is set after the switch: changing credentials clears it.

use nix::sys::signal::{kill, sigprocmask, SigSet, SigmaskHow, Signal};
use nix::unistd::{getpgrp, getpid, getppid, tcgetpgrp, tcsetpgrp, Pid};
use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;
use std::os::fd::BorrowedFd;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// The running command and the group it leads.
pub struct Tree {
    child: tokio::process::Child,
    group: Pid,
    /// The terminal (stdin) was handed to the command's group and is taken back.
    terminal: Option<BorrowedFd<'static>>,
}

/// Whether stdin is a terminal whose foreground group is `exec`'s own.
fn owns_terminal() -> bool {
    std::io::stdin().is_terminal() && tcgetpgrp(std::io::stdin()).is_ok_and(|g| g == getpgrp())
}

/// Runs `f` with SIGTTOU blocked: a background process may then set the
/// terminal's foreground group (POSIX), instead of being stopped.
fn without_sigttou<T>(f: impl FnOnce() -> T) -> T {
    let mut block = SigSet::empty();
    block.add(Signal::SIGTTOU);
    let mut old = SigSet::empty();
    let blocked = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&block), Some(&mut old)).is_ok();
    let out = f();
    if blocked {
        let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    }
    out
}

/// How the command is attached to `exec`'s terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Session {
    /// Its own process group in `exec`'s session; the terminal, if `exec` owns
    /// it, is handed to that group (interactive tools keep working).
    Shared,
    /// A session of its own, without a controlling terminal: for a command
    /// run as another user (`--user`), which must not reach the terminal of
    /// whoever started `exec` (`TIOCSTI` needs it to be the caller's
    /// controlling terminal, and a session leader cannot take one that is
    /// another session's).
    Detached,
}

/// Starts `cmd` as a tree `exec` owns (see the module docs); as `identity`
/// (uid, gid) when given, supplementary groups dropped; with `netns`, in that
/// network namespace (`exec --isolate-net`), unable to gain privileges.
pub fn spawn(
    mut cmd: tokio::process::Command,
    session: Session,
    netns: Option<&std::os::fd::OwnedFd>,
    identity: Option<(u32, u32)>,
) -> std::io::Result<Tree> {
    // Orphaned descendants come to `exec`, not init. Not fatal if refused
    // (old kernels): the group is still killed.
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let terminal = session == Session::Shared && owns_terminal();
    let parent = getpid();
    #[allow(unsafe_code)]
    // SAFETY: descriptor 0 stays open for `exec`'s whole life (only
    // descriptors above 2 are ever closed), so the borrow never dangles.
    let stdin = unsafe { BorrowedFd::borrow_raw(0) };
    if session == Session::Shared {
        cmd.process_group(0);
    }
    let netns = netns.map(|fd| {
        use std::os::fd::AsRawFd;
        #[allow(unsafe_code)]
        // SAFETY: the caller's descriptor outlives `cmd.spawn()` below, the
        // only time the pre_exec closure that uses the borrow runs.
        unsafe {
            BorrowedFd::borrow_raw(fd.as_raw_fd())
        }
    });
    #[allow(unsafe_code)]
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls; it allocates nothing (errors are raw
    // errno values) and touches no lock.
    unsafe {
        cmd.pre_exec(move || in_child(parent, session, terminal.then_some(stdin), netns, identity));
    }
    let child = cmd.spawn()?;
    let group = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .map(Pid::from_raw)
        .ok_or_else(|| std::io::Error::other("the command has no pid"))?;
    if terminal {
        // Also done in the child; whichever runs first wins, the other is a no-op.
        without_sigttou(|| {
            let _ = tcsetpgrp(stdin, group);
        });
        // `exec` is in the background now: a message it prints must not stop
        // it (SIGTTOU under `stty tostop`), blocked until the terminal is back.
        block_sigttou(true);
    }
    Ok(Tree {
        child,
        group,
        terminal: terminal.then_some(stdin),
    })
}

fn block_sigttou(block: bool) {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTTOU);
    let how = if block {
        SigmaskHow::SIG_BLOCK
    } else {
        SigmaskHow::SIG_UNBLOCK
    };
    let _ = sigprocmask(how, Some(&set), None);
}

/// Between fork and exec, in the child.
fn in_child(
    parent: Pid,
    session: Session,
    terminal: Option<BorrowedFd<'static>>,
    netns: Option<BorrowedFd<'static>>,
    identity: Option<(u32, u32)>,
) -> std::io::Result<()> {
    if let Some(ns) = netns {
        // Before any privilege is dropped: joining a namespace needs CAP_SYS_ADMIN.
        nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET)?;
        // No setuid program may give the command back what leaving needs.
        nix::sys::prctl::set_no_new_privs()?;
    }
    if let Some((uid, gid)) = identity {
        nix::unistd::setgroups(&[])?;
        nix::unistd::setgid(nix::unistd::Gid::from_raw(gid))?;
        nix::unistd::setuid(nix::unistd::Uid::from_raw(uid))?;
    }
    // After the switch: a change of credentials clears the parent death signal.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
    // `exec` died before the line above: nobody would revoke or kill; do not run.
    if getppid() != parent {
        return Err(std::io::Error::from_raw_os_error(nix::libc::ESRCH));
    }
    if session == Session::Detached {
        nix::unistd::setsid()?;
    }
    if let Some(fd) = terminal {
        without_sigttou(|| tcsetpgrp(fd, getpid()))?;
    }
    Ok(())
}

impl Tree {
    /// Waits for the command itself (the group's leader) to exit.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Sends `sig` to the command's whole group.
    pub fn signal(&self, sig: Signal) {
        let _ = kill(Pid::from_raw(-self.group.as_raw()), sig);
    }

    /// SIGKILL to the group and to every descendant found.
    pub fn kill_all(&self) {
        self.signal(Signal::SIGKILL);
        for pid in self.leftovers() {
            let _ = kill(pid, Signal::SIGKILL);
        }
    }

    /// After the command exited: SIGTERM to what it left behind, SIGKILL to
    /// what is still there after `grace`, everything reaped; the terminal is
    /// taken back. Each process is signalled by the pid a fresh `/proc`
    /// snapshot shows, never by the group id: with its leader reaped, the
    /// group id could belong to someone else.
    pub async fn finish(self, grace: Duration) {
        if let Some(fd) = self.terminal {
            without_sigttou(|| {
                let _ = tcsetpgrp(fd, getpgrp());
            });
            block_sigttou(false);
        }
        let deadline = Instant::now() + grace;
        let mut sig = Signal::SIGTERM;
        loop {
            reap();
            let left = self.leftovers();
            if left.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                sig = Signal::SIGKILL;
            }
            for pid in &left {
                let _ = kill(*pid, sig);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Live processes of the command's group, and every live descendant of
    /// `exec` (orphans come to it as subreaper).
    fn leftovers(&self) -> Vec<Pid> {
        let me = getpid().as_raw();
        let procs = processes();
        let mut tree: BTreeSet<i32> = BTreeSet::from([me]);
        loop {
            let before = tree.len();
            for (pid, p) in &procs {
                if tree.contains(&p.ppid) {
                    tree.insert(*pid);
                }
            }
            if tree.len() == before {
                break;
            }
        }
        procs
            .iter()
            .filter(|(pid, p)| {
                **pid != me && p.alive() && (tree.contains(pid) || p.pgrp == self.group.as_raw())
            })
            .map(|(pid, _)| Pid::from_raw(*pid))
            .collect()
    }
}

/// Reaps every exited child (the command's leader is already reaped by tokio).
fn reap() {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    while let Ok(status) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

struct Proc {
    ppid: i32,
    pgrp: i32,
    zombie: bool,
    threads: u32,
}

impl Proc {
    /// A zombie whose other threads still run (its leader called
    /// `pthread_exit`) is alive: it can act, and no `waitpid` reaps it.
    fn alive(&self) -> bool {
        !self.zombie || self.threads > 1
    }
}

/// Every process in `/proc`, by pid.
fn processes() -> BTreeMap<i32, Proc> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if let Some(p) = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|s| parse_stat(&s))
        {
            out.insert(pid, p);
        }
    }
    out
}

/// `pid (comm) state ppid pgrp …`; `comm` may hold spaces and parentheses,
/// so the fields are read after the last `)`.
fn parse_stat(stat: &str) -> Option<Proc> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    // Field 20 (num_threads); after `)` the fields start at 3 (state).
    let threads = fields.nth(20 - 6).and_then(|t| t.parse().ok()).unwrap_or(1);
    Some(Proc {
        ppid,
        pgrp,
        zombie: state == "Z" || state == "X",
        threads,
    })
}

#[cfg(test)]
mod tests {
    use super::parse_stat;

    #[test]
    fn stat_fields_are_read_after_the_command_name() {
        let p = parse_stat("42 (a) b (c) S 7 9 9 0 -1").unwrap();
        assert_eq!((p.ppid, p.pgrp, p.zombie, p.alive()), (7, 9, false, true));
        let z = parse_stat("43 (x) Z 1 1").unwrap();
        assert!(z.zombie && !z.alive());
        // A real line: pid (comm) state ppid pgrp session tty tpgid flags
        // minflt cminflt majflt cmajflt utime stime cutime cstime prio nice threads …
        let line = "44 (t) Z 1 44 44 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 3 0 1 0 0";
        let t = parse_stat(line).unwrap();
        assert_eq!(t.threads, 3);
        assert!(t.alive(), "a zombie leader with live threads is alive");
        assert!(parse_stat("garbage").is_none());
    }
}
