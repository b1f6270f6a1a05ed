//! The runner's side of the one launcher (issue 17): the [`Launcher`] built
//! once at start from the sandbox settings, each thread's
//! [`ThreadSandbox`] (made when the thread is created or re-opened, closed
//! when it is deleted), and the kill paths that reach every process of a
//! thread — interrupt, delete, shutdown — including those that left their
//! process group (`setsid`).
//!
//! What agents may never see is listed here once: the state dir, the bearer
//! secret file, the GitHub App key file and the code-agent state dir.
//!
//! In mode `enforce` on a host without Landlock the launcher cannot be
//! built; the runner still starts, and every thread's sandbox carries the
//! reason, so turns are refused with it (a `RequestError`) instead of
//! running unconfined.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use agent_launcher::{
    EnvPolicy, HostProbe, KillReport, Launcher, LauncherConfig, Mode, ThreadSandbox, ThreadSpec,
};
use sdk_adapter::Sandbox;
use serde::{Deserialize, Serialize};

use crate::config::{RunConfig, SandboxConfig};
use crate::host::workspace::Workspaces;

/// The id under which the SDK probe sandbox (codex `describe`) is kept; not
/// a valid thread id, so never confused with one.
const PROBE: &str = ".sdk-probe";

/// What `/status`, `agent-runner status` and `sdk list` show of the sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxStatus {
    /// `enforce`, `best-effort` or `off`.
    pub mode: String,
    /// What the host offers, one fact a line (Landlock ABI, cgroup, uid).
    pub host: Vec<String>,
    /// What will not be applied to any thread on this host.
    pub missing: Vec<String>,
    /// Why no thread may run at all (mode `enforce` without Landlock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// The launcher and every thread's sandbox.
#[derive(Debug)]
pub struct AgentSandboxes {
    launcher: Result<Arc<Launcher>, String>,
    status: SandboxStatus,
    threads: Mutex<Threads>,
    /// Set when agents run as another uid: their directories are theirs.
    owner: Option<(u32, u32)>,
    /// What every thread's sandbox may write besides its own directories,
    /// and what the SDK probe's may (see [`sdk_homes`]).
    sdk_homes: Vec<PathBuf>,
    probe_homes: Vec<PathBuf>,
    /// The start-up sweep of a previous run's leftovers, while it runs on
    /// its own thread: every way to a thread's sandbox waits for it first
    /// (the sweep kills by scope, which would include new agents).
    sweep: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Held for the whole of [`AgentSandboxes::close_everything`]: the
    /// second signal's close, which exits the process once it returns,
    /// waits for the shutdown's close already killing and removing (it
    /// would otherwise find nothing left to do and exit mid-way, leaving
    /// the cgroups being emptied behind).
    closing: Mutex<()>,
}

/// Every thread's sandbox by thread id, and whether they were all closed.
#[derive(Debug, Default)]
struct Threads {
    by_id: HashMap<String, Arc<ThreadSandbox>>,
    /// Set by [`AgentSandboxes::close_everything`], under the same lock as
    /// the drain: a sandbox asked for after it (a turn or the SDK probe
    /// still starting during shutdown) is refused, so no cgroup is made
    /// that nothing would remove.
    closed: bool,
}

/// Paths agents must never see, from the settings.
pub fn protected_paths(config: &RunConfig) -> Vec<PathBuf> {
    let mut out = vec![config.state_dir.clone()];
    out.extend(config.secret_file.clone());
    out.extend(config.github_app_key_file.clone());
    out.extend(config.sdk_options.code_agent.state_dir.clone());
    out
}

/// A scope stable across restarts of the runner on `state_dir` and
/// distinct between runners sharing a host (they have distinct state dirs).
/// A hash that a newer toolchain does not change (std's `DefaultHasher`
/// may), or a rebuilt runner would no longer find its predecessor's
/// leftovers: the first 6 bytes of the path's SHA-256.
pub fn scope_for(state_dir: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let dir = std::fs::canonicalize(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
    let digest = ring::digest::digest(&ring::digest::SHA256, dir.as_os_str().as_bytes());
    let hex: String = digest.as_ref()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("agent-runner-{hex}")
}

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

/// The launcher's configuration for `sandbox` settings.
pub fn launcher_config(
    sandbox: &SandboxConfig,
    scope: String,
    protected: Vec<PathBuf>,
) -> LauncherConfig {
    let mut config = LauncherConfig::new(sandbox.mode, scope);
    config.protected = protected;
    config.read_only = sandbox.read_only.clone();
    config.env = EnvPolicy {
        inherit: EnvPolicy::default()
            .inherit
            .into_iter()
            .chain(sandbox.env.iter().cloned())
            .collect(),
        set: Vec::new(),
    };
    config.rlimits = sandbox.rlimits;
    config.cgroup_limits = sandbox.cgroup_limits;
    config.agent_user = sandbox.agent_user;
    config
}

impl AgentSandboxes {
    /// Builds the launcher from the run settings (probing the host) and
    /// kills what a previous run on the same state dir left behind.
    pub fn start(config: &RunConfig) -> anyhow::Result<Self> {
        let mut launcher_config = launcher_config(
            &config.sandbox,
            scope_for(&config.state_dir),
            protected_paths(config),
        );
        launcher_config.read_only.extend(runner_programs(config));
        // `--proxy` reaches agents' git and CLIs as HTTPS_PROXY & co.
        launcher_config.env.set.extend(config.proxy.agent_env());
        let mut me = Self::with_probe(launcher_config, agent_launcher::probe_host())?;
        (me.sdk_homes, me.probe_homes) = sdk_homes(config);
        // Off the path to registration: the sweep reads every process's
        // environment; sandboxes are handed out only after it (`swept`).
        me.sweep_in_background();
        Ok(me)
    }

    /// Builds the launcher with a given host probe. An `enforce` launcher
    /// the host cannot satisfy is not an error here: threads are refused
    /// with the reason. A contradictory configuration is an error.
    pub fn with_probe(config: LauncherConfig, probe: HostProbe) -> anyhow::Result<Self> {
        let mode = config.mode;
        let owner = match mode {
            Mode::Off => None,
            _ => config.agent_user.map(|u| (u.uid, u.gid)),
        };
        let host = probe.summary();
        let (launcher, status) = match Launcher::with_probe(config, probe) {
            Ok(launcher) => {
                let status = SandboxStatus::from(launcher.status());
                (Ok(Arc::new(launcher)), status)
            }
            Err(e @ agent_launcher::LaunchError::Unavailable { .. }) => {
                let why = e.to_string();
                let status = SandboxStatus {
                    mode: mode.to_string(),
                    host,
                    missing: Vec::new(),
                    refused: Some(why.clone()),
                };
                (Err(why), status)
            }
            Err(e) => return Err(anyhow::anyhow!("sandbox: {e}")),
        };
        match (&status.refused, status.missing.is_empty()) {
            (Some(why), _) => {
                tracing::error!(mode = %status.mode, reason = %why, "agent sandbox unavailable: every turn will be refused");
            }
            (None, true) => {
                tracing::info!(mode = %status.mode, host = %status.host.join("; "), "agent sandbox ready");
            }
            (None, false) => {
                tracing::warn!(mode = %status.mode, host = %status.host.join("; "), missing = %status.missing.join("; "), "agent sandbox: what could not be applied on this host");
            }
        }
        for what in &status.missing {
            crate::observe::metrics::sandbox_missing(&feature_of(what));
        }
        Ok(Self::new(launcher, status, owner))
    }

    /// A sandbox without isolation (mode `off`, no cgroups, no sweep): for
    /// runtimes built in tests, fuzzing and benchmarks.
    pub fn unconfined(scope: &str) -> Self {
        let config = LauncherConfig {
            cgroups: false,
            ..LauncherConfig::new(Mode::Off, scope)
        };
        match Launcher::new(config) {
            Ok(launcher) => {
                let status = SandboxStatus::from(launcher.status());
                Self::new(Ok(Arc::new(launcher)), status, None)
            }
            Err(e) => {
                let status = SandboxStatus {
                    mode: Mode::Off.to_string(),
                    refused: Some(e.to_string()),
                    ..SandboxStatus::default()
                };
                Self::new(Err(e.to_string()), status, None)
            }
        }
    }

    /// No thread sandbox yet, no SDK homes, no sweep running.
    fn new(
        launcher: Result<Arc<Launcher>, String>,
        status: SandboxStatus,
        owner: Option<(u32, u32)>,
    ) -> Self {
        Self {
            launcher,
            status,
            threads: Mutex::new(Threads::default()),
            owner,
            sdk_homes: Vec::new(),
            probe_homes: Vec::new(),
            sweep: Mutex::new(None),
            closing: Mutex::new(()),
        }
    }

    /// The mode and what the host offers and lacks.
    pub fn status(&self) -> &SandboxStatus {
        &self.status
    }

    /// Kills processes and cgroups a previous run left behind.
    pub fn sweep_leftovers(&self) {
        if let Ok(launcher) = &self.launcher {
            sweep(launcher);
        }
    }

    /// [`AgentSandboxes::sweep_leftovers`] on a thread of its own; the
    /// ways to a sandbox wait for it ([`AgentSandboxes::swept`]).
    fn sweep_in_background(&mut self) {
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

    /// The sandbox of `thread_id` of `agent_id`, made on first use: its
    /// workspace (must exist), HOME and TMPDIR under the thread's private
    /// dir (0700, owned by the agent uid when one is set), the agent's
    /// skills read-only. Blocking (file system, cgroupfs).
    pub fn thread(&self, workspaces: &Workspaces, agent_id: &str, thread_id: &str) -> Sandbox {
        self.made_once(
            thread_id,
            "thread",
            workspaces.thread_dir(agent_id, thread_id),
            &workspaces.thread_private(agent_id, thread_id),
            |workspace| {
                let mut skills = vec![workspaces.agent_skills(agent_id)];
                skills.extend(thread_package_skills(workspaces, &workspace));
                ThreadSpec {
                    workspace,
                    home_dir: workspaces.thread_home(agent_id, thread_id),
                    tmp_dir: workspaces.thread_tmp(agent_id, thread_id),
                    skills,
                    read_write: self.sdk_homes.clone(),
                    ..ThreadSpec::default()
                }
            },
        )
    }

    /// A sandbox for processes that belong to no thread (the codex
    /// `describe` probe), under `<workspace root>/.sdk-probe/`.
    pub fn probe(&self, workspaces: &Workspaces) -> Sandbox {
        let root = workspaces.root().join(PROBE);
        self.made_once(
            PROBE,
            "probe",
            root.join("workspace"),
            &root.join("private"),
            |workspace| ThreadSpec {
                workspace,
                home_dir: root.join("private/home"),
                tmp_dir: root.join("private/tmp"),
                read_write: self.probe_homes.clone(),
                ..ThreadSpec::default()
            },
        )
    }

    /// The sandbox kept under `key`, made on first use (after the sweep):
    /// `workspace` and `private` prepared ([`Self::own_dirs`]), then the
    /// launcher's sandbox for `spec(workspace)`. `what` names it in errors.
    fn made_once(
        &self,
        key: &str,
        what: &str,
        workspace: PathBuf,
        private: &Path,
        spec: impl FnOnce(PathBuf) -> ThreadSpec,
    ) -> Sandbox {
        self.swept();
        let mut threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sandbox) = threads.by_id.get(key) {
            return Sandbox::ready(sandbox.clone());
        }
        if threads.closed {
            return Sandbox::refused(format!(
                "the runner is shutting down: no new {what} sandbox"
            ));
        }
        let launcher = match &self.launcher {
            Ok(launcher) => launcher,
            Err(why) => return Sandbox::refused(why.clone()),
        };
        if let Err(e) = self.own_dirs(&workspace, private) {
            return Sandbox::refused(format!("preparing the {what}'s directories: {e}"));
        }
        match launcher.thread(spec(workspace)) {
            Ok(sandbox) => {
                tracing::debug!(thread_id = %key, applied = %sandbox.applied(), "{what} sandbox ready");
                let sandbox = Arc::new(sandbox);
                threads.by_id.insert(key.to_owned(), sandbox.clone());
                Sandbox::ready(sandbox)
            }
            Err(e) => {
                tracing::error!(thread_id = %key, error = %e, "{what} sandbox refused");
                Sandbox::refused(e.to_string())
            }
        }
    }

    /// Creates `workspace` and `private` (0700); with an agent uid both
    /// become the agent's.
    fn own_dirs(&self, workspace: &Path, private: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(workspace)?;
        std::fs::create_dir_all(private)?;
        std::fs::set_permissions(private, std::fs::Permissions::from_mode(0o700))?;
        if let Some((uid, gid)) = self.owner {
            use std::os::unix::fs::MetadataExt;
            for dir in [workspace, private] {
                // Handed over once, when the runner made it: a thread
                // re-opened after a restart is the agent's already, and
                // walking every file of every workspace at start-up is not
                // needed.
                if std::fs::symlink_metadata(dir)?.uid() != uid {
                    chown_tree(dir, uid, gid)?;
                }
            }
        }
        Ok(())
    }

    /// The process tag of `thread_id`'s sandbox, if it has one now.
    pub fn thread_tag(&self, thread_id: &str) -> Option<String> {
        self.get(thread_id).map(|s| s.tag().to_owned())
    }

    fn get(&self, thread_id: &str) -> Option<Arc<ThreadSandbox>> {
        self.threads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_id
            .get(thread_id)
            .cloned()
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

impl From<agent_launcher::LauncherStatus> for SandboxStatus {
    fn from(status: agent_launcher::LauncherStatus) -> Self {
        Self {
            mode: status.mode.to_string(),
            host: status.host,
            missing: status.missing,
            refused: None,
        }
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

/// What agents must be able to run besides the system: this binary (the
/// git credential helper is `agent-runner git-credential`) and the codex
/// and claude CLIs when they are given as paths: the CLI's directory, or,
/// for a CLI installed with npm, the whole `node_modules` tree it sits in
/// (the npm wrapper starts a native binary from a sibling package). A CLI
/// found on PATH under `/usr` is readable already; one elsewhere needs
/// `--sandbox-read-only`.
fn runner_programs(config: &RunConfig) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::env::current_exe().into_iter().collect();
    let options = &config.sdk_options;
    for bin in [&options.codex.bin, &options.claude.bin] {
        if bin.components().count() > 1
            && let Ok(real) = std::fs::canonicalize(bin)
        {
            out.extend(program_dir(&real));
        }
    }
    out
}

/// The directory agents need to read to run the program at `real` (a
/// resolved path): the outermost `node_modules` above it, else its own.
fn program_dir(real: &Path) -> Option<PathBuf> {
    let node_modules = real
        .ancestors()
        .filter(|dir| dir.file_name().is_some_and(|name| name == "node_modules"))
        .last();
    node_modules.or(real.parent()).map(Path::to_path_buf)
}

/// The skills of the thread's own packages (`git_skill_packages`): the
/// entries of the shared skill cache its `.agents/skills` links to, and
/// only those, so a thread reads no other thread's packages. The links are
/// made before the thread's sandbox (at creation; on disk after a restart).
fn thread_package_skills(workspaces: &Workspaces, workspace: &Path) -> Vec<PathBuf> {
    let Ok(cache) = workspaces
        .root()
        .join(crate::host::skills::thread::CACHE_DIR)
        .canonicalize()
    else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(workspace.join(".agents").join("skills")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.path().canonicalize().ok())
        .filter(|target| target.starts_with(&cache))
        .collect()
}

/// The SDK homes the operator configured, created if missing, as
/// (what every thread's sandbox may write, what the probe's may write).
///
/// - codex: the operator's `CODEX_HOME` (`sdk_codex::operator_codex_home`:
///   the adapter's, else the runner's, else `$HOME/.codex`). Threads never
///   see it: each gets its own CODEX_HOME in its HOME, seeded from this one.
///   The describe probe and a `CodexConfigurationRequest` login work on it
///   directly, so a login is what later threads are seeded with.
/// - Claude Code: `CLAUDE_CONFIG_DIR` when set (the adapter's, else the
///   runner's). It holds the login and the sessions' transcripts, and
///   Claude Code has no way to seed a copy, so every thread gets it
///   read-write: Claude threads share it. Unset, each thread uses its own
///   HOME's `~/.claude` and needs an API key in the environment.
fn sdk_homes(config: &RunConfig) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let options = &config.sdk_options;
    let lookup = |env: &[(String, String)], key: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| PathBuf::from(v))
            .or_else(|| std::env::var_os(key).map(PathBuf::from))
            .filter(|p| p.is_absolute())
    };
    // A home the operator named must work (a warning says why not); codex's
    // default `$HOME/.codex` is only used when it can be.
    let created = |home: PathBuf, named: bool| match std::fs::create_dir_all(&home) {
        Ok(()) => Some(home),
        Err(e) if named => {
            tracing::warn!(home = %home.display(), error = %e, "an SDK home cannot be created; agents will not see it");
            None
        }
        Err(e) => {
            tracing::debug!(home = %home.display(), error = %e, "no default SDK home");
            None
        }
    };
    let enabled = |sdk: &str| config.sdks.is_empty() || config.sdks.iter().any(|s| s == sdk);
    let claude: Vec<PathBuf> = lookup(&options.claude.env, "CLAUDE_CONFIG_DIR")
        .filter(|_| enabled("claude-code"))
        .and_then(|home| created(home, true))
        .into_iter()
        .collect();
    let codex_named = lookup(&options.codex.env, "CODEX_HOME").is_some();
    let codex = sdk_codex::operator_codex_home(&options.codex)
        .filter(|p| p.is_absolute() && enabled("codex"))
        .and_then(|home| created(home, codex_named));
    let probe = claude.iter().cloned().chain(codex).collect();
    (claude, probe)
}

/// The metric label of a "missing" line: a short, bounded name
/// (`landlock`, `landlock_scope`, `landlock_net`, `capabilities`,
/// `cgroup`, `cgroup_memory`, `cgroup_pids`, `cgroup_cpu`, `rlimit_nproc`,
/// `other`).
fn feature_of(line: &str) -> String {
    let lower = line.to_ascii_lowercase();
    if let Some(rest) = lower.strip_prefix("cgroup controller ") {
        let controller = rest.split([' ', ':']).next().unwrap_or_default();
        if ["memory", "pids", "cpu"].contains(&controller) {
            return format!("cgroup_{controller}");
        }
        return "cgroup".to_owned();
    }
    let name = if lower.starts_with("landlock scoping") {
        "landlock_scope"
    } else if lower.starts_with("landlock tcp") || lower.starts_with("tcp rules") {
        "landlock_net"
    } else if lower.starts_with("landlock") || lower.starts_with("read-only path") {
        "landlock"
    } else if lower.starts_with("capabilit") {
        "capabilities"
    } else if lower.starts_with("cgroup") || lower.starts_with("thread cgroup") {
        "cgroup"
    } else if lower.starts_with("rlimit nproc") {
        "rlimit_nproc"
    } else {
        "other"
    };
    name.to_owned()
}

/// `chown -R uid:gid dir` without following symlinks.
fn chown_tree(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(dir, Some(uid), Some(gid))?;
    if std::fs::symlink_metadata(dir)?.is_dir() {
        for entry in std::fs::read_dir(dir)? {
            chown_tree(&entry?.path(), uid, gid)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The start-up sweep runs on its own thread; a thread's sandbox is
    /// handed out only once it is over (the sweep kills by scope).
    #[test]
    fn no_sandbox_before_the_sweep_is_over() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspaces::new(dir.path().join("ws")).unwrap();
        ws.create_thread("a", "t").unwrap();
        let mut config = LauncherConfig::new(Mode::Off, "runner-test-sweep");
        config.cgroups = false;
        let mut sandboxes =
            AgentSandboxes::with_probe(config, agent_launcher::probe_host()).unwrap();
        let over = Arc::new(AtomicBool::new(false));
        let flag = over.clone();
        *sandboxes.sweep.get_mut().unwrap() = Some(std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            flag.store(true, Ordering::SeqCst);
        }));
        let sandbox = sandboxes.thread(&ws, "a", "t");
        assert!(over.load(Ordering::SeqCst), "handed out during the sweep");
        sandbox.get().unwrap();
    }

    /// Shutdown closes every sandbox; one asked for after that (the SDK
    /// probe or a turn still starting) is refused, not made and left.
    #[test]
    fn no_sandbox_is_made_after_close_everything() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspaces::new(dir.path().join("ws")).unwrap();
        ws.create_thread("a", "t").unwrap();
        ws.create_thread("a", "u").unwrap();
        let mut config = LauncherConfig::new(Mode::Off, "runner-test-closed");
        config.cgroups = false;
        let sandboxes = AgentSandboxes::with_probe(config, agent_launcher::probe_host()).unwrap();
        sandboxes.thread(&ws, "a", "t").get().unwrap();
        sandboxes.close_everything();
        assert!(
            sandboxes.thread_tag("t").is_none(),
            "closed sandboxes are forgotten"
        );
        for late in [sandboxes.thread(&ws, "a", "u"), sandboxes.probe(&ws)] {
            let err = late.get().unwrap_err().to_string();
            assert!(err.contains("shutting down"), "{err}");
        }
        assert!(sandboxes.thread_tag("u").is_none());
    }

    /// The second signal's close exits the process when it returns: it
    /// must not return while the shutdown's close is still killing and
    /// removing cgroups.
    #[test]
    fn a_second_close_waits_for_the_first() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let mut config = LauncherConfig::new(Mode::Off, "runner-test-twice");
        config.cgroups = false;
        let sandboxes =
            Arc::new(AgentSandboxes::with_probe(config, agent_launcher::probe_host()).unwrap());
        // The first close, still at work.
        let first = sandboxes.closing.lock().unwrap();
        let returned = Arc::new(AtomicBool::new(false));
        let second = std::thread::spawn({
            let (sandboxes, returned) = (sandboxes.clone(), returned.clone());
            move || {
                sandboxes.close_everything();
                returned.store(true, Ordering::SeqCst);
            }
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            !returned.load(Ordering::SeqCst),
            "returned during the first close"
        );
        drop(first);
        second.join().unwrap();
        assert!(returned.load(Ordering::SeqCst));
    }

    fn probe_without_landlock() -> HostProbe {
        let mut probe = agent_launcher::probe_host();
        probe.landlock = Err("kernel built without Landlock (ENOSYS)".into());
        probe
    }

    #[test]
    fn enforce_without_landlock_refuses_every_thread_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspaces::new(dir.path().join("ws")).unwrap();
        ws.create_thread("a", "t").unwrap();
        let mut config = LauncherConfig::new(Mode::Enforce, "runner-test");
        config.cgroups = false;
        let sandboxes = AgentSandboxes::with_probe(config, probe_without_landlock()).unwrap();
        let refused = sandboxes.status().refused.clone().unwrap();
        assert!(refused.contains("Landlock"), "{refused}");
        let sandbox = sandboxes.thread(&ws, "a", "t");
        let err = sandbox.get().unwrap_err().to_string();
        assert!(err.contains("enforce") && err.contains("Landlock"), "{err}");
    }

    /// Through the thread task: a turn on a thread whose sandbox is refused
    /// gets a RequestError with the reason, and nothing runs.
    #[tokio::test]
    async fn enforce_without_landlock_refuses_turns_with_a_request_error() {
        use agent_runner_proto::runner::client_message::Payload;

        use crate::tasks::context::{Runtime, RuntimeParts};
        use crate::tasks::mail::{ThreadCmd, UserMessage};

        let dir = tempfile::tempdir().unwrap();
        let sdks = crate::tasks::sdks::Sdks::new(&["scripted".to_owned()]).unwrap();
        sdks.describe_all().await;
        let mut config = LauncherConfig::new(Mode::Enforce, "runner-test");
        config.cgroups = false;
        let sandboxes =
            Arc::new(AgentSandboxes::with_probe(config, probe_without_landlock()).unwrap());
        let rt = Runtime::new(RuntimeParts {
            sdks,
            store: crate::host::store::Store::open(&dir.path().join("state")).unwrap(),
            workspaces: Workspaces::new(dir.path().join("ws")).unwrap(),
            outbox: Arc::new(crate::delivery::outbox::Outbox::new(
                64,
                crate::util::redact::Redactor::new(),
            )),
            mailboxes: Arc::new(crate::tasks::mailboxes::Mailboxes::new(64)),
            max_turns: 4,
            skill_max_bytes: 1024,
            git_env: None,
            github: None,
            sandboxes,
        });
        let workspace = rt.workspaces.create_thread("a", "t").unwrap();
        let spec = sdk_adapter::ThreadSpec {
            agent_id: "a".into(),
            thread_id: "t".into(),
            workspace: workspace.clone(),
            model: "scripted-fast".into(),
            reasoning_level: None,
            sdk_thread_id: Some("s".into()),
            env: Vec::new(),
            sandbox: rt.thread_sandbox("a", "t"),
            instructions: None,
            mcp_servers: Default::default(),
        };
        crate::tasks::thread::start(&rt, "scripted".into(), spec, None);
        let _ = rt.mailboxes.send_thread(
            "a",
            "t",
            ThreadCmd::UserMessage(UserMessage {
                text: "run touch ran".into(),
                allow_steer: false,
                model: None,
                reasoning_level: None,
                rid: Some("m1".into()),
            }),
        );
        let msg = tokio::time::timeout(std::time::Duration::from_secs(30), rt.outbox.pop())
            .await
            .unwrap();
        assert_eq!(msg.request_id.as_deref(), Some("m1"));
        let Some(Payload::RequestError(e)) = msg.payload else {
            panic!("expected a RequestError, got {msg:?}");
        };
        assert!(
            e.error_message
                .starts_with("agent sandbox: sandbox mode enforce: Landlock is unavailable"),
            "{}",
            e.error_message
        );
        assert!(!workspace.join("ran").exists());
        assert_eq!(rt.running_turns(), 0);
    }

    #[test]
    fn best_effort_without_landlock_says_what_is_missing() {
        let mut config = LauncherConfig::new(Mode::BestEffort, "runner-test");
        config.cgroups = false;
        let sandboxes = AgentSandboxes::with_probe(config, probe_without_landlock()).unwrap();
        let status = sandboxes.status();
        assert_eq!(status.refused, None);
        assert!(
            status.missing.iter().any(|m| m.starts_with("Landlock:")),
            "{status:?}"
        );
        assert_eq!(feature_of(&status.missing[0]), "landlock");
        assert_eq!(
            feature_of(
                "cgroup controller pids not offered by /sys/fs/cgroup/x (cgroup.controllers)"
            ),
            "cgroup_pids"
        );
        assert_eq!(
            feature_of("capability bounding set drop: the runner lacks CAP_SETPCAP"),
            "capabilities"
        );
        let metrics = crate::observe::metrics::render(crate::observe::metrics::Scraped {
            outbox_depth: 0,
            delivery_unsettled: 0,
            child_processes: None,
        });
        assert!(
            metrics.contains("agent_runner_sandbox_missing{feature=\"landlock\"} 1"),
            "{metrics}"
        );
    }

    #[test]
    fn thread_dirs_are_private_and_the_sandbox_is_reused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspaces::new(dir.path().join("ws")).unwrap();
        ws.create_thread("a", "t").unwrap();
        let sandboxes = AgentSandboxes::unconfined("runner-test");
        let first = sandboxes.thread(&ws, "a", "t");
        let first = first.get().unwrap();
        let again = sandboxes.thread(&ws, "a", "t");
        assert_eq!(first.tag(), again.get().unwrap().tag());
        for d in [
            ws.thread_private("a", "t"),
            ws.thread_home("a", "t"),
            ws.thread_tmp("a", "t"),
        ] {
            let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", d.display());
        }
        assert_eq!(first.spec().home_dir, ws.thread_home("a", "t"));
    }

    #[test]
    fn scope_is_stable_per_state_dir() {
        let a = scope_for(Path::new("/var/lib/agent-runner/a"));
        assert_eq!(a, scope_for(Path::new("/var/lib/agent-runner/a")));
        assert_ne!(a, scope_for(Path::new("/var/lib/agent-runner/b")));
        assert_eq!(a.len(), "agent-runner-".len() + 12, "{a}");
    }
}
