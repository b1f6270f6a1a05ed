//! The launcher and a thread's sandbox: the runner builds one [`Launcher`]
//! at start and one [`ThreadSandbox`] per thread; spawn sites hand their
//! command to [`ThreadSandbox::spawn`] (tokio) or [`ThreadSandbox::apply`]
//! (std) and get back what was applied.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::caps::{CAP_SETGID, CAP_SETPCAP, CAP_SETUID};
use crate::cgroup::{CgroupLimits, CgroupRoot, ThreadCgroup, valid_name};
use crate::child_setup::ChildPlan;
use crate::env::EnvPolicy;
use crate::error::LaunchError;
use crate::grants::{ForLaunch, Grants, RulesetInputs};
use crate::landlock_rules::{LandlockRequest, build};
use crate::mode::Mode;
use crate::policy::{
    AgentUser, DEFAULT_SYSTEM_READ_ONLY, DEVICE_FILES, NetRules, ThreadSpec, check_protected,
    split_around_protected,
};
use crate::probe::{HostProbe, probe_host};
use crate::report::{Applied, LauncherStatus};
use crate::rlimits::Rlimits;
use crate::signal_scope::{ScopeGap, signal_scoping};
use crate::thread_cgroups::{CgroupRoots, ThreadCgroups};
use crate::tracking::{KillReport, Leftovers, find_leftovers_in, kill_tagged, new_tag, sweep_in};

/// How long kill passes wait for processes to go.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// The operator's sandbox configuration (flags), shared by every thread.
#[derive(Clone, Debug)]
pub struct LauncherConfig {
    /// `--sandbox`.
    pub mode: Mode,
    /// Names this runner's processes and cgroups (`[A-Za-z0-9_-]`, at most
    /// 64): a restarted runner with the same scope finds its leftovers.
    pub scope: String,
    /// System paths readable by agents (default: [`DEFAULT_SYSTEM_READ_ONLY`];
    /// missing ones are skipped).
    pub system_read_only: Vec<PathBuf>,
    /// Operator-listed read-only directories (SDK CLIs, toolchains).
    pub read_only: Vec<PathBuf>,
    /// Paths that must never be visible to agents (state dir, secret files,
    /// App key). A thread whose sandbox would expose one is refused.
    pub protected: Vec<PathBuf>,
    /// Directories that hold every thread's directories (the workspace
    /// root): a launch's grant for the program it starts never opens one,
    /// a directory holding one, or anything inside one that the thread's
    /// own rules do not open already (another thread's venv).
    pub shared: Vec<PathBuf>,
    /// The environment allowlist and extras.
    pub env: EnvPolicy,
    /// Per-process rlimits.
    pub rlimits: Rlimits,
    /// Put each thread in cgroups where the host allows: a delegated
    /// cgroup v2 subtree, and the v1 `pids` hierarchy where v2 offers no
    /// `pids` controller or no subtree. Off: no cgroup, tag tracking only.
    pub cgroups: bool,
    /// The cgroup v2 directory to create thread cgroups under (default: the
    /// runner's own cgroup).
    pub cgroup_parent: Option<PathBuf>,
    /// Per-thread cgroup limits (default: `pids.max` only,
    /// [`crate::DEFAULT_PIDS_MAX`]).
    pub cgroup_limits: CgroupLimits,
    /// Run agent processes as this uid/gid (`--agent-uid`).
    pub agent_user: Option<AgentUser>,
    /// TCP ports agents may bind/connect to; `None`: TCP unrestricted.
    pub net: Option<NetRules>,
    /// Scope signals and abstract unix sockets to each launch's domain.
    pub scope_ipc: bool,
}

impl LauncherConfig {
    /// Defaults for `mode` and `scope`.
    pub fn new(mode: Mode, scope: impl Into<String>) -> Self {
        LauncherConfig {
            mode,
            scope: scope.into(),
            system_read_only: DEFAULT_SYSTEM_READ_ONLY.iter().map(PathBuf::from).collect(),
            read_only: Vec::new(),
            protected: Vec::new(),
            shared: Vec::new(),
            env: EnvPolicy::default(),
            rlimits: Rlimits::default(),
            cgroups: true,
            cgroup_parent: None,
            cgroup_limits: CgroupLimits::default(),
            agent_user: None,
            net: None,
            scope_ipc: true,
        }
    }
}

/// The launcher: host facts plus the operator's configuration.
#[derive(Debug)]
pub struct Launcher {
    config: Arc<LauncherConfig>,
    probe: HostProbe,
    cgroups: CgroupRoots,
    missing: Vec<String>,
}

fn unavailable_or_note(
    mode: Mode,
    missing: &mut Vec<String>,
    what: &'static str,
    why: String,
) -> Result<(), LaunchError> {
    if mode == Mode::Enforce {
        return Err(LaunchError::Unavailable { what, why });
    }
    missing.push(format!("{what}: {why}"));
    Ok(())
}

impl Launcher {
    /// Probes the host and prepares the launcher. Mode `enforce` fails here
    /// when Landlock is unavailable, when it cannot scope signals (ABI < 6)
    /// and agents would run as the runner's uid (no `agent_user`), when,
    /// for a root runner, capabilities cannot be dropped, or when no cgroup
    /// can hold a thread's processes (with `cgroups` on).
    pub fn new(config: LauncherConfig) -> Result<Self, LaunchError> {
        Self::with_probe(config, probe_host())
    }

    /// As [`Launcher::new`] with a given probe.
    pub fn with_probe(config: LauncherConfig, probe: HostProbe) -> Result<Self, LaunchError> {
        if !(config.scope.len() <= 64 && valid_name(&config.scope) && !config.scope.contains('.')) {
            return Err(LaunchError::Policy(format!(
                "scope {:?}: use 1-64 of [A-Za-z0-9_-]",
                config.scope
            )));
        }
        config.env.validate()?;
        let mode = config.mode;
        let mut missing = Vec::new();
        if mode != Mode::Off {
            if let Err(why) = &probe.landlock {
                unavailable_or_note(mode, &mut missing, "Landlock", why.clone())?;
            }
            if probe.privileged() && !probe.capabilities.has_effective(CAP_SETPCAP) {
                unavailable_or_note(
                    mode,
                    &mut missing,
                    "capability bounding set drop",
                    "the runner lacks CAP_SETPCAP".to_string(),
                )?;
            }
            if config.agent_user.is_some()
                && !(probe.capabilities.has_effective(CAP_SETUID)
                    && probe.capabilities.has_effective(CAP_SETGID))
            {
                return Err(LaunchError::Policy(
                    "--agent-uid needs a runner with CAP_SETUID and CAP_SETGID (root)".to_string(),
                ));
            }
            if let (Some(_), Some(abi)) = (&config.net, probe.landlock_abi())
                && abi < crate::landlock_rules::ABI_NET
            {
                unavailable_or_note(
                    mode,
                    &mut missing,
                    "TCP rules",
                    format!("kernel Landlock ABI {abi} < 4"),
                )?;
            }
            match signal_scoping(
                mode,
                probe.landlock_abi(),
                config.scope_ipc,
                config.agent_user,
            ) {
                ScopeGap::None => {}
                ScopeGap::Note(line) => missing.push(line),
                ScopeGap::Refuse(why) => {
                    return Err(LaunchError::Unavailable {
                        what: "signal scoping",
                        why,
                    });
                }
            }
        }
        let cgroups = CgroupRoots::setup(&config, &probe, &mut missing)?;
        Ok(Launcher {
            config: Arc::new(config),
            probe,
            cgroups,
            missing,
        })
    }

    /// The host probe.
    pub fn probe(&self) -> &HostProbe {
        &self.probe
    }

    /// The configuration.
    pub fn config(&self) -> &LauncherConfig {
        &self.config
    }

    /// The cgroup v2 subtree the launcher uses, if any.
    pub fn cgroup_root(&self) -> Option<&CgroupRoot> {
        self.cgroups.v2.as_ref()
    }

    /// The launcher's root in the cgroup v1 `pids` hierarchy, if it uses
    /// one.
    pub fn pids_root(&self) -> Option<&CgroupRoot> {
        self.cgroups.pids_v1.as_ref()
    }

    /// Mode, host facts and what will not be applied, for status/doctor.
    pub fn status(&self) -> LauncherStatus {
        LauncherStatus {
            mode: self.config.mode,
            host: self.probe.summary(),
            missing: self.missing.clone(),
        }
    }

    /// Processes and cgroups a previous run with this scope left behind.
    pub fn find_leftovers(&self) -> Leftovers {
        find_leftovers_in(&self.config.scope, &self.cgroups.roots())
    }

    /// Kills what a previous run left behind. Call before creating threads.
    pub fn sweep_leftovers(&self) -> KillReport {
        sweep_in(&self.config.scope, &self.cgroups.roots(), KILL_WAIT)
    }

    /// Removes the launcher's cgroup subtrees when no thread cgroup is
    /// left in them (clean shutdown, after every thread was closed); a
    /// subtree still holding threads stays for the next start's sweep.
    pub fn release(&self) {
        for root in self.cgroups.roots() {
            match std::fs::remove_dir(root.dir()) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::debug!(cgroup = %root.dir().display(), error = %e, "launcher cgroup kept")
                }
            }
        }
    }

    /// Prepares the sandbox of one thread: creates its TMPDIR and HOME,
    /// its cgroup, and its Landlock ruleset.
    pub fn thread(&self, spec: ThreadSpec) -> Result<ThreadSandbox, LaunchError> {
        let config = &self.config;
        let mode = config.mode;
        let isolate = mode != Mode::Off;
        let user = if isolate { config.agent_user } else { None };
        let mut missing = self.missing.clone();

        if !spec.workspace.is_dir() {
            return Err(LaunchError::Policy(format!(
                "workspace {} is not a directory",
                spec.workspace.display()
            )));
        }
        for dir in [&spec.tmp_dir, &spec.home_dir] {
            private_dir(dir, user)?;
        }
        if let Some(u) = user {
            use std::os::unix::fs::MetadataExt;
            let owner = std::fs::metadata(&spec.workspace).map(|m| m.uid()).ok();
            if owner != Some(u.uid) {
                missing.push(format!(
                    "workspace {} is not owned by agent uid {}: writes may fail",
                    spec.workspace.display(),
                    u.uid
                ));
            }
        }
        let read_write: Vec<PathBuf> = [&spec.workspace, &spec.tmp_dir, &spec.home_dir]
            .into_iter()
            .chain(&spec.read_write)
            .cloned()
            .collect();
        // System paths are split around protected ones (a secret under
        // `/etc` hides that file, not all of `/etc`); the operator's and the
        // thread's own directories are not, and must not contain one.
        let read_only: Vec<(PathBuf, bool)> = config
            .system_read_only
            .iter()
            .flat_map(|p| split_around_protected(p, &config.protected))
            .map(|p| (p, true))
            .chain(config.read_only.iter().map(|p| (p.clone(), false)))
            .chain(spec.skills.iter().map(|p| (p.clone(), false)))
            .chain(spec.read_only.iter().map(|p| (p.clone(), false)))
            .collect();
        if isolate {
            let visible: Vec<PathBuf> = read_write
                .iter()
                .cloned()
                .chain(read_only.iter().map(|(p, _)| p.clone()))
                .collect();
            check_protected(&visible, &config.protected)?;
        }

        let tag = new_tag(&config.scope);
        let cgroups = self.cgroups.thread(&tag, mode, &mut missing)?;

        let landlock = match (isolate, self.probe.landlock_abi()) {
            (true, Some(abi)) => {
                let req = LandlockRequest {
                    abi,
                    read_write: &read_write,
                    read_only: &read_only,
                    devices: DEVICE_FILES,
                    net: config.net.as_ref(),
                    scope: config.scope_ipc,
                };
                match build(&req, &mut missing) {
                    Ok(plan) => Some(plan),
                    Err(e) if mode == Mode::Enforce => return Err(e),
                    Err(e) => {
                        missing.push(format!("Landlock: {e}"));
                        None
                    }
                }
            }
            _ => None,
        };
        let grants = landlock.as_ref().map(|l| {
            Grants::new(
                RulesetInputs {
                    abi: l.abi,
                    read_write: read_write.clone(),
                    read_only: read_only.clone(),
                    net: config.net.clone(),
                    scope: config.scope_ipc,
                },
                &config.protected,
                &config.shared,
            )
        });

        let privileged = isolate && self.probe.privileged();
        let can_setpcap = self.probe.capabilities.has_effective(CAP_SETPCAP);
        let (rlimits, notes) = config.rlimits.plan(user.is_some());
        missing.extend(notes);
        let plan = ChildPlan {
            setsid: true,
            cgroup_procs: cgroups.v2.as_ref().map(|c| c.procs_path().clone()),
            pids_v1_procs: cgroups.pids_v1.as_ref().map(|c| c.procs_path().clone()),
            rlimits: rlimits.iter().map(|(r, _, v)| (*r, *v)).collect(),
            drop_bounding_upto: (privileged && can_setpcap).then_some(self.probe.cap_last_cap),
            lock_securebits: privileged && can_setpcap,
            clear_capabilities: privileged,
            user: user.map(|u| (u.uid, u.gid)),
            no_new_privs: isolate,
            landlock: landlock.as_ref().map(|l| l.fd.clone()),
        };
        let applied = Applied {
            mode,
            landlock_abi: landlock.as_ref().map(|l| l.abi),
            scoped: landlock.as_ref().is_some_and(|l| l.scoped),
            net_restricted: landlock.as_ref().is_some_and(|l| l.net),
            no_new_privs: isolate,
            capabilities_dropped: privileged && can_setpcap,
            run_as: user,
            rlimits: rlimits.iter().map(|(_, n, v)| (*n, *v)).collect(),
            cgroup: cgroups.v2.as_ref().map(|c| c.dir().to_path_buf()),
            pids_cgroup: cgroups.pids_v1.as_ref().map(|c| c.dir().to_path_buf()),
            cgroup_limits: cgroups.limits.clone(),
            env: Vec::new(),
            granted: Vec::new(),
            missing,
        };
        tracing::debug!(%applied, "thread sandbox prepared");
        Ok(ThreadSandbox {
            config: self.config.clone(),
            spec,
            tag,
            cgroups,
            plan: Arc::new(plan),
            grants,
            applied,
        })
    }
}

/// Creates `dir` (0700) if needed and hands it to the agent user.
fn private_dir(dir: &Path, user: Option<AgentUser>) -> Result<(), LaunchError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| LaunchError::io(format!("create {}", dir.display()), e))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| LaunchError::io(format!("chmod {}", dir.display()), e))?;
    if let Some(u) = user {
        std::os::unix::fs::chown(dir, Some(u.uid), Some(u.gid))
            .map_err(|e| LaunchError::io(format!("chown {}", dir.display()), e))?;
    }
    Ok(())
}

/// One thread's sandbox: every process of the thread is launched through it.
#[derive(Debug)]
pub struct ThreadSandbox {
    config: Arc<LauncherConfig>,
    spec: ThreadSpec,
    tag: String,
    cgroups: ThreadCgroups,
    plan: Arc<ChildPlan>,
    /// Per-launch grants of a program's installation (with Landlock).
    grants: Option<Grants>,
    applied: Applied,
}

impl ThreadSandbox {
    /// The thread's directories.
    pub fn spec(&self) -> &ThreadSpec {
        &self.spec
    }

    /// The thread's tag (value of [`crate::TAG_VAR`] in its processes).
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The thread's cgroup v2, if it has one.
    pub fn cgroup(&self) -> Option<&ThreadCgroup> {
        self.cgroups.v2.as_ref()
    }

    /// The thread's cgroup in the v1 `pids` hierarchy, if it has one.
    pub fn pids_cgroup(&self) -> Option<&ThreadCgroup> {
        self.cgroups.pids_v1.as_ref()
    }

    /// What every launch of this thread gets (without environment names).
    pub fn applied(&self) -> &Applied {
        &self.applied
    }

    /// Turns `cmd` into a sandboxed command: replaces its environment (the
    /// variables the spawn site set are kept, the runner's are not), sets
    /// the working directory to the workspace when none is set, opens the
    /// program's installation when the thread's rules do not cover it
    /// (`Applied::granted`), and installs the pre-exec steps. Spawn it
    /// right after; a failing step fails the spawn.
    pub fn apply(&self, cmd: &mut std::process::Command) -> Result<Applied, LaunchError> {
        self.apply_for(cmd).map(|(applied, _)| applied)
    }

    fn apply_for(
        &self,
        cmd: &mut std::process::Command,
    ) -> Result<(Applied, ForLaunch), LaunchError> {
        let caller: Vec<(OsString, Option<OsString>)> = cmd
            .get_envs()
            .map(|(k, v)| (k.to_os_string(), v.map(|v| v.to_os_string())))
            .collect();
        let env = self.build_env(&caller);
        cmd.env_clear();
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        if cmd.get_current_dir().is_none() {
            cmd.current_dir(&self.spec.workspace);
        }
        let cwd = cmd
            .get_current_dir()
            .unwrap_or(&self.spec.workspace)
            .to_path_buf();
        let program = PathBuf::from(cmd.get_program());
        let launch = self.for_launch(&program, &env, &cwd);
        let plan = self.plan_for(&launch);
        // SAFETY: the closure only runs ChildPlan::run, which makes raw
        // system calls on data prepared here and allocates nothing.
        unsafe {
            cmd.pre_exec(move || plan.run(true));
        }
        let mut applied = self.applied.clone();
        applied.env = env
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        applied.granted = launch.granted.clone();
        Ok((applied, launch))
    }

    /// What a launch of `program` with the child's environment `env` gets.
    pub(crate) fn for_launch(
        &self,
        program: &Path,
        env: &[(OsString, OsString)],
        cwd: &Path,
    ) -> ForLaunch {
        let Some(grants) = &self.grants else {
            return ForLaunch::default();
        };
        let path_var = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_os_str());
        grants.for_launch(program, path_var, cwd)
    }

    /// The thread's pre-exec steps with the launch's ruleset.
    pub(crate) fn plan_for(&self, launch: &ForLaunch) -> Arc<ChildPlan> {
        match &launch.ruleset {
            Some(fd) => Arc::new(ChildPlan {
                landlock: Some(fd.clone()),
                ..(*self.plan).clone()
            }),
            None => self.plan.clone(),
        }
    }

    /// The error of a failed spawn: a refused exec names what the sandbox
    /// does not open and the setting that does.
    pub(crate) fn spawn_error(
        &self,
        program: &str,
        launch: &ForLaunch,
        e: std::io::Error,
    ) -> LaunchError {
        match &self.grants {
            Some(grants) => grants.spawn_error(program, launch, e),
            None => LaunchError::io(format!("spawn {program}"), e),
        }
    }

    /// The child's whole environment: the policy's allowlist and extras,
    /// then what the spawn site set (`None`: removed).
    fn build_env(&self, caller: &[(OsString, Option<OsString>)]) -> Vec<(OsString, OsString)> {
        self.config.env.build(
            |name| std::env::var_os(name),
            caller,
            self.spec.home_dir.as_os_str(),
            self.spec.tmp_dir.as_os_str(),
            &self.tag,
        )
    }

    /// [`Self::build_env`] for a [`crate::Launch`]'s variables.
    pub(crate) fn child_env(&self, caller: &[(OsString, OsString)]) -> Vec<(OsString, OsString)> {
        let caller: Vec<(OsString, Option<OsString>)> = caller
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect();
        self.build_env(&caller)
    }

    /// Applies the sandbox to a tokio command and spawns it.
    pub fn spawn(
        &self,
        cmd: &mut tokio::process::Command,
    ) -> Result<(tokio::process::Child, Applied), LaunchError> {
        let (applied, launch) = self.apply_for(cmd.as_std_mut())?;
        let program = cmd.as_std().get_program().to_string_lossy().into_owned();
        let child = cmd
            .spawn()
            .map_err(|e| self.spawn_error(&program, &launch, e))?;
        Ok((child, applied))
    }

    /// Kills every process of the thread: the whole of its cgroups (v2,
    /// v1 `pids`) when it has them, and every process carrying the
    /// thread's tag (those that left the process group included). The
    /// thread stays usable.
    pub fn kill_all(&self) -> KillReport {
        let (killed_in_cgroups, survivors) = self.cgroups.kill(KILL_WAIT);
        let mut report = kill_tagged(&self.tag, KILL_WAIT);
        report.killed += killed_in_cgroups;
        report.survivors.extend(survivors);
        report.cgroups = self.cgroups.dirs();
        report
    }

    /// Kills every process of the thread and removes its cgroups (thread
    /// deletion, shutdown). Takes `&self` so a sandbox shared by `Arc` (the
    /// runner's thread and its adapter) can be closed by its owner. A launch
    /// after `close` fails when the thread had a cgroup (it is gone).
    pub fn close(&self) -> KillReport {
        let report = self.kill_all();
        self.cgroups.remove();
        report
    }
}
