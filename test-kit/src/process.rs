//! Child processes: stderr captured line by line while they run, and
//! stopping a runner as an operator stops it.
//!
//! A runner stops on SIGTERM (it drains), and on a second SIGTERM kills every
//! agent, removes every thread's cgroup and its scope, and exits. A
//! SIGKILLed runner leaves its cgroups behind for the next start on the same
//! state directory, which a test's (or a bench run's) temporary directory
//! never sees: runs that SIGKILLed their runners once left 861,264 cgroups
//! in the bench machine's cgroup v2 tree. So [`stop`] and [`stop_blocking`]
//! send two signals and SIGKILL only a runner that did not exit after them.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt as _, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

/// Between the two signals: the first must have been taken (the runner
/// starts draining) for the second to count as a second.
pub const SECOND_SIGNAL_AFTER: Duration = Duration::from_millis(100);

/// A child's output, collected line by line as it runs.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<String>>);

impl Logs {
    /// Everything collected so far.
    pub fn text(&self) -> String {
        self.0.lock().unwrap().clone()
    }

    /// Copies `from` into these logs line by line until it closes.
    pub fn capture(&self, from: impl AsyncRead + Unpin + Send + 'static) -> JoinHandle<()> {
        let sink = self.0.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(from).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        })
    }
}

/// Spawns `cmd` with stderr piped into [`Logs`] (stdout and stdin null,
/// killed when dropped).
pub fn spawn_logged(cmd: &mut Command) -> (Child, Logs) {
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn");
    let logs = Logs::default();
    logs.capture(child.stderr.take().expect("stderr piped"));
    (child, logs)
}

/// Sends `sig` to `child` unless it has exited; false if it had.
pub fn signal_running(child: &mut Child, sig: i32) -> bool {
    if !matches!(child.try_wait(), Ok(None)) {
        return false;
    }
    let Some(pid) = child.id() else {
        return false;
    };
    // SAFETY: signalling our own child, not yet reaped (checked above), so
    // its pid cannot have been reused.
    unsafe { libc::kill(pid as i32, sig) };
    true
}

/// Stops `child` (see the module): SIGTERM, a second one
/// [`SECOND_SIGNAL_AFTER`] later, SIGKILL if it has not exited `patience`
/// after that.
pub async fn stop(child: &mut Child, patience: Duration) {
    if !signal_running(child, libc::SIGTERM) {
        return;
    }
    tokio::time::sleep(SECOND_SIGNAL_AFTER).await;
    signal_running(child, libc::SIGTERM);
    if tokio::time::timeout(patience, child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
}

/// [`stop`], blocking: for `Drop`, which cannot wait on the runtime.
pub fn stop_blocking(child: &mut Child, patience: Duration) {
    if !signal_running(child, libc::SIGTERM) {
        return;
    }
    std::thread::sleep(SECOND_SIGNAL_AFTER);
    signal_running(child, libc::SIGTERM);
    let deadline = Instant::now() + patience;
    while Instant::now() < deadline {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.start_kill();
}
