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
//!   by everything a thread starts, `setsid` or not), read as the
//!   launcher's own scans read it ([`agent_launcher::process_tag`]: a
//!   process caught mid-exec is not taken for untagged);
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

use agent_launcher::{TAG_VAR, process_tag};

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
    /// Blocking (reads a few small `/proc` files; a peer whose environment
    /// reads empty, as one caught mid-exec does, is read again for up to
    /// 200 ms).
    pub fn check(&self, uid: u32, pid: Option<i32>) -> Result<(), String> {
        if Some(uid) == self.agent_uid {
            return Err(format!("uid {uid} is the agents' uid (--agent-uid)"));
        }
        let Some(raw_pid) = pid.filter(|p| *p > 0) else {
            return Err("the peer's pid is unknown (another pid namespace?)".into());
        };
        let pid = raw_pid.unsigned_abs();
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
        match process_tag(&self.proc_root, raw_pid) {
            Ok(Some(_)) => Err(format!("pid {pid} carries a thread tag ({TAG_VAR})")),
            Ok(None) => Ok(()),
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

    /// A `/proc/<pid>/stat` line: every field up to `env_end` (52), as the
    /// launcher's tag read consults `flags` (9, a user process here) and
    /// `env_start`/`env_end` (50, 51: an environment laid out, so an
    /// empty one is settled after one more read) when an environment
    /// reads empty.
    fn stat_line(pid: u32, ppid: u32) -> String {
        let mut fields = vec!["0".to_string(); 50];
        fields[0] = "S".into();
        fields[1] = ppid.to_string();
        fields[50 - 3] = "4096".into();
        fields[51 - 3] = "4096".into();
        format!("{pid} (a (b) c) {}\n", fields.join(" "))
    }

    fn fake_proc(entries: &[(u32, u32, &str, &[u8])]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for (pid, ppid, cgroup, environ) in entries {
            let dir = root.path().join(pid.to_string());
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join("stat"), stat_line(*pid, *ppid)).unwrap();
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

    /// A peer that keeps exec'ing itself with a thread's tag is refused
    /// every time: an environment read mid-exec is read again, not taken
    /// for an untagged one.
    #[test]
    fn a_tagged_peer_caught_mid_exec_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("again");
        std::fs::write(&script, "#!/bin/sh\nexec \"$0\"\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut child = std::process::Command::new(&script)
            .env(TAG_VAR, "midexec.0123")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // Not the runner's descendant: only the tag can tell.
        let g = Guard {
            runner_pid: u32::MAX,
            ..Guard::current(None)
        };
        let admitted: Vec<_> = (0..300)
            .map(|_| g.check(g.runner_uid, Some(pid)))
            .filter(|r| !r.as_ref().is_err_and(|why| why.contains("tag")))
            .collect();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            admitted.is_empty(),
            "{} of 300 not refused for the tag, as {:?}",
            admitted.len(),
            admitted.first()
        );
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
