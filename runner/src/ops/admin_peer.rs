//! Who may use the admin socket: the host's operator, never an agent.
//!
//! The socket is 0600 in the state dir, so the kernel lets only the
//! runner's uid (and root) connect; but agents without `--agent-uid` run as
//! the runner's uid, and every thread's git config names the state dir. So
//! each client's `SO_PEERCRED` (pid, uid) is checked, and it is refused
//! when any of these holds:
//!
//! - its uid is the agents' uid (`--agent-uid`);
//! - its pid is unknown (0: a pid namespace the runner cannot see);
//! - it is in a cgroup under a launcher scope (`agent-runner-<12 hex>`:
//!   a thread cgroup of this or another runner; a process cannot leave its
//!   thread cgroup, the sandbox denies it cgroupfs);
//! - it descends from the runner process (every agent process does until
//!   it is orphaned and re-parented);
//! - its environment carries a thread tag (`AGENT_LAUNCHER_TAG`, inherited
//!   by everything a thread starts, `setsid` or not);
//! - it runs as the runner's uid and its environment cannot be read (an
//!   agent that made itself non-dumpable to hide its tag), or its `/proc`
//!   entry is gone (it exited: nothing left to check).
//!
//! What does not hold: without delegated cgroups, an agent process that
//! scrubs its environment (`env -i`), double-forks so it is re-parented
//! away from the runner, and then connects is not recognised; a peer whose
//! pid is reused by an operator's process between `connect` and the check
//! would be judged as that process (the check reads `/proc` right after
//! accepting). docs/security.md says so.

use std::path::Path;

use agent_launcher::TAG_VAR;

/// What the check needs to know about this runner.
#[derive(Debug, Clone)]
pub struct Guard {
    /// The runner's effective uid.
    pub runner_uid: u32,
    /// The runner's pid.
    pub runner_pid: u32,
    /// The agents' uid (`--agent-uid`), when they run as another user.
    pub agent_uid: Option<u32>,
    /// Where `/proc` is (tests point it elsewhere).
    pub proc_root: std::path::PathBuf,
}

impl Guard {
    /// The guard of this process.
    pub fn current(agent_uid: Option<u32>) -> Self {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let runner_uid = unsafe { libc::geteuid() };
        Self {
            runner_uid,
            runner_pid: std::process::id(),
            agent_uid,
            proc_root: "/proc".into(),
        }
    }

    /// `Ok` when the peer `(uid, pid)` may use the socket; else why not.
    /// Blocking (reads a few small `/proc` files).
    pub fn check(&self, uid: u32, pid: Option<i32>) -> Result<(), String> {
        if Some(uid) == self.agent_uid {
            return Err(format!("uid {uid} is the agents' uid (--agent-uid)"));
        }
        let pid = match pid.and_then(|p| u32::try_from(p).ok()) {
            Some(pid) if pid > 0 => pid,
            _ => return Err("the peer's pid is unknown (another pid namespace?)".into()),
        };
        if pid == self.runner_pid {
            return Ok(());
        }
        let dir = self.proc_root.join(pid.to_string());
        let cgroup = std::fs::read_to_string(dir.join("cgroup"))
            .map_err(|e| format!("pid {pid}: reading its cgroup: {e}"))?;
        if let Some(path) = thread_cgroup(&cgroup) {
            return Err(format!("pid {pid} is in a thread's cgroup ({path})"));
        }
        if self.descends_from_runner(pid) {
            return Err(format!(
                "pid {pid} descends from the runner (an agent process)"
            ));
        }
        match std::fs::read(dir.join("environ")) {
            Ok(environ) if has_tag(&environ) => {
                Err(format!("pid {pid} carries a thread tag ({TAG_VAR})"))
            }
            Ok(_) => Ok(()),
            // Agents run as the runner's uid or the agents' uid (refused
            // above), with no_new_privs: another uid is not an agent.
            Err(_) if uid != self.runner_uid => Ok(()),
            Err(e) => Err(format!("pid {pid}: reading its environment: {e}")),
        }
    }

    /// Whether the runner is an ancestor of `pid` (walking `PPid`).
    fn descends_from_runner(&self, pid: u32) -> bool {
        let mut at = pid;
        for _ in 0..4096 {
            let Some(parent) = parent_of(&self.proc_root, at) else {
                return false;
            };
            if parent == self.runner_pid {
                return true;
            }
            if parent <= 1 {
                return false;
            }
            at = parent;
        }
        false
    }
}

/// The parent pid of `pid`, from `/proc/<pid>/stat`.
fn parent_of(proc_root: &Path, pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(proc_root.join(pid.to_string()).join("stat")).ok()?;
    // `pid (comm) state ppid …`: comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Whether an environment block (`/proc/<pid>/environ`) has a thread tag.
fn has_tag(environ: &[u8]) -> bool {
    let prefix = format!("{TAG_VAR}=");
    environ
        .split(|b| *b == 0)
        .any(|entry| entry.starts_with(prefix.as_bytes()))
}

/// The cgroup path of `/proc/<pid>/cgroup` that lies under a launcher
/// scope (`agent-runner-` and 12 hex digits, see
/// `crate::host::sandbox::scope_for`), if any.
fn thread_cgroup(cgroup: &str) -> Option<&str> {
    cgroup
        .lines()
        .filter_map(|line| line.splitn(3, ':').nth(2))
        .find(|path| path.split('/').any(is_scope))
}

fn is_scope(component: &str) -> bool {
    component
        .strip_prefix("agent-runner-")
        .is_some_and(|hex| hex.len() == 12 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_proc(entries: &[(u32, u32, &str, &[u8])]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for (pid, ppid, cgroup, environ) in entries {
            let dir = root.path().join(pid.to_string());
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join("stat"), format!("{pid} (a (b) c) S {ppid} 1 1")).unwrap();
            std::fs::write(dir.join("cgroup"), cgroup).unwrap();
            std::fs::write(dir.join("environ"), environ).unwrap();
        }
        root
    }

    fn guard(root: &Path) -> Guard {
        Guard {
            runner_uid: 1000,
            runner_pid: 10,
            agent_uid: Some(2000),
            proc_root: root.to_path_buf(),
        }
    }

    #[test]
    fn operator_passes_agents_do_not() {
        let thread_cg = "0::/user.slice/runner.service/agent-runner-0123456789ab/t1\n";
        let root = fake_proc(&[
            (10, 1, "0::/runner\n", b""),
            // An operator's shell and its client.
            (20, 1, "0::/user.slice/session-1.scope\n", b"HOME=/root\0"),
            (21, 20, "0::/user.slice/session-1.scope\n", b"PATH=/bin\0"),
            // A child of the runner, scrubbed environment, no cgroup.
            (30, 10, "0::/runner\n", b""),
            (31, 30, "0::/runner\n", b""),
            // Re-parented to init, still in its thread cgroup.
            (40, 1, thread_cg, b""),
            // Re-parented to init, no cgroup, but tagged.
            (50, 1, "0::/runner\n", b"X=1\0AGENT_LAUNCHER_TAG=s.abc\0"),
        ]);
        let g = guard(root.path());
        assert_eq!(g.check(1000, Some(21)), Ok(()));
        assert_eq!(g.check(0, Some(20)), Ok(()));
        for (pid, word) in [
            (30, "descends"),
            (31, "descends"),
            (40, "cgroup"),
            (50, "tag"),
        ] {
            let why = g.check(1000, Some(pid)).unwrap_err();
            assert!(why.contains(word), "{pid}: {why}");
        }
        assert!(g.check(2000, Some(21)).unwrap_err().contains("--agent-uid"));
        assert!(g.check(1000, None).unwrap_err().contains("unknown"));
        assert!(g.check(1000, Some(0)).unwrap_err().contains("unknown"));
        // Gone before the check: refused.
        assert!(g.check(1000, Some(99)).is_err());
    }

    #[test]
    fn unreadable_environment_refused_for_the_runners_uid_only() {
        let root = fake_proc(&[(20, 1, "0::/\n", b"")]);
        std::fs::remove_file(root.path().join("20/environ")).unwrap();
        let g = guard(root.path());
        assert!(g.check(1000, Some(20)).unwrap_err().contains("environment"));
        assert_eq!(g.check(0, Some(20)), Ok(()));
    }

    #[test]
    fn scope_names_are_recognised_exactly() {
        assert!(is_scope("agent-runner-0123456789ab"));
        assert!(!is_scope("agent-runner-0123456789a"));
        assert!(!is_scope("agent-runner.service"));
        assert!(thread_cgroup("0::/a/agent-runner-0123456789ab/x\n").is_some());
        assert!(thread_cgroup("0::/system.slice/agent-runner.service\n").is_none());
    }

    #[test]
    fn this_test_process_is_an_operator() {
        let g = Guard::current(None);
        // The test binary is not a descendant of itself nor tagged.
        let me = std::process::id() as i32;
        let g = Guard {
            runner_pid: u32::MAX,
            ..g
        };
        assert_eq!(g.check(g.runner_uid, Some(me)), Ok(()));
    }
}
