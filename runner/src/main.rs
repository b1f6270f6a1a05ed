//! The `agent-runner` binary: everything lives in the library's `cli` module.
//!
//! Secrets: `AGENT_RUNNER_SECRET` is read and removed from the environment
//! before anything else, so no agent process ever inherits it.

use std::process::ExitCode;

use agent_runner::cli;
use agent_runner::config::Secret;

/// mimalloc instead of glibc's malloc: every update allocates and frees a
/// handful of small strings on several threads, and glibc's consolidation
/// of freed chunks (`malloc_consolidate`, `unlink_chunk`) was a sixth of the
/// runner's samples in the throughput profile. Measured with
/// `runner-bench --only throughput`: a third less runner CPU for the same
/// updates (issue 14, README "Performance").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc v2's `mimalloc.h` (the `mi_option_e`
/// enum; libmimalloc-sys does not export this one).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

unsafe extern "C" {
    fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// Freed memory goes back to the OS at once instead of 10 ms later
/// (mimalloc's default): with a thousand threads each in a turn the
/// default kept 5 KiB more per thread resident (`runner-bench --only scale
/// --quick`: 54.7 -> 49.5 MB; glibc 47.8), for a few per cent of CPU at
/// the highest update rates. `MIMALLOC_PURGE_DELAY` still overrides it.
fn tune_allocator() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: plain calls into the allocator linked as the global one;
    // the option is an integer read whenever it purges. The default is
    // checked first, so a header that numbers options differently leaves
    // the setting alone instead of changing another option.
    unsafe {
        if mi_option_get(MI_OPTION_PURGE_DELAY) == 10 {
            mi_option_set(MI_OPTION_PURGE_DELAY, 0);
        }
    }
}

fn main() -> ExitCode {
    tune_allocator();
    let env_secret = take_env_secret();
    cli::main(cli::parse(), env_secret)
}

fn take_env_secret() -> Option<Secret> {
    let value = std::env::var("AGENT_RUNNER_SECRET").ok();
    // SAFETY: called first thing in main, before any other thread exists.
    unsafe { std::env::remove_var("AGENT_RUNNER_SECRET") };
    value
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .map(Secret::new)
}
