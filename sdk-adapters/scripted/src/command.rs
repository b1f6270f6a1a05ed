//! Running one `run` step: `sh -c COMMAND` started through the thread's
//! sandbox (the one launcher) in its own session and process
//! group, with stdout and stderr combined into one pipe and the result
//! capped.
//!
//! Why each choice:
//! - The thread's [`ThreadSandbox`] launches it: confined to the thread's
//!   workspace, HOME and TMPDIR, a clean environment, and tagged so the
//!   runner can kill it with the thread even after a `setsid`.
//! - One pipe for both streams (the same write end installed as fd 1 and 2)
//!   keeps the output interleaved exactly as the command wrote it.
//! - A process group of its own lets an interrupt kill the whole tree the
//!   command started (`kill(-pgid, SIGKILL)`), not just the shell.
//! - The step is over when the shell exits, not when the pipe closes: a
//!   background process may hold the pipe forever. What the shell and its
//!   children wrote before it exited is already in the pipe and is drained
//!   without waiting. Then anything still running in the group is killed, so
//!   a `run` step owns every process it starts and none outlives it.

use std::future::Future;
use std::io::{self, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};

use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};

use sdk_adapter::cap::{CappedBytes, OUTPUT_CAP_BYTES};
use sdk_adapter::launcher::ThreadSandbox;

/// After the shell exits, at most this much more is read from the pipe (a
/// process that escaped the group could otherwise keep the drain busy).
const DRAIN_LIMIT_BYTES: usize = 1024 * 1024;

/// A command that was started and has not been waited for yet.
///
/// Dropping it before [`RunningCommand::wait`] finished kills its process
/// group.
#[derive(Debug)]
pub(crate) struct RunningCommand {
    child: Child,
    pid: u32,
    pgid: libc::pid_t,
    output: Option<pipe::Receiver>,
    /// Set once the shell was reaped; its pid may then belong to someone else.
    reaped: bool,
}

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommandResult {
    /// Combined stdout+stderr, capped at [`OUTPUT_CAP_BYTES`].
    pub output: String,
    /// The shell's exit code; `None` when a signal killed it.
    pub exit_code: Option<i32>,
    /// The signal that killed the shell.
    pub signal: Option<i32>,
    /// It was stopped because the turn was interrupted.
    pub interrupted: bool,
}

/// Start `sh -c command` in `cwd` through `sandbox` (stdin null,
/// stdout+stderr one pipe, a new session and so a new process group), with
/// `env` added to the sandbox's environment (the thread's `ThreadSpec::env`,
/// e.g. the runner's git credential settings).
pub(crate) fn spawn(
    command: &str,
    cwd: &Path,
    env: &[(String, String)],
    sandbox: &ThreadSandbox,
) -> io::Result<RunningCommand> {
    let (reader, writer) = io::pipe()?;
    let writer_for_stderr = writer.try_clone()?;
    // Register the read end before spawning, so no failure can leave a
    // started child without anyone to kill it.
    let output = pipe::Receiver::from_owned_fd(reader.into())?;
    let child = {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(command)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(writer_for_stderr)
            .kill_on_drop(true)
            .envs(env.iter().map(|(k, v)| (k, v)));
        if cwd.is_absolute() {
            cmd.env("PWD", cwd);
        }
        let (child, applied) = sandbox.spawn(&mut cmd).map_err(io::Error::other)?;
        tracing::debug!(%applied, "scripted: command launched");
        child
        // `cmd` drops here, closing our copies of the write end: the pipe's
        // only writers are now the command and its children.
    };
    let mut running = RunningCommand {
        child,
        pid: 0,
        pgid: 0,
        output: Some(output),
        reaped: false,
    };
    // `id()` is only `None` after a successful wait, which hasn't happened.
    let pid = running
        .child
        .id()
        .ok_or_else(|| io::Error::other("the started shell has no process id"))?;
    tracing::debug!(pid, command, "scripted: command started");
    running.pid = pid;
    running.pgid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::other(format!("process id {pid} is out of range")))?;
    Ok(running)
}

impl RunningCommand {
    /// The shell's process id (also its process group id).
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Collect output until the shell exits, or until `stop` resolves; then
    /// the whole process group is killed and the shell reaped. Either way the
    /// output captured so far is returned.
    pub(crate) async fn wait(
        mut self,
        stop: impl Future<Output = ()>,
    ) -> io::Result<CommandResult> {
        let mut output = CappedBytes::new(OUTPUT_CAP_BYTES);
        let mut reader = self
            .output
            .take()
            .ok_or_else(|| io::Error::other("the command's output was already taken"))?;
        let mut chunk = vec![0u8; 16 * 1024];
        let mut reading = true;
        tokio::pin!(stop);
        let mut interrupted = false;
        let status: ExitStatus = loop {
            tokio::select! {
                biased;
                () = &mut stop => {
                    // The shell is not reaped yet, so its pid still names
                    // this group.
                    tracing::debug!(pgid = self.pgid, "scripted: killing an interrupted command");
                    interrupted = true;
                    self.kill_group();
                    let status = self.child.wait().await?;
                    self.reaped = true;
                    break status;
                }
                read = reader.read(&mut chunk), if reading => match read {
                    Ok(0) => reading = false,
                    Ok(n) => output.push(&chunk[..n]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                },
                status = self.child.wait() => {
                    let status = status?;
                    self.reaped = true;
                    // Whatever the shell left running in its group goes too.
                    // While the group has members its id stays reserved, so
                    // the kill reaches only them; if it is empty the kill
                    // finds nothing (Linux hands out pids cyclically, so the
                    // id is not reused in the instant in between).
                    self.kill_group();
                    break status;
                }
            }
        };
        if reading {
            drain(reader, &mut output, &mut chunk)?;
        }
        Ok(CommandResult {
            output: output.finish(),
            exit_code: status.code(),
            signal: status.signal(),
            interrupted,
        })
    }

    fn kill_group(&self) {
        // SAFETY: kill(2) has no memory-safety preconditions. A negative pid
        // addresses the process group; ESRCH (group already gone) is fine.
        unsafe {
            libc::kill(-self.pgid, libc::SIGKILL);
        }
    }
}

impl Drop for RunningCommand {
    fn drop(&mut self) {
        if !self.reaped && self.pgid > 0 {
            self.kill_group();
        }
    }
}

/// Read what is already in the pipe without waiting for more.
fn drain(reader: pipe::Receiver, output: &mut CappedBytes, chunk: &mut [u8]) -> io::Result<()> {
    let mut file = std::fs::File::from(reader.into_nonblocking_fd()?);
    let mut read = 0usize;
    while read < DRAIN_LIMIT_BYTES {
        match file.read(chunk) {
            Ok(0) => break,
            Ok(n) => {
                output.push(&chunk[..n]);
                read += n;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
