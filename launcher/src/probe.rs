//! What the host offers the sandbox: Landlock ABI, cgroup v2 delegation,
//! a writable cgroup v1 `pids` hierarchy, user namespaces, whether the
//! runner is root and which capabilities it holds. Probed once at start;
//! status/doctor show it.

use std::path::PathBuf;

use crate::caps::{CapSets, cap_last_cap};
use crate::cgroup::{CgroupProbe, probe_cgroup};
use crate::cgroup_v1::probe_pids_v1;

/// `LANDLOCK_CREATE_RULESET_VERSION`.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// Caps the Landlock ABI the launcher uses below the kernel's (never
/// above): to test what an older kernel gets on a newer one, or to keep
/// clear of a kernel's newer Landlock feature. `0`: no Landlock.
pub const LANDLOCK_ABI_MAX_VAR: &str = "AGENT_LAUNCHER_LANDLOCK_ABI_MAX";

/// What the host offers.
#[derive(Clone, Debug)]
pub struct HostProbe {
    /// The kernel's Landlock ABI version (capped by
    /// [`LANDLOCK_ABI_MAX_VAR`]), or why Landlock is unavailable.
    pub landlock: Result<i32, String>,
    /// What [`LANDLOCK_ABI_MAX_VAR`] did, when set.
    pub landlock_cap: Option<String>,
    /// The cgroup v2 subtree the launcher may use, or why none.
    pub cgroup: CgroupProbe,
    /// The runner's cgroup in the v1 `pids` hierarchy, where it may create
    /// children, or why not (a v2-only host has none).
    pub pids_v1: Result<PathBuf, String>,
    /// Whether unprivileged user namespaces are allowed (None: unknown).
    pub user_namespaces: Option<bool>,
    /// The runner's effective uid.
    pub euid: u32,
    /// The runner's capability sets.
    pub capabilities: CapSets,
    /// The highest capability number the kernel knows.
    pub cap_last_cap: u32,
}

impl HostProbe {
    /// True when the runner runs as root or holds any capability: agent
    /// processes must then shed every capability.
    pub fn privileged(&self) -> bool {
        self.euid == 0 || self.capabilities.permitted != 0 || self.capabilities.effective != 0
    }

    /// The Landlock ABI, when Landlock is available.
    pub fn landlock_abi(&self) -> Option<i32> {
        self.landlock.as_ref().ok().copied()
    }

    /// One line per fact, for status/doctor.
    pub fn summary(&self) -> Vec<String> {
        let mut lines = Vec::new();
        match &self.landlock {
            Ok(abi) => lines.push(format!("landlock: ABI {abi}")),
            Err(why) => lines.push(format!("landlock: unavailable ({why})")),
        }
        if let (Some(line), Some(cap)) = (lines.last_mut(), &self.landlock_cap) {
            line.push_str(&format!(" [{cap}]"));
        }
        lines.push(format!("cgroup: {}", self.cgroup));
        lines.push(match &self.pids_v1 {
            Ok(dir) => format!("cgroup v1 pids: {} (writable)", dir.display()),
            Err(why) => format!("cgroup v1 pids: unavailable ({why})"),
        });
        lines.push(match self.user_namespaces {
            Some(true) => "user namespaces: allowed".to_string(),
            Some(false) => "user namespaces: disabled".to_string(),
            None => "user namespaces: unknown".to_string(),
        });
        lines.push(format!(
            "runner: euid {}, effective capabilities {:#x}",
            self.euid, self.capabilities.effective
        ));
        lines
    }
}

/// Probes the host. Cheap (a few syscalls and /proc reads) apart from the
/// cgroup probes, which create and remove one empty cgroup in each of the
/// v2 and v1 `pids` hierarchies that looks writable.
pub fn probe_host() -> HostProbe {
    let cap = std::env::var(LANDLOCK_ABI_MAX_VAR).ok();
    let (landlock, landlock_cap) = cap_landlock(landlock_abi(), cap.as_deref());
    HostProbe {
        landlock,
        landlock_cap,
        cgroup: probe_cgroup(),
        pids_v1: probe_pids_v1(),
        user_namespaces: user_namespaces(),
        // SAFETY: geteuid has no preconditions.
        euid: unsafe { libc::geteuid() },
        capabilities: CapSets::current().unwrap_or_default(),
        cap_last_cap: cap_last_cap(),
    }
}

/// Asks the kernel for its Landlock ABI version.
fn landlock_abi() -> Result<i32, String> {
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag the
    // syscall only returns the ABI version (or an error); it touches no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v >= 1 {
        return i32::try_from(v).map_err(|_| format!("unexpected ABI {v}"));
    }
    let err = std::io::Error::last_os_error();
    Err(match err.raw_os_error() {
        Some(libc::ENOSYS) => "kernel built without Landlock (ENOSYS)".to_string(),
        Some(libc::EOPNOTSUPP) => {
            "Landlock is built in but not enabled (add landlock to the lsm= boot parameter)"
                .to_string()
        }
        _ => format!("landlock_create_ruleset: {err}"),
    })
}

/// The kernel's ABI `kernel` lowered to `max` (the value of
/// [`LANDLOCK_ABI_MAX_VAR`]), and what that did. Only ever lowers: a `max`
/// above the kernel's ABI, or one that is not a number, changes nothing
/// (and says so).
fn cap_landlock(
    kernel: Result<i32, String>,
    max: Option<&str>,
) -> (Result<i32, String>, Option<String>) {
    let Some(raw) = max else {
        return (kernel, None);
    };
    let Ok(max) = raw.trim().parse::<i32>() else {
        return (
            kernel,
            Some(format!(
                "{LANDLOCK_ABI_MAX_VAR}={raw:?} ignored: not a number"
            )),
        );
    };
    match kernel {
        Ok(abi) if max < 1 => (
            Err(format!(
                "kernel ABI {abi}, turned off by {LANDLOCK_ABI_MAX_VAR}={max}"
            )),
            None,
        ),
        Ok(abi) if max < abi => (
            Ok(max),
            Some(format!(
                "kernel ABI {abi}, capped by {LANDLOCK_ABI_MAX_VAR}"
            )),
        ),
        other => (other, None),
    }
}

fn user_namespaces() -> Option<bool> {
    let read = |p: &str| -> Option<i64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    let max = read("/proc/sys/user/max_user_namespaces")?;
    let unprivileged = read("/proc/sys/kernel/unprivileged_userns_clone").unwrap_or(1);
    Some(max > 0 && unprivileged != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_reports_every_fact() {
        let p = probe_host();
        let lines = p.summary();
        assert_eq!(lines.len(), 5);
        assert!(lines[0].starts_with("landlock: "));
        assert!(lines[2].starts_with("cgroup v1 pids: "));
        if let Ok(abi) = p.landlock {
            assert!(abi >= 1);
        }
    }

    #[test]
    fn the_abi_cap_only_lowers() {
        let none = || Err::<i32, String>("no landlock".to_string());
        assert_eq!(cap_landlock(Ok(7), None), (Ok(7), None));
        let (abi, note) = cap_landlock(Ok(7), Some("5"));
        assert_eq!(abi, Ok(5));
        assert!(note.unwrap().contains("kernel ABI 7"));
        // Never raised, never invented.
        assert_eq!(cap_landlock(Ok(5), Some("7")), (Ok(5), None));
        assert_eq!(cap_landlock(none(), Some("7")), (none(), None));
        let (abi, note) = cap_landlock(Ok(7), Some("six"));
        assert_eq!(abi, Ok(7));
        assert!(note.unwrap().contains("ignored"));
        let (abi, _) = cap_landlock(Ok(7), Some("0"));
        assert!(abi.unwrap_err().contains("turned off"));
    }
}
