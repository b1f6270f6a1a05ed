//! The fake `codex` and `claude` CLIs (`sdk-adapters/*/src/bin/fake-*.rs`)
//! for end-to-end tests through the runner binary: built on first use (they
//! are binaries of other packages, so Cargo does not build them for this
//! test target) and handed to the runner with `--codex-bin`/`--claude-bin`,
//! each with its own state directory.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::support::{RunnerOpts, runner_bin};

/// `name` (a binary of `package`), built if needed, beside the runner binary.
fn fake_bin(package: &str, name: &str) -> PathBuf {
    static BUILD: OnceLock<Mutex<()>> = OnceLock::new();
    let _one_at_a_time = BUILD
        .get_or_init(|| Mutex::new(()))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let dir = Path::new(runner_bin())
        .parent()
        .expect("the runner's directory");
    let path = dir.join(name);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = std::process::Command::new(cargo);
    build.args(["build", "--quiet", "-p", package, "--bin", name]);
    // The fakes need sdk-process's test-only `fake` module.
    build.args(["--features", "sdk-process/fake"]);
    if dir.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    let status = build.status().expect("running cargo build for a fake CLI");
    assert!(status.success(), "building {name} failed");
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// The fake codex, its state under `state`.
pub fn with_fake_codex(opts: RunnerOpts, state: &Path) -> RunnerOpts {
    let bin = fake_bin("sdk-codex", "fake-codex");
    opts.arg("--sdk")
        .arg("codex")
        .arg("--codex-bin")
        .arg(&bin.to_string_lossy())
        // Its state is its home, as codex's login is: the runner gives
        // CODEX_HOME to every thread's sandbox.
        .env("CODEX_HOME", &state.to_string_lossy())
}

/// The fake claude; `state` is the operator's config dir (each thread's
/// claude runs on its own, seeded with the login from it).
pub fn with_fake_claude(opts: RunnerOpts, state: &Path) -> RunnerOpts {
    let bin = fake_bin("sdk-claude-code", "fake-claude");
    opts.arg("--sdk")
        .arg("claude-code")
        .arg("--claude-bin")
        .arg(&bin.to_string_lossy())
        .env("CLAUDE_CONFIG_DIR", &state.to_string_lossy())
}
