//! The runner's side of the one launcher: the [`Launcher`] built
//! once at start from the sandbox settings, each thread's
//! [`ThreadSandbox`] (made when the thread is created or re-opened, closed
//! when it is deleted), and the kill paths that reach every process of a
//! thread — interrupt, delete, shutdown — including those that left their
//! process group (`setsid`).
//!
//! What agents may never see is derived once ([`protected_paths`]): every
//! file-valued setting marked hidden (`config::files`), the state dirs, the
//! operator's Claude Code config dir and systemd's credentials directory.
//!
//! In mode `enforce` on a host without Landlock the launcher cannot be
//! built; the runner still starts, and every thread's sandbox carries the
//! reason, so turns are refused with it (a `RequestError`) instead of
//! running unconfined.
//!
//! The parts: this file builds the launcher and says what it could apply;
//! [`access`] is what agents may see and run; [`threads`] hands out each
//! thread's sandbox; [`kill`] is the sweep of leftovers and every kill.

mod access;
mod kill;
mod threads;

pub use access::protected_paths;
pub use kill::sweep_state_dir;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agent_launcher::{EnvPolicy, HostProbe, Launcher, LauncherConfig, Mode, ThreadSandbox};
use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::config::{RunConfig, SandboxConfig};
use crate::util::proxy::agents::AgentProxy;

use access::{runner_programs, sdk_homes};

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
    /// The forwarders agents reach the operator's proxy through; they stop
    /// with the runner.
    agent_proxy: AgentProxy,
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
        launcher_config.shared = vec![config.workspace_root.clone()];
        // The runner's proxy reaches agents' git and CLIs as HTTPS_PROXY &
        // co., never with its credentials (a forwarder adds them).
        let agent_proxy =
            AgentProxy::start(&config.proxy, config.sandbox.agent_user.map(|u| u.uid))
                .context("starting the agents' proxy")?;
        let not_inherited = agent_proxy.not_inherited();
        launcher_config
            .env
            .inherit
            .retain(|n| !not_inherited.contains(n));
        launcher_config.env.set.extend(agent_proxy.env().to_vec());
        if let Some(net) = &mut launcher_config.net {
            net.connect.extend(agent_proxy.ports());
        }
        let mut me = Self::with_probe(launcher_config, agent_launcher::probe_host())?;
        me.agent_proxy = agent_proxy;
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
            agent_proxy: AgentProxy::default(),
        }
    }

    /// The mode and what the host offers and lacks.
    pub fn status(&self) -> &SandboxStatus {
        &self.status
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

#[cfg(test)]
mod tests;
