//! Where things are: the workspace, its target directory, the built runner
//! binary; and what this machine has (root, tools on `PATH`, a free port).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (this crate's parent directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("test-kit/ has a parent")
        .to_path_buf()
}

/// `CARGO_TARGET_DIR` when set, else `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// The built `agent-runner`: `AGENT_RUNNER_BIN` when set, else the one
/// cargo built beside the running binary — a test in
/// `<target>/<profile>/deps/` or a workspace binary (the benchmark) in
/// `<target>/<profile>/`. `Err` says where it looked.
///
/// A runner test target knows its binary exactly
/// (`env!("CARGO_BIN_EXE_agent-runner")`) and says so through its [`Kit`];
/// this is for everyone else.
///
/// [`Kit`]: crate::Kit
pub fn runner_bin() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("AGENT_RUNNER_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let me = std::env::current_exe().map_err(|e| format!("locating this binary: {e}"))?;
    let mut dir = me.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    let bin = dir.join("agent-runner");
    if bin.exists() {
        Ok(bin)
    } else {
        Err(format!(
            "no agent-runner in {} (build it with `cargo build -p agent-runner`, or set AGENT_RUNNER_BIN)",
            dir.display()
        ))
    }
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether `tool` is on `PATH`.
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A free TCP port on loopback (closed again, for whoever binds it next).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind 127.0.0.1:0")
        .local_addr()
        .expect("local address")
        .port()
}
