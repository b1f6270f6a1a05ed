//! Per-thread cgroup v2: where the host delegates a writable subtree, every
//! process of a thread lives in its own cgroup (limits: `memory.max`,
//! `pids.max`, `cpu.max`; kill: `cgroup.kill`). A process cannot leave its
//! cgroup without write access to cgroupfs, which the sandbox denies, so this
//! is the tracking that `setsid` or a scrubbed environment cannot escape.
//! The same handles serve a thread's cgroup in the v1 `pids` hierarchy
//! (`cgroup_v1.rs`), where v2 offers no `pids` controller or no subtree.

use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The controllers whose limits the launcher sets.
pub(crate) const LIMIT_CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

/// Whether a delegated cgroup v2 subtree is usable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CgroupProbe {
    /// The runner may create child cgroups under `dir`.
    Available {
        /// The runner's own cgroup v2 directory (or the operator's choice).
        dir: PathBuf,
        /// Controllers offered to children (`cgroup.controllers`).
        controllers: Vec<String>,
        /// Whether a child cgroup has `cgroup.kill` (kernel >= 5.14).
        kill: bool,
    },
    /// No usable subtree, and why.
    Unavailable {
        /// What is missing.
        reason: String,
    },
}

impl fmt::Display for CgroupProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CgroupProbe::Available {
                dir,
                controllers,
                kill,
            } => write!(
                f,
                "v2 at {} (controllers: {}; cgroup.kill: {})",
                dir.display(),
                if controllers.is_empty() {
                    "none".to_string()
                } else {
                    controllers.join(" ")
                },
                if *kill { "yes" } else { "no" }
            ),
            CgroupProbe::Unavailable { reason } => write!(f, "unavailable ({reason})"),
        }
    }
}

/// The default `pids.max` of a thread: tasks (threads count) of all its
/// processes at once. Far above what an agent's tools use (a CLI, a shell,
/// a compiler per core, a language server), far below what exhausts a
/// host's pid space (`kernel.pid_max` is 32768 on many hosts).
pub const DEFAULT_PIDS_MAX: u64 = 1024;

/// Limits for one thread's cgroup; `None` leaves the kernel default (max).
/// The default bounds the thread's processes ([`DEFAULT_PIDS_MAX`]) and
/// nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupLimits {
    /// `memory.max` in bytes.
    pub memory_max: Option<u64>,
    /// `pids.max`.
    pub pids_max: Option<u64>,
    /// `cpu.max` as (quota, period) in microseconds.
    pub cpu_max: Option<(u64, u64)>,
}

impl Default for CgroupLimits {
    fn default() -> Self {
        CgroupLimits {
            memory_max: None,
            pids_max: Some(DEFAULT_PIDS_MAX),
            cpu_max: None,
        }
    }
}

impl CgroupLimits {
    /// True when no limit is set.
    pub fn is_empty(&self) -> bool {
        self.memory_max.is_none() && self.pids_max.is_none() && self.cpu_max.is_none()
    }

    /// The controllers these limits need.
    pub(crate) fn controllers(&self) -> Vec<&'static str> {
        let mut c = Vec::new();
        if self.memory_max.is_some() {
            c.push("memory");
        }
        if self.pids_max.is_some() {
            c.push("pids");
        }
        if self.cpu_max.is_some() {
            c.push("cpu");
        }
        c
    }
}

/// Finds the runner's own cgroup v2 directory and checks that it is
/// delegated (a child can be created and removed).
pub fn probe_cgroup() -> CgroupProbe {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    match locate_v2(&mountinfo, &own) {
        Ok(dir) => probe_cgroup_at(&dir),
        Err(reason) => CgroupProbe::Unavailable { reason },
    }
}

/// Checks that `dir` is a writable cgroup v2 directory.
pub fn probe_cgroup_at(dir: &Path) -> CgroupProbe {
    if !dir.join("cgroup.procs").is_file() {
        return CgroupProbe::Unavailable {
            reason: format!("{} is not a cgroup v2 directory", dir.display()),
        };
    }
    let kill = match with_trial_child(dir, |trial| trial.join("cgroup.kill").exists()) {
        Ok(kill) => kill,
        Err(why) => {
            return CgroupProbe::Unavailable {
                reason: format!(
                    "{} is not delegated to the runner (creating a child cgroup: {why}); use systemd Delegate=yes or a writable cgroupfs",
                    dir.display()
                ),
            };
        }
    };
    let controllers = read_words(&dir.join("cgroup.controllers"));
    CgroupProbe::Available {
        dir: dir.to_path_buf(),
        controllers,
        kill,
    }
}

/// Creates a trial child cgroup under `dir` (v1 or v2), tells what `check`
/// sees in it, and removes it again. `Err`: why the runner may not create
/// children there, named by its errno (the usual, expected answer on hosts
/// without delegation, so logs do not read like a failing file operation).
pub(crate) fn with_trial_child<T>(dir: &Path, check: impl FnOnce(&Path) -> T) -> Result<T, String> {
    let trial = dir.join(format!(
        "agent-launcher-probe-{}",
        uuid::Uuid::new_v4().simple()
    ));
    if let Err(e) = std::fs::create_dir(&trial) {
        return Err(match e.raw_os_error() {
            Some(libc::EACCES) => "EACCES".to_string(),
            Some(libc::EPERM) => "EPERM".to_string(),
            Some(libc::EROFS) => "EROFS, cgroupfs is read-only".to_string(),
            _ => e.to_string(),
        });
    }
    let seen = check(&trial);
    if let Err(e) = std::fs::remove_dir(&trial) {
        tracing::warn!(dir = %trial.display(), error = %e, "cannot remove probe cgroup");
    }
    Ok(seen)
}

/// The cgroup v2 directory of this process from `/proc/self/mountinfo` and
/// `/proc/self/cgroup` texts.
pub(crate) fn locate_v2(mountinfo: &str, self_cgroup: &str) -> Result<PathBuf, String> {
    let path = self_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("no cgroup v2 membership in /proc/self/cgroup (cgroup v1 only)")?;
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        if right.split_whitespace().next() != Some("cgroup2") {
            continue;
        }
        let fields: Vec<&str> = left.split_whitespace().collect();
        let (Some(root), Some(mount), Some(opts)) = (fields.get(3), fields.get(4), fields.get(5))
        else {
            continue;
        };
        if opts.split(',').any(|o| o == "ro") {
            return Err(format!("cgroup2 at {mount} is mounted read-only"));
        }
        let rel = if *root == "/" {
            path
        } else if let Some(rest) = path.strip_prefix(root) {
            rest
        } else {
            continue;
        };
        let rel = rel.trim_start_matches('/');
        let dir = Path::new(mount).join(rel);
        if rel.split('/').any(|c| c == "..") {
            return Err(format!("unexpected cgroup path {path}"));
        }
        return Ok(dir);
    }
    Err("no cgroup2 file system mounted".to_string())
}

fn read_words(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn write_file(path: &Path, value: &str) -> io::Result<()> {
    std::fs::write(path, value)
        .map_err(|e| io::Error::new(e.kind(), format!("write {}: {e}", path.display())))
}

/// The launcher's own subtree `<parent>/<scope>`: one child per thread.
/// `<scope>` holds no process, so controllers can be enabled for its
/// children.
#[derive(Clone, Debug)]
pub struct CgroupRoot {
    dir: PathBuf,
    controllers: Vec<String>,
}

impl CgroupRoot {
    /// Creates (or reuses) `<parent>/<scope>` and enables the `wanted`
    /// controllers for thread cgroups where the parent offers them. Returns
    /// the root and notes on what could not be enabled.
    pub fn setup(parent: &Path, scope: &str, wanted: &[&str]) -> io::Result<(Self, Vec<String>)> {
        let dir = parent.join(scope);
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("mkdir {}: {e}", dir.display()),
                ));
            }
        }
        let mut notes = Vec::new();
        let offered = read_words(&parent.join("cgroup.controllers"));
        for c in wanted {
            if !offered.iter().any(|o| o == c) {
                notes.push(format!(
                    "cgroup controller {c} not offered by {} (cgroup.controllers)",
                    parent.display()
                ));
                continue;
            }
            if let Err(e) = enable(parent, c).and_then(|()| enable(&dir, c)) {
                notes.push(format!("cgroup controller {c}: {e}"));
            }
        }
        let controllers = read_words(&dir.join("cgroup.subtree_control"));
        Ok((CgroupRoot { dir, controllers }, notes))
    }

    /// The launcher's root `dir` in the v1 hierarchy of `controller`
    /// (created by the caller): v1 has no controllers to enable.
    pub(crate) fn v1(dir: PathBuf, controller: &str) -> Self {
        CgroupRoot {
            dir,
            controllers: vec![controller.to_string()],
        }
    }

    /// The `<parent>/<scope>` directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Controllers enabled for thread cgroups.
    pub fn controllers(&self) -> &[String] {
        &self.controllers
    }

    /// Creates the cgroup of one thread. `name` must be a launcher-made
    /// token, never an id off the wire.
    pub fn create_thread(&self, name: &str) -> io::Result<ThreadCgroup> {
        if !valid_name(name) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid cgroup name {name:?}"),
            ));
        }
        let dir = self.dir.join(name);
        std::fs::create_dir(&dir)
            .map_err(|e| io::Error::new(e.kind(), format!("mkdir {}: {e}", dir.display())))?;
        ThreadCgroup::at(&dir)
    }

    /// Thread cgroups that exist under this root (a previous run's
    /// leftovers at start-up).
    pub fn thread_cgroups(&self) -> io::Result<Vec<ThreadCgroup>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                out.push(ThreadCgroup::at(&entry.path())?);
            }
        }
        Ok(out)
    }
}

fn enable(dir: &Path, controller: &str) -> io::Result<()> {
    let current = read_words(&dir.join("cgroup.subtree_control"));
    if current.iter().any(|c| c == controller) {
        return Ok(());
    }
    write_file(
        &dir.join("cgroup.subtree_control"),
        &format!("+{controller}"),
    )
}

/// A cgroup name the launcher made: `[A-Za-z0-9_.-]{1,128}`, no dots only.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name.chars().any(|c| c != '.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// One thread's cgroup.
#[derive(Clone, Debug)]
pub struct ThreadCgroup {
    dir: PathBuf,
    procs: CString,
}

impl ThreadCgroup {
    /// A handle on an existing cgroup directory.
    pub fn at(dir: &Path) -> io::Result<Self> {
        let procs = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(ThreadCgroup {
            dir: dir.to_path_buf(),
            procs,
        })
    }

    /// The cgroup directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `cgroup.procs` as a C string, for the child to join before exec.
    pub(crate) fn procs_path(&self) -> &CString {
        &self.procs
    }

    /// Writes the limits whose controller is `enabled`; returns what was set
    /// and what could not be.
    pub fn apply_limits(
        &self,
        limits: &CgroupLimits,
        enabled: &[String],
    ) -> (Vec<String>, Vec<String>) {
        let mut applied = Vec::new();
        let mut missing = Vec::new();
        let mut set = |controller: &str, file: &str, value: Option<String>| {
            let Some(value) = value else { return };
            if !enabled.iter().any(|c| c == controller) {
                missing.push(format!(
                    "{file}={value}: controller {controller} not enabled"
                ));
                return;
            }
            match write_file(&self.dir.join(file), &value) {
                Ok(()) => applied.push(format!("{file}={value}")),
                Err(e) => missing.push(format!("{file}={value}: {e}")),
            }
        };
        set(
            "memory",
            "memory.max",
            limits.memory_max.map(|v| v.to_string()),
        );
        set("pids", "pids.max", limits.pids_max.map(|v| v.to_string()));
        set(
            "cpu",
            "cpu.max",
            limits.cpu_max.map(|(q, p)| format!("{q} {p}")),
        );
        (applied, missing)
    }

    /// The processes in the cgroup.
    pub fn pids(&self) -> io::Result<Vec<i32>> {
        Ok(std::fs::read_to_string(self.dir.join("cgroup.procs"))?
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect())
    }

    /// Whether the cgroup still holds a live task, as `cgroup.events`
    /// says (`populated`): what `rmdir` checks. `cgroup.procs` lists
    /// thread-group leaders, and is empty already while the other threads
    /// of a killed process (node's, say) are still exiting; removing the
    /// cgroup then fails with EBUSY. A v1 cgroup has no `cgroup.events`:
    /// its `tasks` lists every live thread. `None` where neither file is.
    fn populated(&self) -> Option<bool> {
        if let Ok(events) = std::fs::read_to_string(self.dir.join("cgroup.events")) {
            return Some(events.lines().any(|l| l.trim() == "populated 1"));
        }
        let tasks = std::fs::read_to_string(self.dir.join("tasks")).ok()?;
        Some(!tasks.trim().is_empty())
    }

    /// Kills every process of the cgroup (`cgroup.kill`, or SIGKILL to each
    /// member where the kernel or a v1 hierarchy lacks it, again until none
    /// is left: a process forking meanwhile is seen on the next read) and
    /// waits up to `wait` for it to be
    /// empty, down to its last exiting thread ([`Self::populated`]).
    /// Returns how many processes were still there at the end.
    pub fn kill(&self, wait: Duration) -> io::Result<usize> {
        let kill_file = self.dir.join("cgroup.kill");
        let use_kill_file = kill_file.exists();
        let deadline = Instant::now() + wait;
        loop {
            if use_kill_file {
                write_file(&kill_file, "1")?;
            } else {
                for pid in self.pids()? {
                    // SAFETY: kill has no memory preconditions.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            let left = self.pids()?.len();
            let empty = left == 0 && self.populated() != Some(true);
            if empty || Instant::now() >= deadline {
                return Ok(left);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Removes the (empty) cgroup.
    pub fn remove(&self) -> io::Result<()> {
        std::fs::remove_dir(&self.dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_v2_in_hybrid_and_unified_layouts() {
        let hybrid = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
                      39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n";
        assert_eq!(
            locate_v2(hybrid, "4:memory:/x\n0::/\n").unwrap(),
            PathBuf::from("/sys/fs/cgroup/unified")
        );
        let unified = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            locate_v2(unified, "0::/system.slice/agent-runner.service\n").unwrap(),
            PathBuf::from("/sys/fs/cgroup/system.slice/agent-runner.service")
        );
        assert!(locate_v2(unified, "4:memory:/x\n").is_err());
        assert!(locate_v2("", "0::/\n").is_err());
        let ro = "30 23 0:26 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n";
        assert!(locate_v2(ro, "0::/\n").unwrap_err().contains("read-only"));
    }

    #[test]
    fn limit_files_are_written_only_for_enabled_controllers() {
        let dir = tempfile::tempdir().unwrap();
        let cg = ThreadCgroup::at(dir.path()).unwrap();
        let limits = CgroupLimits {
            memory_max: Some(256 << 20),
            pids_max: Some(64),
            cpu_max: Some((50_000, 100_000)),
        };
        let (applied, missing) =
            cg.apply_limits(&limits, &["memory".to_string(), "cpu".to_string()]);
        assert_eq!(
            applied,
            vec!["memory.max=268435456", "cpu.max=50000 100000"]
        );
        assert_eq!(missing.len(), 1);
        assert!(missing[0].starts_with("pids.max=64"));
        let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
        assert_eq!(read("memory.max"), "268435456");
        assert_eq!(read("cpu.max"), "50000 100000");
        assert!(!dir.path().join("pids.max").exists());
        assert_eq!(limits.controllers(), vec!["memory", "pids", "cpu"]);
    }

    #[test]
    fn kill_writes_cgroup_kill_and_reads_members() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cgroup.kill"), "").unwrap();
        std::fs::write(dir.path().join("cgroup.procs"), "").unwrap();
        let cg = ThreadCgroup::at(dir.path()).unwrap();
        assert_eq!(cg.kill(Duration::ZERO).unwrap(), 0);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("cgroup.kill")).unwrap(),
            "1"
        );
        std::fs::write(dir.path().join("cgroup.procs"), "12\n34\n").unwrap();
        assert_eq!(cg.pids().unwrap(), vec![12, 34]);
    }

    /// `cgroup.procs` empties before the last thread of a killed process
    /// has exited; the kill waits for `populated 0`, or removing the
    /// cgroup right after fails (EBUSY: seen when a stop came just after
    /// the codex probe, whose node process has many threads).
    #[test]
    fn kill_waits_for_the_last_thread_to_exit() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cgroup.kill"), "").unwrap();
        std::fs::write(dir.path().join("cgroup.procs"), "").unwrap();
        let events = dir.path().join("cgroup.events");
        std::fs::write(&events, "populated 1\nfrozen 0\n").unwrap();
        let cg = ThreadCgroup::at(dir.path()).unwrap();
        let exiting = std::thread::spawn({
            let events = events.clone();
            move || {
                std::thread::sleep(Duration::from_millis(100));
                // Whole at once: the kill may read it at any moment.
                let next = events.with_extension("next");
                std::fs::write(&next, "populated 0\nfrozen 0\n").unwrap();
                std::fs::rename(&next, &events).unwrap();
            }
        });
        assert_eq!(cg.kill(Duration::from_secs(30)).unwrap(), 0);
        assert_eq!(
            std::fs::read_to_string(&events).unwrap(),
            "populated 0\nfrozen 0\n",
            "returned while a thread was still exiting"
        );
        exiting.join().unwrap();
    }

    #[test]
    fn setup_enables_only_offered_controllers() {
        let parent = tempfile::tempdir().unwrap();
        std::fs::write(parent.path().join("cgroup.controllers"), "cpu pids\n").unwrap();
        let (root, notes) =
            CgroupRoot::setup(parent.path(), "scope1", &["memory", "pids"]).unwrap();
        assert_eq!(
            std::fs::read_to_string(parent.path().join("cgroup.subtree_control")).unwrap(),
            "+pids"
        );
        assert!(notes.iter().any(|n| n.contains("memory not offered")));
        assert_eq!(root.dir(), parent.path().join("scope1"));
    }

    #[test]
    fn names_are_checked() {
        assert!(valid_name("t-0123abcd"));
        assert!(!valid_name(".."));
        assert!(!valid_name("a/b"));
        assert!(!valid_name(""));
    }
}
