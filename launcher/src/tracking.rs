//! Finding and killing every process of a thread without cgroups: each
//! process a thread starts carries an unguessable tag in its environment
//! (`AGENT_LAUNCHER_TAG=<scope>.<token>`), inherited by everything it starts,
//! `setsid` or not. The runner (root, or the same uid) reads
//! `/proc/<pid>/environ` to find them. A process that re-executes itself
//! with a scrubbed environment drops the tag: the cgroup path (a thread's
//! v2 or v1 `pids` cgroup) has no such gap, and README.md says so.
//! [`process_tag`] reads one process's tag the same way, for a caller
//! that judges a single process (the runner's admin-socket peer check).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cgroup::{CgroupRoot, ThreadCgroup};
use crate::thread_cgroups::kill_counted;

/// The environment variable holding a process's thread tag.
pub const TAG_VAR: &str = "AGENT_LAUNCHER_TAG";

/// A fresh tag `<scope>.<32 hex>` for one thread.
pub(crate) fn new_tag(scope: &str) -> String {
    format!("{scope}.{}", uuid::Uuid::new_v4().simple())
}

/// Where the kernel shows processes (the scans read only this one).
const PROC: &str = "/proc";

/// How long a scan waits for processes caught in the middle of an exec
/// to show their new environment (see [`Tag::Empty`]). An exec takes
/// micro- to milliseconds; the bound only keeps a scan from hanging on a
/// process the kernel holds there (a stalled binary read, say).
const SETTLE_WAIT: Duration = Duration::from_millis(200);

/// What `/proc/<pid>` says of a process's tag.
enum Tag {
    /// Its tag.
    Of(String),
    /// No tag: a zombie or kernel thread, gone once its environment was
    /// read, or an environment without one. (An environment that cannot
    /// be read at all is an error of [`tag_of`].)
    Untagged,
    /// A live process whose environment read empty, with where `stat`
    /// then put its environment (`env_start`, `env_end`). That is what a
    /// process caught in an exec looks like: between its new address
    /// space and its new environment the kernel reports an empty
    /// environment, and the two addresses are 0, then equal, then apart
    /// (as the exec lays the environment out). A scan that took that for
    /// "untagged" missed a thread's process that happened to be exec-ing
    /// (seen in CI: a leftover `setsid sleep` swept while `setsid` exec'd
    /// `sleep`). So it is read again: only the same empty environment
    /// twice, a millisecond apart (an exec places the stack, and so the
    /// addresses, afresh), is a process started with none.
    Empty(EmptyAt),
}

/// Where `stat` put an environment that read empty (`env_start`,
/// `env_end`), if it says.
type EmptyAt = Option<(u64, u64)>;

/// Whether `at` is an environment laid out (and empty), not one an exec
/// has yet to lay out.
fn laid_out(at: EmptyAt) -> bool {
    matches!(at, Some((start, end)) if start == end && start != 0)
}

/// Whether an environment that read empty at `at`, having read empty at
/// `seen` the time before (`None` at the first read), is settled: the same
/// laid-out empty environment twice is a process started with none.
fn settled(seen: EmptyAt, at: EmptyAt) -> bool {
    laid_out(at) && seen == at
}

/// `PF_KTHREAD` in `/proc/<pid>/stat`'s flags: a kernel thread, which has
/// no environment at all.
const PF_KTHREAD: u64 = 0x0020_0000;

/// The size of the one read [`read_environ`] takes first.
const ENVIRON_READ: usize = 64 * 1024;

/// The tag of process `pid` under `proc` (its environment read into
/// `buf`); an error when its environment cannot be read (it is gone, or
/// not ours to read).
fn tag_of(proc: &Path, pid: i32, buf: &mut Vec<u8>) -> std::io::Result<Tag> {
    let environ = read_environ(proc, pid, buf)?;
    if environ.is_empty() {
        return Ok(empty_environment(proc, pid));
    }
    Ok(tag_in(environ).map_or(Tag::Untagged, |v| {
        Tag::Of(String::from_utf8_lossy(v).into_owned())
    }))
}

/// The value of the tag variable in an environment block (what
/// `/proc/<pid>/environ` holds: `NAME=value` entries, each ended by a
/// NUL), if it has one. The one place that says what a tag is.
fn tag_in(environ: &[u8]) -> Option<&[u8]> {
    let prefix = format!("{TAG_VAR}=");
    environ
        .split(|b| *b == 0)
        .find_map(|entry| entry.strip_prefix(prefix.as_bytes()))
}

/// The tag process `pid` under `proc_root` (`/proc`, or a tree laid out
/// like it) carries, read as a scan reads it: its environment in one go,
/// and an environment that reads empty read again every millisecond
/// (up to 200 ms) until it shows one, or the same laid-out empty
/// one twice, so a process caught in an exec is not taken for untagged.
/// `Ok(None)`: no tag (no environment, one without a tag, a zombie or a
/// kernel thread). An error: its environment cannot be read (gone, or
/// another uid's or a non-dumpable process's without root). Blocking:
/// at most 200 ms of 1 ms sleeps; one 64 KiB buffer per call.
/// To ask about one thread's tag, compare the tag returned with it.
pub fn process_tag(proc_root: &Path, pid: i32) -> std::io::Result<Option<String>> {
    let mut buf = Vec::new();
    let deadline = Instant::now() + SETTLE_WAIT;
    let mut seen = None;
    loop {
        match tag_of(proc_root, pid, &mut buf)? {
            Tag::Of(tag) => return Ok(Some(tag)),
            Tag::Empty(at) if !settled(seen, at) && Instant::now() < deadline => seen = at,
            Tag::Empty(_) | Tag::Untagged => return Ok(None),
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The environment of process `pid`, in as few reads as it takes. Each
/// read of `/proc/<pid>/environ` copies from the address space the
/// process has at that moment, so a read in small pieces (as
/// `std::fs::read` does, from 32 bytes up) could take its start from one
/// exec and, cut off, find the next one not laid out yet: a tag past the
/// first pieces would be lost. One 64 KiB read holds any usual
/// environment whole; `buf`, kept across a scan, is where it goes.
fn read_environ<'b>(proc: &Path, pid: i32, buf: &'b mut Vec<u8>) -> std::io::Result<&'b [u8]> {
    use std::io::Read;
    let mut file = std::fs::File::open(proc.join(pid.to_string()).join("environ"))?;
    if buf.len() < ENVIRON_READ {
        buf.resize(ENVIRON_READ, 0);
    }
    let mut len = 0;
    loop {
        let n = file.read(&mut buf[len..])?;
        if n == 0 {
            return Ok(&buf[..len]);
        }
        len += n;
        if len == buf.len() {
            buf.resize(len * 2, 0);
        }
    }
}

/// [`Tag::Empty`] for a live user process whose environment read empty;
/// [`Tag::Untagged`] for a zombie, a kernel thread or one gone.
/// (A `stat` too short to say, as a test's fake `/proc` may hold, reads as
/// a kernel thread's: nothing to wait for.)
fn empty_environment(proc: &Path, pid: i32) -> Tag {
    let Ok(stat) = std::fs::read_to_string(proc.join(pid.to_string()).join("stat")) else {
        return Tag::Untagged;
    };
    // The command name (field 2) may hold spaces and parentheses: fields
    // are counted after its last ')'. `fields[0]` is field 3.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return Tag::Untagged;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let number = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    let live = fields
        .first()
        .is_some_and(|state| !matches!(*state, "Z" | "X" | "x"));
    let kernel = number(9).is_none_or(|flags| flags & PF_KTHREAD != 0);
    if !live || kernel {
        return Tag::Untagged;
    }
    Tag::Empty(number(50).zip(number(51)))
}

/// Every process (but this one) whose tag satisfies `matches`. A process
/// whose environment reads empty is read again until it shows one, or
/// shows the same empty one twice (or [`SETTLE_WAIT`] has passed).
fn scan(matches: impl Fn(&str) -> bool) -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let proc = Path::new(PROC);
    let Ok(dir) = std::fs::read_dir(proc) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut unsettled = Vec::new();
    let mut buf = Vec::new();
    // `seen`: where the process's environment read empty last time
    // (`None` at the first read).
    // An environment that cannot be read is no tag the scan can see.
    let mut take = |pid: i32, seen: EmptyAt, unsettled: &mut Vec<(i32, EmptyAt)>| match tag_of(
        proc, pid, &mut buf,
    ) {
        Ok(Tag::Of(tag)) if matches(&tag) => out.push((pid, tag)),
        Ok(Tag::Empty(at)) if !settled(seen, at) => unsettled.push((pid, at)),
        Ok(Tag::Of(_) | Tag::Untagged | Tag::Empty(_)) | Err(_) => {}
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if pid != me {
            take(pid, None, &mut unsettled);
        }
    }
    let deadline = Instant::now() + SETTLE_WAIT;
    while !unsettled.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
        for (pid, at) in std::mem::take(&mut unsettled) {
            take(pid, at, &mut unsettled);
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
    let cgroups: Vec<ThreadCgroup> = roots
        .iter()
        .flat_map(|root| root.thread_cgroups().unwrap_or_default())
        .collect();
    // What the cgroups end is gone before the tag pass, which counts what
    // it signals itself.
    let (killed_in_cgroups, survivors) = kill_counted(&cgroups.iter().collect::<Vec<_>>(), wait);
    for cg in &cgroups {
        if cg.pids().is_ok_and(|pids| pids.is_empty())
            && let Err(e) = cg.remove()
        {
            tracing::warn!(cgroup = %cg.dir().display(), error = %e, "cannot remove leftover cgroup");
        }
    }
    let mut report = kill_matching(in_scope(scope), wait);
    report.killed += killed_in_cgroups;
    report.survivors.extend(survivors);
    report.cgroups = cgroups.iter().map(|cg| cg.dir().to_path_buf()).collect();
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shell script, tagged `tag`, that does nothing but exec itself
    /// (and the directory holding it, removed when dropped).
    fn execing_itself(tag: &str) -> (tempfile::TempDir, std::process::Child) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("again");
        std::fs::write(&script, "#!/bin/sh\nexec \"$0\"\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let child = std::process::Command::new(&script)
            .env(TAG_VAR, tag)
            .spawn()
            .unwrap();
        (dir, child)
    }

    /// A process that does nothing but exec itself spends much of its
    /// life between an exec's new address space and its environment: a
    /// scan still finds it every time.
    #[test]
    fn a_process_caught_mid_exec_is_still_found() {
        let tag = new_tag("midexec");
        let (_dir, mut child) = execing_itself(&tag);
        let pid = child.id() as i32;
        let mut missed = 0;
        for _ in 0..300 {
            if tagged_pids(&tag) != vec![pid] {
                missed += 1;
            }
        }
        let report = kill_tagged(&tag, Duration::from_secs(5));
        child.wait().unwrap();
        assert_eq!(missed, 0, "of 300 scans");
        assert_eq!(report.killed, 1, "{report:?}");
    }

    /// [`process_tag`] reads a process as a scan does: one that keeps
    /// exec'ing itself is judged tagged every time.
    #[test]
    fn process_tag_finds_a_process_caught_mid_exec() {
        let tag = new_tag("midexec1");
        let (_dir, mut child) = execing_itself(&tag);
        let pid = child.id() as i32;
        let misread: Vec<_> = (0..300)
            .map(|_| process_tag(Path::new(PROC), pid))
            .filter(|read| !matches!(read, Ok(Some(t)) if *t == tag))
            .collect();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            misread.is_empty(),
            "{} of 300 misread, as {:?}",
            misread.len(),
            misread.first()
        );
    }

    /// A `stat` line with `flags` (field 9) and `env_start`/`env_end`
    /// (fields 50, 51), as a fake `/proc/<pid>/stat`.
    fn stat_line(pid: i32, flags: u64, env: (u64, u64)) -> String {
        let mut fields = vec!["0".to_string(); 50];
        fields[0] = "S".into();
        fields[9 - 3] = flags.to_string();
        fields[50 - 3] = env.0.to_string();
        fields[51 - 3] = env.1.to_string();
        format!("{pid} (a (b) c) {}\n", fields.join(" "))
    }

    #[test]
    fn process_tag_reads_a_tree_laid_out_like_proc() {
        let root = tempfile::tempdir().unwrap();
        let entries: [(i32, &[u8], Option<String>); 5] = [
            (1, b"X=1\0AGENT_LAUNCHER_TAG=s.abc\0", None),
            (2, b"AGENT_LAUNCHER_TAGGED=1\0PATH=/bin\0", None),
            // Empty: too short a `stat` to say, laid out, not laid out.
            (3, b"", Some("3 (x) S 1 1 1".into())),
            (4, b"", Some(stat_line(4, 0, (4096, 4096)))),
            (5, b"", Some(stat_line(5, 0, (0, 0)))),
        ];
        for (pid, environ, stat) in &entries {
            let dir = root.path().join(pid.to_string());
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join("environ"), environ).unwrap();
            if let Some(stat) = stat {
                std::fs::write(dir.join("stat"), stat).unwrap();
            }
        }
        let read = |pid| process_tag(root.path(), pid);
        assert_eq!(read(1).unwrap().as_deref(), Some("s.abc"));
        assert_eq!(read(2).unwrap(), None);
        let started = Instant::now();
        assert_eq!(read(3).unwrap(), None);
        assert_eq!(read(4).unwrap(), None);
        assert!(started.elapsed() < SETTLE_WAIT, "{:?}", started.elapsed());
        // An exec that never lays its environment out: given up on.
        let started = Instant::now();
        assert_eq!(read(5).unwrap(), None);
        assert!(started.elapsed() >= SETTLE_WAIT, "{:?}", started.elapsed());
        assert!(read(6).is_err(), "no such process");
    }

    #[test]
    fn a_kernel_thread_or_a_zombie_is_not_waited_for() {
        assert!(
            matches!(empty_environment(Path::new(PROC), 2), Tag::Untagged),
            "kthreadd"
        );
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        // Not reaped yet: a zombie once it has exited.
        let zombie = (0..500).any(|_| {
            std::thread::sleep(Duration::from_millis(2));
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
        });
        assert!(zombie);
        assert!(matches!(
            empty_environment(Path::new(PROC), pid),
            Tag::Untagged
        ));
        child.wait().unwrap();
    }

    /// A process started with no environment at all is untagged, and a
    /// scan does not wait [`SETTLE_WAIT`] on it.
    #[test]
    fn an_empty_environment_is_settled_at_once() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env_clear()
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        assert!((0..500).any(|_| {
            std::thread::sleep(Duration::from_millis(2));
            matches!(empty_environment(Path::new(PROC), pid), Tag::Empty(at) if laid_out(at))
        }));
        let started = Instant::now();
        assert!(tagged_pids("nothing.here").is_empty());
        let took = started.elapsed();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(took < SETTLE_WAIT, "{took:?}");
    }

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
