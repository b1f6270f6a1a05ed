//! The `agent-runner` binary: everything lives in the library's `cli` module.
//!
//! Secrets: `AGENT_RUNNER_SECRET` is read, wiped and removed from the
//! environment before anything else, so no agent process ever inherits it
//! and `/proc/<pid>/environ` does not show it.

use std::process::ExitCode;

use agent_runner::cli;
use agent_runner::config::Secret;

/// mimalloc instead of glibc's malloc: every update allocates and frees a
/// handful of small strings on several threads, and glibc's consolidation
/// of freed chunks (`malloc_consolidate`, `unlink_chunk`) was a sixth of the
/// runner's samples in the throughput profile. Measured with
/// `runner-bench --only throughput`: a third less runner CPU for the same
/// updates (docs/performance.md). Its freed memory goes back
/// to the OS when threads wait: see `agent_runner::allocator`.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let env_secret = take_env_secret();
    cli::main(cli::parse(), env_secret)
}

fn take_env_secret() -> Option<Secret> {
    // SAFETY: called first thing in main, before any other thread exists.
    let value = unsafe { agent_launcher::take_env("AGENT_RUNNER_SECRET") };
    value
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .map(Secret::new)
}
