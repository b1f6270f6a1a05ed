//! `clone3(CLONE_VM | CLONE_VFORK)`: a child that borrows the runner's
//! address space until it execs, as `posix_spawn` makes one.
//!
//! Why: a child made without `CLONE_VM` is a fork. The kernel copies the
//! runner's page tables and write-protects every private page, and from
//! then on the runner takes a page fault on the first write to each of
//! them, on every thread, long after the child has exec'd. A runner with a
//! long engine session holds tens of MB, and the engine starts a process
//! per tool call. A `CLONE_VM | CLONE_VFORK` child copies nothing; the
//! calling thread waits (microseconds) until the child has exec'd or
//! exited.
//!
//! The price is that the child runs on the parent's memory. It gets a stack
//! of its own (mapped here, with a guard page), it makes only raw system
//! calls on memory prepared before the clone (`direct::child_main`, which
//! the forking child runs too), and signals are blocked around the clone
//! and every caught signal is reset to its default in the child before it
//! unblocks them, so no handler of the runner ever runs in the child.
//!
//! A child born on a new stack returns from the system call with nothing
//! to return to, so the system call and the jump to the child's function
//! are one piece of assembly. It exists for x86_64 only; elsewhere
//! [`available`] is false and launches fork as before.

use std::ffi::c_void;
use std::io;

/// `CLONE_VM`.
pub(crate) const CLONE_VM: u64 = libc::CLONE_VM as u64;
/// `CLONE_VFORK`.
pub(crate) const CLONE_VFORK: u64 = libc::CLONE_VFORK as u64;

/// The child's stack: small frames only, and it never allocates.
const STACK_SIZE: usize = 128 * 1024;
/// One page below the stack that faults instead of letting an overflow
/// write into the runner's memory.
const GUARD_SIZE: usize = 4096;

/// Whether this architecture has the trampoline.
pub(crate) const fn available() -> bool {
    cfg!(target_arch = "x86_64")
}

/// An anonymous mapping for the child's stack, unmapped on drop.
pub(crate) struct Stack {
    base: *mut c_void,
    len: usize,
}

impl Stack {
    pub(crate) fn new() -> io::Result<Self> {
        let len = STACK_SIZE + GUARD_SIZE;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        // SAFETY: the lowest page of the mapping made above.
        if unsafe { libc::mprotect(base, GUARD_SIZE, libc::PROT_NONE) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// Lowest usable address and size, for `clone_args.stack{,_size}`.
    pub(crate) fn region(&self) -> (u64, u64) {
        (self.base as u64 + GUARD_SIZE as u64, STACK_SIZE as u64)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; the child that used it has
        // exec'd or exited before the clone returned (CLONE_VFORK).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Every signal blocked on the calling thread until dropped, then its mask
/// as before.
pub(crate) struct SignalsBlocked {
    old: libc::sigset_t,
}

impl SignalsBlocked {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: sigset_t is plain data; the calls fill it.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            let rc = libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            Ok(SignalsBlocked { old })
        }
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new`. The guard lives within
        // one synchronous call (`direct::clone_vm`), so on the same thread.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

/// In the child, before it unblocks signals: every signal the runner
/// catches goes back to its default action, so that none of the runner's
/// handlers runs on the runner's memory in the child. Ignored signals stay
/// ignored, as across a fork and exec. Async-signal-safe.
pub(crate) unsafe fn reset_caught_signals() {
    // 64: the highest signal number on Linux (`_NSIG - 1`).
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: sigaction reads and writes plain structs on this stack.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
    }
}

/// `clone3(args)` where `args.flags` has `CLONE_VM` and `args.stack` is a
/// [`Stack`]: in the child, calls `entry(ctx)` on that stack (it must not
/// return); in the parent, returns the system call's result (the child's
/// pid, or `-errno`).
///
/// # Safety
/// `args` points to a valid `clone_args` of `size` bytes; `entry` runs on
/// the parent's memory with the parent suspended, and must follow the
/// rules of the module doc.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn clone3_vm(
    args: *mut c_void,
    size: usize,
    entry: unsafe extern "C" fn(*mut c_void) -> !,
    ctx: *mut c_void,
) -> i64 {
    let ret: i64;
    // SAFETY: the caller's contract. The parent's path is a plain system
    // call (clobbering rcx and r11). The child's path starts on the new,
    // 16-byte aligned stack top, so `call` leaves the alignment the ABI
    // wants, and never comes back.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") args,
            in("rsi") size,
            in("r12") ctx,
            in("r13") entry,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// Never called: [`available`] is false here.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) unsafe fn clone3_vm(
    _args: *mut c_void,
    _size: usize,
    _entry: unsafe extern "C" fn(*mut c_void) -> !,
    _ctx: *mut c_void,
) -> i64 {
    -(libc::ENOSYS as i64)
}
