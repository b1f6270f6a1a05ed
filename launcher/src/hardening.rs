//! Hardening the runner process itself at start: not dumpable (so
//! processes of the same uid cannot read its `/proc/<pid>/environ` or memory
//! nor ptrace it) and no core files (they would hold its secrets).

use crate::error::LaunchError;

/// What [`harden_runner`] set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hardening {
    /// `PR_SET_DUMPABLE(0)` is in effect.
    pub not_dumpable: bool,
    /// `RLIMIT_CORE` is 0.
    pub no_core: bool,
}

/// Sets `PR_SET_DUMPABLE(0)` and `RLIMIT_CORE=0` on the calling process.
/// Call once, early in the runner's `main`.
pub fn harden_runner() -> Result<Hardening, LaunchError> {
    // SAFETY: prctl/setrlimit with scalar arguments and a stack struct.
    unsafe {
        if libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 {
            return Err(LaunchError::io(
                "prctl(PR_SET_DUMPABLE, 0)",
                std::io::Error::last_os_error(),
            ));
        }
        let zero = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::setrlimit(libc::RLIMIT_CORE, &zero) != 0 {
            return Err(LaunchError::io(
                "setrlimit(RLIMIT_CORE, 0)",
                std::io::Error::last_os_error(),
            ));
        }
        let mut core = libc::rlimit {
            rlim_cur: 1,
            rlim_max: 1,
        };
        let no_core = libc::getrlimit(libc::RLIMIT_CORE, &mut core) == 0 && core.rlim_max == 0;
        Ok(Hardening {
            not_dumpable: libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) == 0,
            no_core,
        })
    }
}
