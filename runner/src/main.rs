//! The `agent-runner` binary: everything lives in the library's `cli` module.
//!
//! Secrets: `AGENT_RUNNER_SECRET` is read and removed from the environment
//! before anything else, so no agent process ever inherits it.

use std::process::ExitCode;

use agent_runner::cli;
use agent_runner::config::Secret;

fn main() -> ExitCode {
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
