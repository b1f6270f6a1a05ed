//! Taking a secret out of the process's environment at start: its value is
//! copied, its bytes in the environment block (what the kernel shows as
//! `/proc/<pid>/environ`, which `std::env::remove_var` leaves as it was)
//! are overwritten, and the variable is removed, so neither a child nor a
//! reader of that file (root, or anyone while the process is still
//! dumpable) finds it. Here, beside [`crate::harden_runner`], because every
//! process that holds a secret an agent must not see does this at start:
//! the runner (its bearer secret), `agent-runner code-agent serve` and the
//! engine's own `code-agent serve` (their bearer token).

use std::ffi::{CStr, CString};

/// The value of `name` (`None` when unset or not UTF-8), after wiping it
/// from the environment block and removing the variable.
///
/// # Safety
///
/// Call while no other thread exists (it writes to the environment).
pub unsafe fn take_env(name: &str) -> Option<String> {
    let cname = CString::new(name).ok()?;
    // SAFETY: single-threaded (the caller's promise); getenv returns a
    // pointer into the environment or null.
    let ptr = unsafe { libc::getenv(cname.as_ptr()) };
    if ptr.is_null() {
        return None;
    }
    // SAFETY: a non-null getenv result is a NUL-terminated string that
    // stays valid until the environment changes, which nothing does before
    // the loop below is done.
    let value = unsafe { CStr::from_ptr(ptr) };
    let copy = value.to_str().ok().map(str::to_owned);
    let len = value.to_bytes().len();
    for i in 0..len {
        // SAFETY: `i < len`, inside the string; the environment strings
        // are writable memory (the initial stack, or the heap for a
        // variable set later). Volatile so the wipe is not optimised away.
        unsafe { std::ptr::write_volatile(ptr.add(i), b'*' as libc::c_char) };
    }
    // SAFETY: single-threaded (the caller's promise).
    unsafe { std::env::remove_var(name) };
    copy
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a child (its own environment, one thread): the value comes back,
    /// the variable is gone, and the child's `/proc/self/environ` no
    /// longer holds the value.
    #[test]
    fn the_value_leaves_the_environment_block() {
        const VAR: &str = "TAKEN_ENV_TEST_SECRET";
        if std::env::var_os("TAKEN_ENV_CHILD").is_some() {
            // SAFETY: this test binary's child runs only this test
            // (--exact, --test-threads 1): no other thread changes the env.
            let got = unsafe { take_env(VAR) };
            let environ = std::fs::read("/proc/self/environ").unwrap_or_default();
            let shown = String::from_utf8_lossy(&environ).contains("s3cret-value-91");
            println!(
                "got={:?} gone={} shown={shown}",
                got,
                std::env::var_os(VAR).is_none()
            );
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "taken_env::tests::the_value_leaves_the_environment_block",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env("TAKEN_ENV_CHILD", "1")
            .env(VAR, "s3cret-value-91")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("got=Some(\"s3cret-value-91\") gone=true shown=false"),
            "{stdout}"
        );
    }
}
