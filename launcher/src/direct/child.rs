//! The child's side of a direct launch, apart from the parent's: what runs
//! between `clone` and `execve` (prepared memory and async-signal-safe
//! calls only) and the report of the step that failed, read back by the
//! parent.

use std::io;
use std::os::fd::{AsRawFd as _, OwnedFd, RawFd};

use super::Prepared;
use crate::child_setup::ChildPlan;

/// The steps the child reports a failure of.
const STEP_STDIO: u32 = 1;
const STEP_CWD: u32 = 2;
const STEP_SANDBOX: u32 = 3;
const STEP_EXEC: u32 = 4;

/// Reads the child's report: nothing (the pipe closed at exec) or the step
/// that failed and its errno.
pub(super) fn read_child_error(pipe: &OwnedFd) -> Option<io::Error> {
    let mut buf = [0u8; 8];
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: reading into the rest of a stack buffer.
        let n = unsafe {
            libc::read(
                pipe.as_raw_fd(),
                buf[got..].as_mut_ptr().cast(),
                buf.len() - got,
            )
        };
        if n == 0 {
            break;
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Some(e);
        }
        got += n as usize;
    }
    if got < buf.len() {
        return None;
    }
    let step = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let errno = i32::from_ne_bytes([buf[4], buf[5], buf[6], buf[7]]);
    let what = match step {
        STEP_STDIO => "standard streams",
        STEP_CWD => "working directory",
        STEP_SANDBOX => "sandbox",
        _ => "exec",
    };
    let e = io::Error::from_raw_os_error(errno);
    Some(io::Error::new(e.kind(), format!("{what}: {e}")))
}

/// The child between clone and exec. Async-signal-safe: raw system calls
/// on prepared memory only; on failure it reports (step, errno) on `err`
/// and exits 127.
pub(super) unsafe fn child_main(p: &Prepared, plan: &ChildPlan, err: RawFd) -> ! {
    let fail = |step: u32, errno: i32| -> ! {
        let mut buf = [0u8; 8];
        buf[..4].copy_from_slice(&step.to_ne_bytes());
        buf[4..].copy_from_slice(&errno.to_ne_bytes());
        // SAFETY: write and _exit are async-signal-safe.
        unsafe {
            libc::write(err, buf.as_ptr().cast(), buf.len());
            libc::_exit(127)
        }
    };
    let last = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    };
    // SAFETY (block): plain system calls on prepared data.
    unsafe {
        // The runner ignores SIGPIPE and may block signals on its threads;
        // the program starts with the defaults, as std's spawn does.
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        for (target, fd) in p.stdio.iter().enumerate() {
            if libc::dup2(fd.as_raw_fd(), target as RawFd) < 0 {
                fail(STEP_STDIO, last());
            }
        }
        if libc::chdir(p.cwd.as_ptr()) < 0 {
            fail(STEP_CWD, last());
        }
        if let Err(e) = plan.run(false) {
            fail(STEP_SANDBOX, e.raw_os_error().unwrap_or(libc::EINVAL));
        }
        libc::execve(
            p.program.as_ptr(),
            p.argv_ptrs.as_ptr(),
            p.envp_ptrs.as_ptr(),
        );
        fail(STEP_EXEC, last())
    }
}
