//! The runner's own hardening, in its own test binary because it changes
//! the calling process.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agent_launcher::harden_runner;

#[test]
fn runner_is_not_dumpable_and_writes_no_core() {
    // SAFETY: prctl/getrlimit with scalar arguments and a stack struct.
    let before = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) };
    assert_eq!(before, 1, "test process should start dumpable");
    let h = harden_runner().unwrap();
    assert!(h.not_dumpable && h.no_core);
    let mut core = libc::rlimit {
        rlim_cur: 1,
        rlim_max: 1,
    };
    unsafe {
        assert_eq!(libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0), 0);
        assert_eq!(libc::getrlimit(libc::RLIMIT_CORE, &mut core), 0);
    }
    assert_eq!((core.rlim_cur, core.rlim_max), (0, 0));
}
