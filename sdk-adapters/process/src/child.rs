//! One agent CLI as a child process speaking JSON lines.
//!
//! Why each choice:
//! - The child is started through the thread's sandbox (the one
//!   launcher): confined to the thread's workspace, HOME and TMPDIR, with a
//!   clean environment (the launcher's allowlist plus what the spec sets),
//!   tagged so the runner kills whatever it leaves behind with the thread.
//! - The child gets a session and process group of its own (the launcher's
//!   `setsid`), so
//!   [`ChildHandle::kill`] reaches everything it started (`kill(-pgid)`): the
//!   npm `codex` shim and the native binary under it, the shells an agent
//!   runs, their children.
//! - A monitor task owns the `Child` and reaps it; right after it exits, what
//!   it left running in its group is killed too. While the group has members
//!   its id stays reserved, so that kill reaches only them (the same
//!   reasoning as the scripted adapter's `run`).
//! - Stdout is read by one task that never waits on anyone: a response goes
//!   to the request waiting for it (by the key the adapter's
//!   [`ResponseKey`] extracts), everything else into an unbounded channel.
//!   Unbounded on purpose: a reader that blocked on a slow consumer would
//!   also stop delivering responses, and a consumer waiting on a response
//!   (a steer, an interrupt) while the runner waits on it would deadlock.
//!   The child's output rate is what bounds the channel.
//! - When stdout closes, the child is finished for us: every waiting request
//!   fails with the exit reason (status plus the tail of stderr), then the
//!   channel closes. A child that closed stdout but lingers is killed.
//! - Writes have a timeout: a child that stops reading its stdin would
//!   otherwise block the writer forever once the pipe fills.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use sdk_adapter::launcher::{LaunchError, ThreadSandbox};
use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::lines::read_line;
use crate::program::display;

/// Says whether a line from the child is a response, and to which request
/// (the key passed to [`ChildHandle::request`]).
pub type ResponseKey = Arc<dyn Fn(&Value) -> Option<String> + Send + Sync>;

/// Every line from the child that is not a response, in order. Closes after
/// the child's stdout closed (its exit reason is then set).
pub type Inbound = mpsc::UnboundedReceiver<Value>;

/// Lines of stderr kept for error messages.
const STDERR_TAIL_LINES: usize = 8;
/// Longest stderr line kept or logged.
const STDERR_LINE_LIMIT: usize = 4 * 1024;
/// After stdout closed: how long to wait for the exit status and the rest of
/// stderr before the child is killed and declared gone anyway.
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// What to start.
#[derive(Debug, Clone)]
pub struct ChildSpec {
    /// Names the child in logs and errors (`codex app-server (thread t1)`).
    pub label: String,
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Its working directory (`None`: the runner's).
    pub cwd: Option<PathBuf>,
    /// Added to (or replacing in) the sandbox's environment (its allowlist
    /// of the runner's variables; nothing else of the runner's reaches it).
    pub env: Vec<(OsString, OsString)>,
    /// A stdout line longer than this is dropped (logged as cut).
    pub max_line_bytes: usize,
    /// How long one write to stdin may take.
    pub write_timeout: Duration,
}

impl ChildSpec {
    /// A spec for `program`, named `label` in logs.
    pub fn new(label: impl Into<String>, program: impl Into<PathBuf>) -> Self {
        Self {
            label: label.into(),
            program: program.into(),
            args: Vec::new(),
            cwd: None,
            env: Vec::new(),
            max_line_bytes: 64 * 1024 * 1024,
            write_timeout: Duration::from_secs(30),
        }
    }

    /// Adds an argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Sets the working directory.
    pub fn cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }
}

/// Why talking to the child failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ChildError {
    /// The executable is missing.
    #[error("`{program}` was not found (is it installed and on PATH?)")]
    NotFound {
        /// What was looked for.
        program: String,
    },
    /// Starting it failed for another reason.
    #[error("could not start `{program}`: {message}")]
    Spawn {
        /// What was started.
        program: String,
        /// The operating system's reason.
        message: String,
    },
    /// The child is gone.
    #[error("{label} exited: {reason}")]
    Exited {
        /// The child's label.
        label: String,
        /// How it ended (exit status or signal).
        reason: String,
    },
    /// A request went unanswered.
    #[error("{label} did not answer within {after:?}")]
    Timeout {
        /// The child's label.
        label: String,
        /// How long it was given.
        after: Duration,
    },
    /// Its stdin could not be written.
    #[error("writing to {label} failed: {message}")]
    Write {
        /// The child's label.
        label: String,
        /// The operating system's reason.
        message: String,
    },
}

#[derive(Default)]
struct Pending {
    waiters: HashMap<String, oneshot::Sender<Value>>,
    /// Set once stdout closed: the exit reason; no request can wait any more.
    closed: Option<String>,
}

struct Shared {
    label: String,
    pid: u32,
    pgid: libc::pid_t,
    write_timeout: Duration,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    pending: Mutex<Pending>,
    /// The process was reaped (its status is in `exit_status`).
    exited: CancellationToken,
    /// Stderr reached its end.
    stderr_done: CancellationToken,
    /// Stdout closed and every waiter was failed: the child is unusable.
    gone: CancellationToken,
    reaped: AtomicBool,
    /// `kill` was called: the child is unusable from now on.
    killed: AtomicBool,
    exit_status: Mutex<Option<String>>,
    stderr_tail: Mutex<VecDeque<String>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn kill_group(&self) {
        if self.pgid > 0 {
            // SAFETY: kill(2) has no memory-safety preconditions; a negative
            // pid addresses the process group, ESRCH (already gone) is fine.
            unsafe {
                libc::kill(-self.pgid, libc::SIGKILL);
            }
        }
    }

    /// Why the child is gone: its exit status and the tail of its stderr.
    fn reason(&self) -> String {
        let status = lock(&self.exit_status)
            .clone()
            .unwrap_or_else(|| "it closed its output".to_owned());
        let tail = lock(&self.stderr_tail);
        if tail.is_empty() {
            return status;
        }
        let lines: Vec<&str> = tail.iter().map(String::as_str).collect();
        format!("{status}; stderr: {}", lines.join(" | "))
    }

    fn exited_error(&self) -> ChildError {
        let reason = lock(&self.pending)
            .closed
            .clone()
            .unwrap_or_else(|| self.reason());
        ChildError::Exited {
            label: self.label.clone(),
            reason,
        }
    }
}

/// The owner of a started child: dropping it kills the child's process
/// group. Everything else talks through [`ChildHandle`]s.
pub struct JsonChild {
    handle: ChildHandle,
}

/// A way to talk to (or kill) a child that does not keep it alive.
#[derive(Clone)]
pub struct ChildHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ChildHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildHandle")
            .field("label", &self.shared.label)
            .field("pid", &self.shared.pid)
            .finish()
    }
}

impl std::fmt::Debug for JsonChild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.handle.fmt(f)
    }
}

impl JsonChild {
    /// Start the child through `sandbox` (must be called inside a tokio
    /// runtime). Lines that `response_key` maps to a key go to
    /// [`ChildHandle::request`] waiters; the rest arrive on the returned
    /// [`Inbound`].
    pub fn spawn(
        spec: ChildSpec,
        sandbox: &ThreadSandbox,
        response_key: ResponseKey,
    ) -> Result<(Self, Inbound), ChildError> {
        let program = display(spec.program.as_os_str());
        if let Some(cwd) = &spec.cwd
            && !cwd.is_dir()
        {
            return Err(ChildError::Spawn {
                program,
                message: format!("working directory {} does not exist", cwd.display()),
            });
        }
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(cwd) = &spec.cwd {
            cmd.current_dir(cwd);
        }
        for (key, value) in &spec.env {
            cmd.env(key, value);
        }
        let (mut child, applied) = sandbox.spawn(&mut cmd).map_err(|e| match e {
            LaunchError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                ChildError::NotFound {
                    program: program.clone(),
                }
            }
            e => ChildError::Spawn {
                program: program.clone(),
                message: e.to_string(),
            },
        })?;
        tracing::debug!(child = %spec.label, %applied, "agent cli launched");
        let spawn_error = |message: &str| ChildError::Spawn {
            program: program.clone(),
            message: message.to_owned(),
        };
        // `id()` is only `None` after a successful wait, which hasn't happened.
        let pid = child
            .id()
            .ok_or_else(|| spawn_error("the started process has no id"))?;
        let pgid = libc::pid_t::try_from(pid)
            .map_err(|_| spawn_error("the process id is out of range"))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            // kill_on_drop ends it; it is alone in its group.
            return Err(spawn_error("its stdio pipes are missing"));
        };
        tracing::debug!(child = %spec.label, pid, program = %program, "agent cli started");
        let shared = Arc::new(Shared {
            label: spec.label,
            pid,
            pgid,
            write_timeout: spec.write_timeout,
            stdin: tokio::sync::Mutex::new(Some(stdin)),
            pending: Mutex::new(Pending::default()),
            exited: CancellationToken::new(),
            stderr_done: CancellationToken::new(),
            gone: CancellationToken::new(),
            reaped: AtomicBool::new(false),
            killed: AtomicBool::new(false),
            exit_status: Mutex::new(None),
            stderr_tail: Mutex::new(VecDeque::new()),
        });
        let (inbound_tx, inbound) = mpsc::unbounded_channel();
        tokio::spawn(monitor(shared.clone(), child));
        tokio::spawn(read_stderr(shared.clone(), stderr));
        tokio::spawn(read_stdout(
            shared.clone(),
            stdout,
            inbound_tx,
            response_key,
            spec.max_line_bytes,
        ));
        Ok((
            Self {
                handle: ChildHandle { shared },
            },
            inbound,
        ))
    }

    /// A handle for writers; it does not keep the child alive.
    pub fn handle(&self) -> ChildHandle {
        self.handle.clone()
    }

    /// Close stdin (most CLIs exit on end of input), wait up to `grace` for
    /// the child to go, then kill its process group.
    pub async fn shutdown(self, grace: Duration) {
        drop(self.handle.shared.stdin.lock().await.take());
        let _ = tokio::time::timeout(grace, self.handle.gone()).await;
        // Drop kills whatever is left.
    }
}

impl std::ops::Deref for JsonChild {
    type Target = ChildHandle;

    fn deref(&self) -> &ChildHandle {
        &self.handle
    }
}

impl Drop for JsonChild {
    fn drop(&mut self) {
        self.handle.kill();
    }
}

impl ChildHandle {
    /// The child's label (used in logs and errors).
    pub fn label(&self) -> &str {
        &self.shared.label
    }

    /// The child's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.shared.pid
    }

    /// Whether the child is finished for us (stdout closed, or it was
    /// killed: then it is unusable even before its output drains).
    pub fn is_gone(&self) -> bool {
        self.shared.gone.is_cancelled() || self.shared.killed.load(Ordering::SeqCst)
    }

    /// Resolves once the child is finished for us.
    pub async fn gone(&self) {
        self.shared.gone.cancelled().await;
    }

    /// Why the child went away (exit status and stderr tail), once it did.
    pub fn exit_reason(&self) -> Option<String> {
        lock(&self.shared.pending).closed.clone()
    }

    /// Kill the child's whole process group. Idempotent.
    pub fn kill(&self) {
        self.shared.killed.store(true, Ordering::SeqCst);
        if !self.shared.reaped.load(Ordering::SeqCst) {
            self.shared.kill_group();
        }
    }

    /// Write one message as a line.
    pub async fn send(&self, message: &Value) -> Result<(), ChildError> {
        let shared = &self.shared;
        let mut line = serde_json::to_vec(message).map_err(|e| ChildError::Write {
            label: shared.label.clone(),
            message: format!("cannot encode the message: {e}"),
        })?;
        line.push(b'\n');
        if self.is_gone() {
            let _ = tokio::time::timeout(EXIT_WAIT, self.gone()).await;
            return Err(shared.exited_error());
        }
        let timeout = shared.write_timeout;
        let timed_out = || ChildError::Timeout {
            label: shared.label.clone(),
            after: timeout,
        };
        let mut stdin = tokio::time::timeout(timeout, shared.stdin.lock())
            .await
            .map_err(|_| timed_out())?;
        let Some(pipe) = stdin.as_mut() else {
            return Err(ChildError::Write {
                label: shared.label.clone(),
                message: "its input is already closed".to_owned(),
            });
        };
        let write = async {
            pipe.write_all(&line).await?;
            pipe.flush().await
        };
        match tokio::time::timeout(timeout, write).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                // It is exiting: report why, once known.
                drop(stdin);
                let _ = tokio::time::timeout(EXIT_WAIT, self.gone()).await;
                Err(shared.exited_error())
            }
            Ok(Err(e)) => Err(ChildError::Write {
                label: shared.label.clone(),
                message: e.to_string(),
            }),
            Err(_) => Err(timed_out()),
        }
    }

    /// Write `message` and wait up to `timeout` for the response whose key
    /// is `key`. Fails at once if the child goes away meanwhile.
    pub async fn request(
        &self,
        key: String,
        message: &Value,
        timeout: Duration,
    ) -> Result<Value, ChildError> {
        let shared = &self.shared;
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = lock(&shared.pending);
            if let Some(reason) = &pending.closed {
                return Err(ChildError::Exited {
                    label: shared.label.clone(),
                    reason: reason.clone(),
                });
            }
            pending.waiters.insert(key.clone(), tx);
        }
        if let Err(e) = self.send(message).await {
            lock(&shared.pending).waiters.remove(&key);
            return Err(e);
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(_)) => Err(shared.exited_error()),
            Err(_) => {
                lock(&shared.pending).waiters.remove(&key);
                Err(ChildError::Timeout {
                    label: shared.label.clone(),
                    after: timeout,
                })
            }
        }
    }
}

async fn monitor(shared: Arc<Shared>, mut child: Child) {
    let status = child.wait().await;
    shared.reaped.store(true, Ordering::SeqCst);
    // Whatever it left running in its group goes too.
    shared.kill_group();
    let text = match status {
        Ok(status) => describe_status(status),
        Err(e) => format!("waiting for it failed: {e}"),
    };
    tracing::debug!(child = %shared.label, pid = shared.pid, status = %text, "agent cli exited");
    *lock(&shared.exit_status) = Some(text);
    shared.exited.cancel();
}

fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "ended".to_owned(),
    }
}

async fn read_stderr(shared: Arc<Shared>, stderr: ChildStderr) {
    let mut reader = BufReader::new(stderr);
    while let Ok(Some(line)) = read_line(&mut reader, STDERR_LINE_LIMIT).await {
        let text = String::from_utf8_lossy(&line.bytes);
        let text = text.trim_end();
        if text.is_empty() {
            continue;
        }
        tracing::debug!(target: "agent_cli_stderr", child = %shared.label, "{text}");
        let mut tail = lock(&shared.stderr_tail);
        if tail.len() == STDERR_TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(text.to_owned());
    }
    shared.stderr_done.cancel();
}

async fn read_stdout(
    shared: Arc<Shared>,
    stdout: ChildStdout,
    inbound: mpsc::UnboundedSender<Value>,
    response_key: ResponseKey,
    limit: usize,
) {
    let mut reader = BufReader::new(stdout);
    loop {
        let line = match read_line(&mut reader, limit).await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(child = %shared.label, error = %e, "reading stdout failed");
                break;
            }
        };
        if line.cut > 0 {
            tracing::warn!(child = %shared.label, cut = line.cut, limit, "dropping an over-long line");
            continue;
        }
        let text = line.bytes.trim_ascii();
        if text.is_empty() {
            continue;
        }
        let value: Value = match serde_json::from_slice(text) {
            Ok(value) => value,
            Err(e) => {
                let shown = String::from_utf8_lossy(&text[..text.len().min(200)]).into_owned();
                tracing::debug!(child = %shared.label, error = %e, line = %shown, "ignoring a line that is not JSON");
                continue;
            }
        };
        if let Some(key) = response_key(&value) {
            let waiter = lock(&shared.pending).waiters.remove(&key);
            match waiter {
                // A waiter that gave up (timeout) is fine to miss.
                Some(waiter) => drop(waiter.send(value)),
                None => {
                    tracing::debug!(child = %shared.label, key = %key, "response to no waiting request")
                }
            }
            continue;
        }
        // Nobody listening (the owner is shutting down) is fine.
        let _ = inbound.send(value);
    }
    // Stdout closed: the child is finished for us. Give it a moment to exit
    // and flush stderr, so the reason is complete; then make sure it is gone.
    let settle = async {
        shared.exited.cancelled().await;
        shared.stderr_done.cancelled().await;
    };
    if tokio::time::timeout(EXIT_WAIT, settle).await.is_err() && !shared.exited.is_cancelled() {
        tracing::debug!(child = %shared.label, "stdout closed but the process lingers; killing it");
        if !shared.reaped.load(Ordering::SeqCst) {
            shared.kill_group();
        }
    }
    let reason = shared.reason();
    let waiters = {
        let mut pending = lock(&shared.pending);
        pending.closed = Some(reason);
        std::mem::take(&mut pending.waiters)
    };
    // Dropping the senders fails each waiting request with the reason.
    drop(waiters);
    shared.gone.cancel();
    drop(inbound);
}
