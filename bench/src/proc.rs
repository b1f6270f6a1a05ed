//! The runner under test: the real `agent-runner` binary, started against a
//! mock control plane with its own state and workspace directories.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use tokio::process::{Child, Command};

pub struct Runner {
    child: Process,
    pub started: Instant,
    pub dirs: tempfile::TempDir,
}

/// How long a runner stopping on its second signal may take before it is
/// killed.
const STOP_PATIENCE: Duration = Duration::from_secs(20);

/// Between the two signals: the first must have been taken (the runner
/// starts draining) for the second to count as a second.
const SECOND_SIGNAL_AFTER: Duration = Duration::from_millis(100);

/// The runner's process, stopped as an operator stops it: a signal, then a
/// second one (kill every agent process, remove every thread's cgroup,
/// exit), SIGKILL only if that does not end it. A SIGKILLed runner leaves
/// its cgroups behind, and a bench's state directory is gone before a later
/// start could sweep them: runs that SIGKILLed their runners had left
/// 861,264 cgroups in the bench machine's cgroup v2 tree.
struct Process(Child);

impl Process {
    /// Sends SIGTERM; false if the process had already exited.
    fn term(&mut self) -> bool {
        if !matches!(self.0.try_wait(), Ok(None)) {
            return false;
        }
        let Some(pid) = self
            .0
            .id()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        else {
            return false;
        };
        // Not yet reaped (checked above): the pid is still our child's.
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        true
    }

    async fn stop(&mut self) {
        if !self.term() {
            return;
        }
        tokio::time::sleep(SECOND_SIGNAL_AFTER).await;
        self.term();
        if tokio::time::timeout(STOP_PATIENCE, self.0.wait())
            .await
            .is_err()
        {
            let _ = self.0.kill().await;
        }
    }
}

/// A runner dropped without [`Runner::stop`] (a scenario's rig going out
/// of scope) is stopped the same way, blocking: no runtime to wait on here.
impl Drop for Process {
    fn drop(&mut self) {
        if !self.term() {
            return;
        }
        std::thread::sleep(SECOND_SIGNAL_AFTER);
        self.term();
        let deadline = Instant::now() + STOP_PATIENCE;
        while Instant::now() < deadline {
            if !matches!(self.0.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.start_kill();
    }
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
            child: Process(child),
            started,
            dirs,
        })
    }

    pub fn pid(&self) -> Result<u32> {
        self.child.0.id().context("the runner has exited")
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

    /// Stops the runner (see [`Process`]).
    pub async fn stop(mut self) {
        self.child.stop().await;
    }

    /// Stops the runner and keeps its directories (for a restart).
    pub async fn stop_keeping_dirs(mut self) -> tempfile::TempDir {
        self.child.stop().await;
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
