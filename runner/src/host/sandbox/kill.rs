//! Killing: the start-up sweep of what a previous run left behind, a
//! thread's kill (interrupt) and close (deletion), and the shutdown's
//! kill and close of everything.

use std::path::Path;
use std::sync::{Arc, PoisonError};

use agent_launcher::{KillReport, Launcher, LauncherConfig, Mode, ThreadSandbox};

use super::{AgentSandboxes, scope_for};

/// Kills and removes what a runner on `state_dir` (with the default cgroup
/// parent) left behind: agent processes, thread cgroups, its scope, as the
/// next start on it would. For whoever deletes a state directory that a
/// SIGKILLed runner used (test harnesses): no start would find them after.
/// Blocking.
pub fn sweep_state_dir(state_dir: &Path) {
    let config = LauncherConfig::new(Mode::Off, scope_for(state_dir));
    if let Ok(launcher) = Launcher::new(config) {
        sweep(&launcher);
        launcher.release();
    }
}

impl AgentSandboxes {
    /// Kills processes and cgroups a previous run left behind.
    pub fn sweep_leftovers(&self) {
        if let Ok(launcher) = &self.launcher {
            sweep(launcher);
        }
    }

    /// [`AgentSandboxes::sweep_leftovers`] on a thread of its own; the
    /// ways to a sandbox wait for it ([`AgentSandboxes::swept`]).
    pub(super) fn sweep_in_background(&mut self) {
        let Ok(launcher) = &self.launcher else {
            return;
        };
        let launcher = launcher.clone();
        let spawned = std::thread::Builder::new()
            .name("sandbox-sweep".into())
            .spawn(move || sweep(&launcher));
        match spawned {
            Ok(handle) => {
                *self.sweep.get_mut().unwrap_or_else(PoisonError::into_inner) = Some(handle);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the sweep thread; sweeping now");
                self.sweep_leftovers();
            }
        }
    }

    /// Waits for the start-up sweep, if it is still running. Blocking.
    pub fn swept(&self) {
        let mut sweep = self.sweep.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(handle) = sweep.take()
            && handle.join().is_err()
        {
            tracing::error!("the leftover sweep panicked");
        }
    }

    /// Kills every process of `thread_id` (those that left the process
    /// group too); the thread stays usable. Runs on the blocking pool.
    pub async fn kill_thread(&self, thread_id: &str) {
        let Some(sandbox) = self.get(thread_id) else {
            return;
        };
        let thread_id = thread_id.to_owned();
        let report = tokio::task::spawn_blocking(move || sandbox.kill_all()).await;
        log_kill(&thread_id, "interrupt", report);
    }

    /// Kills every process of `thread_id` and forgets its sandbox (thread
    /// deletion). Runs on the blocking pool.
    pub async fn close_thread(&self, thread_id: &str) {
        let removed = self
            .threads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_id
            .remove(thread_id);
        let Some(sandbox) = removed else {
            return;
        };
        let thread_id = thread_id.to_owned();
        let report = tokio::task::spawn_blocking(move || sandbox.close()).await;
        log_kill(&thread_id, "delete", report);
    }

    /// Removes the launcher's cgroup if it is empty: for a start-up that
    /// failed before any thread existed (a clean shutdown does it in
    /// [`AgentSandboxes::close_everything`]). Not blocking.
    pub fn release_launcher(&self) {
        if let Ok(launcher) = &self.launcher {
            launcher.release();
        }
    }

    /// Kills every process of every thread, removes their cgroups and the
    /// launcher's (a clean shutdown: the runtime is done). No sandbox is
    /// made after it; a second call returns once the first is over.
    /// Blocking.
    pub fn close_everything(&self) -> usize {
        self.swept();
        let _closing = self.closing.lock().unwrap_or_else(PoisonError::into_inner);
        let all: Vec<(String, Arc<ThreadSandbox>)> = {
            let mut threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
            threads.closed = true;
            threads.by_id.drain().collect()
        };
        let killed = kill_each(all, ThreadSandbox::close);
        if let Ok(launcher) = &self.launcher {
            launcher.release();
        }
        killed
    }

    /// Kills every process of every thread (shutdown, once the drain is
    /// over; the second signal closes instead). Blocking; threads stay
    /// known (a turn may still report its end).
    pub fn kill_everything(&self) -> usize {
        self.swept();
        let all: Vec<(String, Arc<ThreadSandbox>)> = self
            .threads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_id
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        kill_each(all, ThreadSandbox::kill_all)
    }
}

/// `kill` on each sandbox, survivors logged; how many processes died.
fn kill_each(
    all: Vec<(String, Arc<ThreadSandbox>)>,
    kill: impl Fn(&ThreadSandbox) -> KillReport,
) -> usize {
    let mut killed = 0;
    for (thread_id, sandbox) in all {
        let report = kill(&sandbox);
        killed += report.killed;
        if !report.survivors.is_empty() {
            tracing::warn!(%thread_id, survivors = ?report.survivors, "agent processes survived the kill");
        }
    }
    killed
}

/// Kills what a previous run with `launcher`'s scope left behind.
fn sweep(launcher: &Launcher) {
    let report = launcher.sweep_leftovers();
    if report.killed > 0 || !report.cgroups.is_empty() {
        tracing::warn!(
            killed = report.killed,
            cgroups = report.cgroups.len(),
            survivors = ?report.survivors,
            "killed agent processes a previous run left behind"
        );
    }
}

/// Logs the outcome of killing `thread_id`'s processes (for `why`).
fn log_kill(thread_id: &str, why: &str, report: Result<KillReport, tokio::task::JoinError>) {
    match report {
        Ok(report) if !report.survivors.is_empty() => {
            tracing::warn!(%thread_id, why, killed = report.killed, survivors = ?report.survivors, "agent processes survived the kill");
        }
        Ok(report) if report.killed > 0 => {
            tracing::info!(%thread_id, why, killed = report.killed, "killed the thread's remaining processes");
        }
        Ok(_) => {}
        Err(e) => {
            tracing::error!(%thread_id, why, error = %e, "killing the thread's processes failed")
        }
    }
}
