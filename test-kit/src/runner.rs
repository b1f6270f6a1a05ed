//! The runner under test: the real `agent-runner` binary started with
//! `run` against a mock control plane, on temporary state and workspace
//! directories, health endpoints off (parallel runners never contend for a
//! port), and stopped as an operator stops it ([`crate::process`]).
//!
//! What differs between the crates that start runners is said once, in a
//! [`Kit`]: the runner's own tests know their binary exactly and sweep what
//! a SIGKILLed runner leaves (the runner library does that); everyone else
//! takes [`Plain`].

use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mock_control_plane::{MockConfig, MockControlPlane};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use crate::process::{Logs, stop, stop_blocking};
use crate::requests::{create_agent, create_thread};

/// Generous: machines are shared and noisy; tests never assert timings.
pub const WAIT: Duration = Duration::from_secs(30);

/// What a crate starting runners tells the kit.
pub trait Kit: 'static {
    /// The runner binary, when [`RunnerOpts::bin`] names none.
    fn runner_bin() -> PathBuf {
        crate::paths::runner_bin().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Called with the state directory of [`RunnerDirs`] the kit created,
    /// when they go: a SIGKILLed runner leaves its agents' cgroups (and
    /// processes that escaped them) for the next start on its state
    /// directory to sweep, and there is none once the directory goes.
    fn sweep_state(_state_dir: &Path) {}
}

/// The kit's defaults: the binary [`crate::paths::runner_bin`] finds,
/// nothing swept.
pub struct Plain;

impl Kit for Plain {}

/// How to start a runner: the control plane's URL, flags and environment.
#[derive(Clone, Debug)]
pub struct RunnerOpts {
    /// `--control-plane-url`.
    pub url: String,
    /// Flags after `run` and the kit's own.
    pub args: Vec<String>,
    /// Environment set last (wins over the kit's).
    pub env: Vec<(String, String)>,
    /// The binary; the [`Kit`]'s when `None`.
    pub bin: Option<PathBuf>,
    /// Debug logging and quick reconnects (50 ms to 500 ms) for tests;
    /// off: the runner's own defaults, as an operator runs it.
    pub test_defaults: bool,
    /// Stderr into `runner.log` in the runner's directory instead of memory
    /// (long runs that log a lot).
    pub log_file: bool,
    /// How long a stopping runner may take after its second SIGTERM before
    /// it is killed.
    pub stop_patience: Duration,
}

impl RunnerOpts {
    /// A test's runner: debug log, quick reconnects, stderr kept in memory.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            args: vec![],
            env: vec![],
            bin: None,
            test_defaults: true,
            log_file: false,
            stop_patience: Duration::from_secs(10),
        }
    }

    /// A runner as an operator starts it: no flags but `args`.
    pub fn plain(url: impl Into<String>) -> Self {
        Self {
            test_defaults: false,
            ..Self::new(url)
        }
    }

    /// One more flag (or flag value).
    pub fn arg(mut self, a: &str) -> Self {
        self.args.push(a.to_owned());
        self
    }

    /// One more environment variable.
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.to_owned(), v.to_owned()));
        self
    }

    /// The same options pointed at `cp`.
    pub fn clone_for(&self, cp: &MockControlPlane) -> Self {
        Self {
            url: cp.url(),
            ..self.clone()
        }
    }
}

/// A runner's state (`state/`) and workspace (`ws/`) directories, shared by
/// the runners started on them one after another.
pub struct RunnerDirs<K: Kit = Plain> {
    dir: Dir,
    _kit: PhantomData<fn() -> K>,
}

enum Dir {
    /// A temporary directory, removed (and swept) with this.
    Owned(tempfile::TempDir),
    /// Someone else's, left alone.
    At(PathBuf),
}

impl<K: Kit> RunnerDirs<K> {
    /// A fresh temporary directory.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            dir: Dir::Owned(tempfile::tempdir().expect("tempdir")),
            _kit: PhantomData,
        })
    }

    /// Directories under `path`, which its owner keeps and removes.
    pub fn at(path: &Path) -> Arc<Self> {
        Arc::new(Self {
            dir: Dir::At(path.to_path_buf()),
            _kit: PhantomData,
        })
    }

    /// The directory holding `state/` and `ws/`.
    pub fn path(&self) -> &Path {
        match &self.dir {
            Dir::Owned(d) => d.path(),
            Dir::At(p) => p,
        }
    }
}

impl<K: Kit> Drop for RunnerDirs<K> {
    /// Nothing runs on these directories any more: every runner started on
    /// them holds them.
    fn drop(&mut self) {
        if let Dir::Owned(d) = &self.dir {
            let state = d.path().join("state");
            if state.exists() {
                K::sweep_state(&state);
            }
        }
    }
}

/// Where a runner's stderr goes.
enum Captured {
    Memory {
        logs: Logs,
        /// Copies stderr into `logs` until it closes.
        reader: Option<JoinHandle<()>>,
    },
    File(PathBuf),
}

/// A running `agent-runner run`. Dropped, it is stopped as an operator
/// stops it (blocking).
pub struct RunnerProc<K: Kit = Plain> {
    /// The process.
    pub child: Child,
    /// Its state and workspace directories.
    pub dirs: Arc<RunnerDirs<K>>,
    /// When it was spawned.
    pub started: Instant,
    opts: RunnerOpts,
    logs: Captured,
}

impl<K: Kit> RunnerProc<K> {
    /// Starts a runner on fresh directories.
    pub fn start(opts: RunnerOpts) -> Self {
        Self::start_in(opts, RunnerDirs::new())
    }

    /// Starts a runner on the state and workspaces of an earlier one.
    pub fn start_in(opts: RunnerOpts, dirs: Arc<RunnerDirs<K>>) -> Self {
        Self::try_start_in(opts, dirs).unwrap_or_else(|e| panic!("spawn agent-runner: {e}"))
    }

    /// [`RunnerProc::start_in`], an error when the binary cannot be started.
    pub fn try_start_in(opts: RunnerOpts, dirs: Arc<RunnerDirs<K>>) -> std::io::Result<Self> {
        let bin = opts.bin.clone().unwrap_or_else(K::runner_bin);
        let mut cmd = Command::new(&bin);
        cmd.arg("run")
            .arg("--control-plane-url")
            .arg(&opts.url)
            .arg("--state-dir")
            .arg(dirs.path().join("state"))
            .arg("--workspace-root")
            .arg(dirs.path().join("ws"));
        if opts.test_defaults {
            cmd.args(["--log-level", "debug"])
                .args(["--reconnect-min-delay", "50ms"])
                .args(["--reconnect-max-delay", "500ms"]);
        }
        cmd.args(&opts.args)
            .env_remove("AGENT_RUNNER_SECRET")
            // Health endpoints off unless asked for (`--health-addr` wins
            // over this), so parallel runners never contend for one port.
            .env("AGENT_RUNNER_HEALTH_ADDR", "")
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true);
        let log = dirs.path().join("runner.log");
        if opts.log_file {
            cmd.stderr(Stdio::from(std::fs::File::create(&log)?));
        } else {
            cmd.stderr(Stdio::piped());
        }
        let started = Instant::now();
        let mut child = cmd
            .spawn()
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", bin.display())))?;
        let logs = match child.stderr.take() {
            Some(stderr) => {
                let logs = Logs::default();
                let reader = Some(logs.capture(stderr));
                Captured::Memory { logs, reader }
            }
            None => Captured::File(log),
        };
        Ok(Self {
            child,
            dirs,
            started,
            opts,
            logs,
        })
    }

    /// Another runner with the same options on the same directories (a
    /// restart, once this one is gone).
    pub fn start_again(&self) -> Self {
        Self::start_in(self.opts.clone(), self.dirs.clone())
    }

    /// Everything it wrote to stderr so far.
    pub fn logs(&self) -> String {
        match &self.logs {
            Captured::Memory { logs, .. } => logs.text(),
            Captured::File(path) => std::fs::read_to_string(path).unwrap_or_default(),
        }
    }

    /// The last `n` lines of [`RunnerProc::logs`] (for error messages).
    pub fn log_tail(&self, n: usize) -> String {
        let text = self.logs();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Waits until the log shows `needle` (evidence that something was
    /// tried); panics after [`WAIT`].
    pub async fn wait_log(&self, needle: &str) {
        crate::wait::until(
            || self.logs().contains(needle),
            || format!("no {needle:?} in the log:\n{}", self.logs()),
        )
        .await;
    }

    /// `--workspace-root`.
    pub fn workspace_root(&self) -> PathBuf {
        self.dirs.path().join("ws")
    }

    /// The workspace of `thread` of `agent`.
    pub fn thread_workspace(&self, agent: &str, thread: &str) -> PathBuf {
        self.workspace_root()
            .join(agent)
            .join("threads")
            .join(thread)
    }

    /// Its pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Sends `sig`.
    pub fn signal(&self, sig: i32) {
        let pid = self.child.id().expect("running") as i32;
        // SAFETY: sending a signal to our own child.
        unsafe { libc::kill(pid, sig) };
    }

    /// Its resident memory (`VmRSS`), in bytes.
    pub fn rss_bytes(&self) -> u64 {
        let pid = self.child.id().expect("runner is running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
            .expect("VmRSS")
            * 1024
    }

    /// Waits for the process to exit: its exit code once it exited (-1: by
    /// a signal), with everything it wrote to stderr in
    /// [`RunnerProc::logs`]; `None` if it did not exit.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let code = match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(Ok(status)) => status.code().or(Some(-1)),
            _ => return None,
        };
        // Its last lines may still be in the pipe: read to the end (a
        // process it started may hold the pipe open; not for ever).
        if let Captured::Memory { reader, .. } = &mut self.logs
            && let Some(reader) = reader.take()
        {
            let _ = tokio::time::timeout(WAIT, reader).await;
        }
        code
    }

    /// Stops it as an operator would (see [`crate::process`]), waiting.
    pub async fn stop(mut self) {
        stop(&mut self.child, self.opts.stop_patience).await;
    }
}

impl<K: Kit> Drop for RunnerProc<K> {
    /// [`RunnerProc::stop`], blocking: a drop cannot wait on the runtime.
    fn drop(&mut self) {
        stop_blocking(&mut self.child, self.opts.stop_patience);
    }
}

/// A mock control plane with the default settings.
pub async fn mock() -> MockControlPlane {
    MockControlPlane::start(MockConfig::default())
        .await
        .expect("mock starts")
}

/// A mock and a runner started with the options `configure` makes,
/// connected.
pub async fn connected_with<K: Kit>(
    configure: impl FnOnce(RunnerOpts) -> RunnerOpts,
) -> (MockControlPlane, RunnerProc<K>) {
    let cp = mock().await;
    let runner = RunnerProc::start(configure(RunnerOpts::new(cp.url())));
    cp.wait_connected(WAIT).await.expect("runner connects");
    (cp, runner)
}

/// [`connected_with`], and agent `a` (scripted) created.
pub async fn agent_with<K: Kit>(
    configure: impl FnOnce(RunnerOpts) -> RunnerOpts,
) -> (MockControlPlane, RunnerProc<K>) {
    let (cp, runner) = connected_with(configure).await;
    create_agent(&cp, "a").await;
    (cp, runner)
}

/// A mock, a connected runner, agent `a` and its thread; the thread's id.
pub async fn thread_ready<K: Kit>() -> (MockControlPlane, RunnerProc<K>, String) {
    let (cp, runner) = agent_with(|opts| opts).await;
    let thread = create_thread(&cp, "a", "t").await;
    (cp, runner, thread)
}

/// `n` threads of agent `a` (model scripted-fast), created one after
/// another with request ids `t0`, `t1`, …; their ids.
pub async fn threads_of_a(cp: &MockControlPlane, n: usize) -> Vec<String> {
    let mut threads = Vec::with_capacity(n);
    for i in 0..n {
        threads.push(create_thread(cp, "a", &format!("t{i}")).await);
    }
    threads
}
