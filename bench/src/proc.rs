//! The runner under test: the real `agent-runner` binary, started against a
//! mock control plane with its own state and workspace directories.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use anyhow::{Context as _, Result};
use tokio::process::{Child, Command};

pub struct Runner {
    pub child: Child,
    pub started: Instant,
    pub dirs: tempfile::TempDir,
}

impl Runner {
    /// Start `bin run` against `url` with `extra` flags. Logs (level info,
    /// the default) go to `runner.log` in its temporary directory.
    pub fn start(bin: &Path, url: &str, extra: &[&str]) -> Result<Self> {
        Self::start_with_env(bin, url, extra, &[])
    }

    /// [`Runner::start`] with extra environment variables.
    pub fn start_with_env(
        bin: &Path,
        url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Self> {
        let dirs = tempfile::tempdir().context("creating the runner's directory")?;
        Self::start_in(bin, url, extra, env, dirs)
    }

    /// [`Runner::start_with_env`] on the state and workspaces of `dirs`
    /// (a restart, when a runner used them before).
    pub fn start_in(
        bin: &Path,
        url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        dirs: tempfile::TempDir,
    ) -> Result<Self> {
        let log =
            std::fs::File::create(dirs.path().join("runner.log")).context("creating runner.log")?;
        let mut cmd = Command::new(bin);
        cmd.arg("run")
            .arg("--control-plane-url")
            .arg(url)
            .arg("--state-dir")
            .arg(dirs.path().join("state"))
            .arg("--workspace-root")
            .arg(dirs.path().join("ws"))
            .args(extra)
            .envs(env.iter().copied())
            .env_remove("AGENT_RUNNER_SECRET")
            // Health endpoints off: parallel runs must not contend for a port.
            .env("AGENT_RUNNER_HEALTH_ADDR", "")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .kill_on_drop(true);
        let started = Instant::now();
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Runner {
            child,
            started,
            dirs,
        })
    }

    pub fn pid(&self) -> Result<u32> {
        self.child.id().context("the runner has exited")
    }

    pub fn rss(&self) -> Result<u64> {
        crate::stats::rss_bytes(self.pid()?)
    }

    /// The runner's log so far (for error messages).
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dirs.path().join("runner.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }

    /// Kills the runner and keeps its directories (for a restart).
    pub async fn stop_keeping_dirs(mut self) -> tempfile::TempDir {
        let _ = self.child.kill().await;
        self.dirs
    }
}

/// The runner binary: `--runner PATH`, else `agent-runner` beside this one.
pub fn locate(given: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p);
    }
    let me = std::env::current_exe().context("locating runner-bench")?;
    let beside = me.with_file_name("agent-runner");
    if beside.exists() {
        Ok(beside)
    } else {
        anyhow::bail!(
            "no agent-runner beside {} (build it with `cargo build --release -p agent-runner`, or pass --runner PATH)",
            me.display()
        )
    }
}
