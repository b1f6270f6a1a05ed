//! Per-thread cgroup in the cgroup v1 `pids` hierarchy, for hosts that
//! mount their controllers as v1 (the legacy and hybrid layouts): there a
//! delegated v2 subtree, when there is one at all, offers no `pids`
//! controller, and `RLIMIT_NPROC` cannot stand in (it counts every process
//! of the uid, the runner's included, and root ignores it).
//!
//! A thread's processes join `<runner's pids cgroup>/<scope>/<token>`,
//! whose `pids.max` bounds a fork bomb. Like the v2 cgroup, it also tracks:
//! a process cannot leave it without write access to cgroupfs, which the
//! sandbox denies, so a `setsid`, `env -i`, non-dumpable process is still
//! listed in its `cgroup.procs` and killed. v1 has no `cgroup.kill`:
//! [`crate::ThreadCgroup::kill`] SIGKILLs each member until none is left
//! (a dying process cannot fork, so a fork bomb does not outrun it).

use std::io;
use std::path::{Path, PathBuf};

use crate::cgroup::{CgroupRoot, with_trial_child};

/// The v1 controller the launcher uses.
pub(crate) const PIDS: &str = "pids";

/// This process's cgroup directory in the v1 hierarchy of `controller`,
/// from `/proc/self/mountinfo` and `/proc/self/cgroup` texts.
pub(crate) fn locate_v1(
    mountinfo: &str,
    self_cgroup: &str,
    controller: &str,
) -> Result<PathBuf, String> {
    // `<id>:<controllers>:<path>`; co-mounted controllers share a line.
    let path = self_cgroup
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == controller)
                .then_some(path)
        })
        .ok_or_else(|| format!("no cgroup v1 {controller} hierarchy in /proc/self/cgroup"))?;
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let right: Vec<&str> = right.split_whitespace().collect();
        let (Some(&"cgroup"), Some(super_opts)) = (right.first(), right.get(2)) else {
            continue;
        };
        if !super_opts.split(',').any(|o| o == controller) {
            continue;
        }
        let fields: Vec<&str> = left.split_whitespace().collect();
        let (Some(root), Some(mount), Some(opts)) = (fields.get(3), fields.get(4), fields.get(5))
        else {
            continue;
        };
        if opts.split(',').any(|o| o == "ro") {
            return Err(format!(
                "the cgroup v1 {controller} hierarchy at {mount} is mounted read-only"
            ));
        }
        let rel = if *root == "/" {
            path
        } else if let Some(rest) = path.strip_prefix(root) {
            rest
        } else {
            continue;
        };
        let rel = rel.trim_start_matches('/');
        if rel.split('/').any(|c| c == "..") {
            return Err(format!("unexpected cgroup path {path}"));
        }
        return Ok(Path::new(mount).join(rel));
    }
    Err(format!("no cgroup v1 {controller} hierarchy mounted"))
}

/// The runner's own cgroup in the v1 `pids` hierarchy, when the runner may
/// create children there (checked by creating and removing one); else why
/// not.
pub fn probe_pids_v1() -> Result<PathBuf, String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let dir = locate_v1(&mountinfo, &own, PIDS)?;
    probe_pids_v1_at(&dir)?;
    Ok(dir)
}

/// Checks that `dir` is a v1 `pids` cgroup the runner may create children in.
fn probe_pids_v1_at(dir: &Path) -> Result<(), String> {
    let usable = with_trial_child(dir, |trial| {
        trial.join("pids.max").is_file() && trial.join("cgroup.procs").is_file()
    })
    .map_err(|why| {
        format!(
            "{} is not writable by the runner (creating a child cgroup: {why}); run the runner as root with a writable cgroupfs",
            dir.display()
        )
    })?;
    if usable {
        Ok(())
    } else {
        Err(format!(
            "{} has no pids.max (not a v1 pids cgroup)",
            dir.display()
        ))
    }
}

/// Creates (or reuses) `<parent>/<scope>` in the v1 `pids` hierarchy: the
/// launcher's root there, one child per thread.
pub(crate) fn setup_pids_root(parent: &Path, scope: &str) -> io::Result<CgroupRoot> {
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
    Ok(CgroupRoot::v1(dir, PIDS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_the_pids_hierarchy_of_hybrid_and_legacy_layouts() {
        let hybrid = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
                      37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n\
                      39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n";
        assert_eq!(
            locate_v1(hybrid, "8:pids:/\n6:freezer:/\n0::/\n", PIDS).unwrap(),
            PathBuf::from("/sys/fs/cgroup/pids")
        );
        assert_eq!(
            locate_v1(hybrid, "8:pids:/system.slice/runner.service\n", PIDS).unwrap(),
            PathBuf::from("/sys/fs/cgroup/pids/system.slice/runner.service")
        );
        // Inside a container: the mount's root is the container's cgroup.
        let container = "39 31 0:36 /docker/abc /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n";
        assert_eq!(
            locate_v1(container, "8:pids:/docker/abc\n", PIDS).unwrap(),
            PathBuf::from("/sys/fs/cgroup/pids")
        );
        let unified = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";
        assert!(locate_v1(unified, "0::/\n", PIDS).is_err());
        assert!(locate_v1(hybrid, "6:freezer:/\n", PIDS).is_err());
        let ro = "39 31 0:36 / /sys/fs/cgroup/pids ro,relatime - cgroup cgroup rw,pids\n";
        assert!(
            locate_v1(ro, "8:pids:/\n", PIDS)
                .unwrap_err()
                .contains("read-only")
        );
        let bad = "39 31 0:36 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n";
        assert!(locate_v1(bad, "8:pids:/a/../b\n", PIDS).is_err());
    }

    #[test]
    fn a_directory_without_pids_files_is_not_usable() {
        let dir = tempfile::tempdir().unwrap();
        let err = probe_pids_v1_at(dir.path()).unwrap_err();
        assert!(err.contains("no pids.max"), "{err}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
