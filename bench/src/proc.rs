//! The runner under test: the real `agent-runner` binary, started against a
//! mock control plane with its own state and workspace directories, as an
//! operator runs it (the runner's default flags, log level info), through
//! the shared test kit (`test-kit/`): logs in `runner.log` in its temporary
//! directory, stopped with two signals (see `test_kit::process`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use test_kit::{RunnerDirs, RunnerOpts, RunnerProc};

/// How long a runner stopping on its second signal may take before it is
/// killed.
const STOP_PATIENCE: Duration = Duration::from_secs(20);

/// A running runner. Dropped (a scenario's rig going out of scope), it is
/// stopped the same way as by [`Runner::stop`], blocking.
pub struct Runner {
    // Declared first: dropped (stopped) before its directory goes.
    process: RunnerProc,
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
        let mut opts = RunnerOpts::plain(url);
        opts.bin = Some(bin.to_path_buf());
        opts.log_file = true;
        opts.stop_patience = STOP_PATIENCE;
        opts.args = extra.iter().map(|a| (*a).to_owned()).collect();
        opts.env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let process = RunnerProc::try_start_in(opts, RunnerDirs::at(dirs.path()))
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Runner {
            started: process.started,
            process,
            dirs,
        })
    }

    pub fn pid(&self) -> Result<u32> {
        self.process.pid().context("the runner has exited")
    }

    pub fn rss(&self) -> Result<u64> {
        crate::stats::rss_bytes(self.pid()?)
    }

    /// The runner's log so far (for error messages).
    pub fn log_tail(&self) -> String {
        self.process.log_tail(20)
    }

    /// Stops the runner (see `test_kit::process`).
    pub async fn stop(self) {
        self.process.stop().await;
    }

    /// Stops the runner and keeps its directories (for a restart).
    pub async fn stop_keeping_dirs(self) -> tempfile::TempDir {
        self.process.stop().await;
        self.dirs
    }
}

/// The runner binary: `--runner PATH`, else the kit's
/// (`test_kit::runner_bin`: `AGENT_RUNNER_BIN`, else `agent-runner` beside
/// this one).
pub fn locate(given: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p);
    }
    test_kit::runner_bin().map_err(|e| {
        anyhow::anyhow!(
            "{e}; for the benchmark: `cargo build --release -p agent-runner`, or pass --runner PATH"
        )
    })
}
