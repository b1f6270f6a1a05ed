//! One run of a cron job: `sh -c COMMAND` in the job's workspace, started
//! through the workspace's sandbox (the one launcher, like `bash`), its own
//! process group; stdout and stderr captured separately, each capped
//! (start and end kept); on timeout or engine shutdown the whole group is
//! killed (TERM, then KILL after a grace period) and the run is TIMEOUT or
//! CANCELLED. Whatever the shell leaves running in its group goes too.
//! The environment is the launcher's allowlist plus the workspace's
//! `Initialize` env (as for `bash`).

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_launcher::{Launch, ThreadSandbox};
use code_agent_proto::{CronExecution, CronExecutionStatus};
use tokio_util::sync::CancellationToken;

use crate::session::message::now_ms;
use crate::tools::child_env;
use crate::tools::process_group::{Ended, drain, read_capped, wait_group};

/// Bytes kept of each of stdout and stderr per run.
pub const OUTPUT_CAP: usize = 8 * 1024;

/// A run's status as a short lowercase word (`success`, `failed`, …) for
/// events and the model's tool output; empty for a status this build does
/// not know.
pub fn status_name(exec: &CronExecution) -> String {
    CronExecutionStatus::try_from(exec.status)
        .map(|s| {
            s.as_str_name()
                .trim_start_matches("CRON_EXECUTION_STATUS_")
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// What a run needs.
pub struct RunSpec<'a> {
    /// The shell command.
    pub command: &'a str,
    /// Where it runs (canonical).
    pub workspace: &'a Path,
    /// Extra environment (`Initialize`'s for the workspace).
    pub env: &'a [(String, String)],
    /// When it is killed.
    pub timeout: Duration,
    /// Its sandbox, or why none may start.
    pub sandbox: Result<Arc<ThreadSandbox>, String>,
    /// Engine shutdown, or the job deleted.
    pub cancel: &'a CancellationToken,
}

/// Runs the command; never fails, the execution record says what happened.
pub async fn run(job_id: &str, spec: RunSpec<'_>) -> CronExecution {
    let started = Instant::now();
    let mut exec = CronExecution {
        id: uuid::Uuid::new_v4().to_string(),
        job_id: job_id.to_string(),
        status: CronExecutionStatus::Failed as i32,
        started_at: now_ms(),
        ..Default::default()
    };
    let finish = |mut exec: CronExecution| {
        exec.ended_at = Some(now_ms());
        exec.duration_ms = Some(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
        exec
    };
    let sandbox = match spec.sandbox {
        Ok(sandbox) => sandbox,
        Err(why) => {
            exec.error = Some(format!("cannot start the command: {why}"));
            return finish(exec);
        }
    };
    let pipes = std::io::pipe().and_then(|out| std::io::pipe().map(|err| (out, err)));
    let ((out_r, out_w), (err_r, err_w)) = match pipes {
        Ok(pipes) => pipes,
        Err(e) => {
            exec.error = Some(format!("cannot create pipes: {e}"));
            return finish(exec);
        }
    };
    // Born in the workspace's cgroup (no migration per run), like `bash`.
    let launch = Launch::new("/bin/sh")
        .arg("-c")
        .arg(spec.command)
        .current_dir(spec.workspace)
        .envs(child_env(std::iter::empty(), spec.env))
        .stdout(out_w)
        .stderr(err_w);
    let mut child = match sandbox.launch(launch) {
        Ok((child, _applied)) => child,
        Err(e) => {
            exec.error = Some(format!("cannot start the command: {e}"));
            return finish(exec);
        }
    };
    let pid = child.id();
    let stdout = tokio::spawn(read_capped(out_r, OUTPUT_CAP));
    let stderr = tokio::spawn(read_capped(err_r, OUTPUT_CAP));
    let Ended {
        status,
        timed_out,
        cancelled,
    } = wait_group(&mut child, pid as i32, spec.timeout, spec.cancel).await;
    exec.stdout = drain(stdout).await;
    exec.stderr = drain(stderr).await;
    let (code, signal) = match &status {
        Ok(s) => (s.code(), s.signal()),
        Err(_) => (None, None),
    };
    exec.exit_code = code;
    let (state, error) = if timed_out {
        (
            CronExecutionStatus::Timeout,
            Some(format!(
                "timed out after {} ms; the process group was killed",
                spec.timeout.as_millis()
            )),
        )
    } else if cancelled {
        (
            CronExecutionStatus::Cancelled,
            Some("cancelled: the engine stopped or the job was deleted".to_string()),
        )
    } else {
        match (&status, code, signal) {
            (Err(e), _, _) => (
                CronExecutionStatus::Failed,
                Some(format!("cannot wait for the command: {e}")),
            ),
            (_, Some(0), _) => (CronExecutionStatus::Success, None),
            (_, Some(c), _) => (
                CronExecutionStatus::Failed,
                Some(format!("exited with code {c}")),
            ),
            (_, None, Some(s)) => (
                CronExecutionStatus::Failed,
                Some(format!("killed by signal {s}")),
            ),
            (_, None, None) => (
                CronExecutionStatus::Failed,
                Some("ended without an exit status".into()),
            ),
        }
    };
    exec.status = state as i32;
    exec.error = error;
    finish(exec)
}
