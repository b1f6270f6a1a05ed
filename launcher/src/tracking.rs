//! Finding and killing every process of a thread without cgroups: each
//! process a thread starts carries an unguessable tag in its environment
//! (`AGENT_LAUNCHER_TAG=<scope>.<token>`), inherited by everything it starts,
//! `setsid` or not. The runner (root, or the same uid) reads
//! `/proc/<pid>/environ` to find them. A process that re-executes itself
//! with a scrubbed environment drops the tag: the cgroup path (a thread's
//! v2 or v1 `pids` cgroup) has no such gap, and README.md says so.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::cgroup::CgroupRoot;

/// The environment variable holding a process's thread tag.
pub const TAG_VAR: &str = "AGENT_LAUNCHER_TAG";

/// A fresh tag `<scope>.<32 hex>` for one thread.
pub(crate) fn new_tag(scope: &str) -> String {
    format!("{scope}.{}", uuid::Uuid::new_v4().simple())
}

/// The tag of process `pid`, if it has one (and is readable).
fn tag_of(pid: i32) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{TAG_VAR}=");
    environ
        .split(|b| *b == 0)
        .find_map(|entry| entry.strip_prefix(prefix.as_bytes()))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// Every process (but this one) whose tag satisfies `matches`.
fn scan(matches: impl Fn(&str) -> bool) -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        if let Some(tag) = tag_of(pid)
            && matches(&tag)
        {
            out.push((pid, tag));
        }
    }
    out
}

/// What a kill pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KillReport {
    /// Distinct processes killed (signalled by tag, or gone with the
    /// thread's cgroup).
    pub killed: usize,
    /// Processes still present at the end (could not be killed in time).
    pub survivors: Vec<i32>,
    /// Thread cgroups killed (and removed, when emptied).
    pub cgroups: Vec<PathBuf>,
}

/// The live processes carrying exactly `tag` (a thread's processes, those
/// that left its process group included), for `agent-runner ps`.
pub fn tagged_pids(tag: &str) -> Vec<i32> {
    scan(|t| t == tag).into_iter().map(|(pid, _)| pid).collect()
}

/// SIGKILLs every process carrying exactly `tag`, scanning again until a
/// scan finds none (a process may fork while we scan) or `wait` has passed.
pub fn kill_tagged(tag: &str, wait: Duration) -> KillReport {
    kill_matching(|t| t == tag, wait)
}

fn kill_matching(matches: impl Fn(&str) -> bool, wait: Duration) -> KillReport {
    let deadline = Instant::now() + wait;
    let mut killed = BTreeSet::new();
    loop {
        let found = scan(&matches);
        if found.is_empty() {
            return KillReport {
                killed: killed.len(),
                ..KillReport::default()
            };
        }
        for (pid, _) in &found {
            // SAFETY: kill has no memory preconditions.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
            killed.insert(*pid);
        }
        if Instant::now() >= deadline {
            return KillReport {
                killed: killed.len(),
                survivors: found.into_iter().map(|(p, _)| p).collect(),
                cgroups: Vec::new(),
            };
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What a previous run of a runner with this scope left behind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Leftovers {
    /// (pid, tag) of tagged processes of the scope.
    pub processes: Vec<(i32, String)>,
    /// Thread cgroups under the launcher's cgroup root.
    pub cgroups: Vec<PathBuf>,
}

impl Leftovers {
    /// True when nothing was left behind.
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty() && self.cgroups.is_empty()
    }
}

fn in_scope(scope: &str) -> impl Fn(&str) -> bool + '_ {
    move |tag: &str| {
        tag.strip_prefix(scope)
            .is_some_and(|rest| rest.starts_with('.'))
    }
}

/// Finds processes tagged with `scope` (and thread cgroups under `cgroups`)
/// — for a start-up sweep of what a previous run left behind. Call it
/// before creating this run's threads.
pub fn find_leftovers(scope: &str, cgroups: Option<&CgroupRoot>) -> Leftovers {
    find_leftovers_in(scope, cgroups.as_slice())
}

/// [`find_leftovers`] under each of `roots` (v2, v1 `pids`).
pub(crate) fn find_leftovers_in(scope: &str, roots: &[&CgroupRoot]) -> Leftovers {
    Leftovers {
        processes: scan(in_scope(scope)),
        cgroups: roots
            .iter()
            .flat_map(|root| root.thread_cgroups().unwrap_or_default())
            .map(|c| c.dir().to_path_buf())
            .collect(),
    }
}

/// Kills every leftover of `scope` (cgroups first, then tagged processes)
/// and removes the emptied cgroups.
pub fn sweep_leftovers(scope: &str, cgroups: Option<&CgroupRoot>, wait: Duration) -> KillReport {
    sweep_in(scope, cgroups.as_slice(), wait)
}

/// [`sweep_leftovers`] under each of `roots`, in order (v2 first: its
/// `cgroup.kill` leaves the v1 `pids` cgroups of the same threads empty).
pub(crate) fn sweep_in(scope: &str, roots: &[&CgroupRoot], wait: Duration) -> KillReport {
    let mut cgroup_dirs = Vec::new();
    let mut survivors = Vec::new();
    for root in roots {
        let Ok(list) = root.thread_cgroups() else {
            continue;
        };
        for cg in list {
            match cg.kill(wait) {
                Ok(0) => {
                    if let Err(e) = cg.remove() {
                        tracing::warn!(cgroup = %cg.dir().display(), error = %e, "cannot remove leftover cgroup");
                    }
                }
                Ok(_) => survivors.extend(cg.pids().unwrap_or_default()),
                Err(e) => {
                    tracing::warn!(cgroup = %cg.dir().display(), error = %e, "cannot kill leftover cgroup");
                }
            }
            cgroup_dirs.push(cg.dir().to_path_buf());
        }
    }
    let mut report = kill_matching(in_scope(scope), wait);
    report.survivors.extend(survivors);
    report.cgroups = cgroup_dirs;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_unguessable_and_scoped() {
        let a = new_tag("runner1");
        let b = new_tag("runner1");
        assert_ne!(a, b);
        assert!(a.starts_with("runner1.") && a.len() == "runner1.".len() + 32);
        let f = in_scope("runner1");
        assert!(f(&a));
        assert!(!f("runner10.abc"));
        assert!(!f("runner2.abc"));
    }
}
