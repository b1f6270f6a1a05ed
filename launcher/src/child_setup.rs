//! What the child does between fork and exec. Everything that allocates,
//! opens paths or may fail for configuration reasons happens in the parent
//! (the Landlock ruleset is built there and handed over as a file
//! descriptor); this code only makes raw system calls, which is what is
//! async-signal-safe in the child of a multi-threaded (tokio) process.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

/// `_LINUX_CAPABILITY_VERSION_3`.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// `SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
/// SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED`: uid 0 gains no capabilities on exec
/// and ambient capabilities cannot be raised again.
const SECUREBITS_NOROOT: libc::c_ulong = 0x01 | 0x02 | 0x40 | 0x80;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The steps one child takes before exec, prepared by the parent.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChildPlan {
    /// Start a new session (a new process group with no controlling tty).
    pub setsid: bool,
    /// Join this cgroup (`cgroup.procs` path) before anything else.
    pub cgroup_procs: Option<CString>,
    /// Join this cgroup of the v1 `pids` hierarchy (`cgroup.procs` path)
    /// too, also when the child was born in its v2 cgroup:
    /// `CLONE_INTO_CGROUP` places it in v2 only.
    pub pids_v1_procs: Option<CString>,
    /// (resource, limit) pairs for prlimit.
    pub rlimits: Vec<(u32, u64)>,
    /// Drop every capability 0..=n from the bounding set.
    pub drop_bounding_upto: Option<u32>,
    /// Lock securebits so that uid 0 gains nothing on exec.
    pub lock_securebits: bool,
    /// Clear the ambient set and zero permitted/effective/inheritable.
    pub clear_capabilities: bool,
    /// Switch to this (uid, gid), supplementary groups = [gid].
    pub user: Option<(u32, u32)>,
    /// Set `no_new_privs`.
    pub no_new_privs: bool,
    /// Restrict the process with this prepared Landlock ruleset.
    pub landlock: Option<Arc<OwnedFd>>,
}

fn check(ret: libc::c_long) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is
/// `procs` (writes "0"). Async-signal-safe: raw system calls only.
fn join(procs: &CString) -> io::Result<()> {
    // SAFETY: open/write/close on a C string and a static buffer.
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = libc::write(fd, b"0".as_ptr().cast(), 1);
        let e = io::Error::last_os_error();
        libc::close(fd);
        if n != 1 {
            return Err(e);
        }
    }
    Ok(())
}

impl ChildPlan {
    /// Runs in the forked child. Must stay async-signal-safe: no
    /// allocation, no locks, raw system calls only. `io::Error` from an OS
    /// error code does not allocate. `join_cgroup` is false when the child
    /// was created inside its cgroup already (`clone3(CLONE_INTO_CGROUP)`).
    pub(crate) fn run(&self, join_cgroup: bool) -> io::Result<()> {
        // SAFETY (whole function): each call is a plain system call on
        // memory this plan owns (C strings, fixed-size structs) or on no
        // memory at all; the child has a single thread, so the id-changing
        // syscalls act on the whole process.
        unsafe {
            if self.setsid && libc::setsid() < 0 {
                // EPERM: already a group leader (the spawn site asked for
                // process_group(0)); the child is still in its own group.
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EPERM) {
                    return Err(e);
                }
            }
            if let Some(procs) = self.cgroup_procs.as_ref().filter(|_| join_cgroup) {
                join(procs)?;
            }
            if let Some(procs) = &self.pids_v1_procs {
                join(procs)?;
            }
            for &(resource, value) in &self.rlimits {
                let lim = libc::rlimit64 {
                    rlim_cur: value,
                    rlim_max: value,
                };
                check(libc::syscall(
                    libc::SYS_prlimit64,
                    0,
                    resource as libc::c_int,
                    &lim as *const libc::rlimit64,
                    std::ptr::null_mut::<libc::rlimit64>(),
                ))?;
            }
            if self.lock_securebits {
                check(libc::prctl(libc::PR_SET_SECUREBITS, SECUREBITS_NOROOT, 0, 0, 0).into())?;
            }
            if let Some(last) = self.drop_bounding_upto {
                for cap in 0..=last {
                    if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) < 0 {
                        let e = io::Error::last_os_error();
                        // EINVAL: capability unknown to this kernel.
                        if e.raw_os_error() != Some(libc::EINVAL) {
                            return Err(e);
                        }
                    }
                }
            }
            if self.clear_capabilities {
                check(
                    libc::prctl(
                        libc::PR_CAP_AMBIENT,
                        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
                        0,
                        0,
                        0,
                    )
                    .into(),
                )?;
            }
            if let Some((uid, gid)) = self.user {
                let groups = [gid as libc::gid_t];
                check(libc::syscall(libc::SYS_setgroups, 1usize, groups.as_ptr()))?;
                check(libc::syscall(libc::SYS_setresgid, gid, gid, gid))?;
                check(libc::syscall(libc::SYS_setresuid, uid, uid, uid))?;
            }
            if self.clear_capabilities {
                let header = CapHeader {
                    version: CAPABILITY_VERSION_3,
                    pid: 0,
                };
                let data = [CapData {
                    effective: 0,
                    permitted: 0,
                    inheritable: 0,
                }; 2];
                check(libc::syscall(
                    libc::SYS_capset,
                    &header as *const CapHeader,
                    data.as_ptr(),
                ))?;
            }
            if self.no_new_privs {
                check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).into())?;
            }
            if let Some(fd) = &self.landlock {
                check(libc::syscall(
                    libc::SYS_landlock_restrict_self,
                    fd.as_raw_fd(),
                    0u32,
                ))?;
            }
        }
        Ok(())
    }
}
