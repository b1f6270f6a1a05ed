//! Settings of the agent sandbox: the mode, the uid agents run
//! as, what they may read besides the system, which more of the runner's
//! environment they get, and per-thread limits. Flag > env > file, each
//! error naming its key.

use agent_launcher::{AgentUser, CgroupLimits, Mode, Rlimits};

use super::layer::settings;
use super::*;

settings! {
    /// Flags of the agent sandbox (each also an env var).
    #[derive(Debug, Clone, Default, Args)]
    pub struct SandboxArgs {
        /// How agent processes are confined: `enforce` (refuse turns where
        /// Landlock is unavailable, or cannot scope signals without
        /// `--agent-uid`), `best-effort` (apply what the host offers, report
        /// the rest) or `off` (docs/security.md). Default: `best-effort`.
        #[arg(
            long,
            env = "AGENT_RUNNER_SANDBOX",
            value_name = "MODE",
            help_heading = "Agent sandbox",
        )]
        pub sandbox: Option<String>,
        /// Run agent processes as this user: `UID[:GID]` (not 0; the runner
        /// must be root). Default: none: agents keep the runner's uid, without
        /// capabilities.
        #[arg(
            long,
            env = "AGENT_RUNNER_AGENT_UID",
            value_name = "UID[:GID]",
            help_heading = "Agent sandbox",
        )]
        pub agent_uid: Option<String>,
        /// One more absolute directory agents may read and execute (a toolchain
        /// their commands use; system directories, this binary, the
        /// directories of --codex-bin and --claude-bin are readable anyway, and
        /// a program the runner starts gets its own installation, its
        /// node_modules, venv and interpreter, opened for it); repeatable,
        /// comma-separated in the variable. Default: none.
        #[arg(
            long = "sandbox-read-only",
            env = "AGENT_RUNNER_SANDBOX_READ_ONLY",
            value_name = "DIR",
            value_delimiter = ',',
            help_heading = "Agent sandbox",
        )]
        pub sandbox_read_only: Vec<PathBuf>,
        /// One more absolute file or directory agents must never read, on top
        /// of every secret the settings name (the config file, the secret
        /// file, the GitHub App key, the state dirs…): e.g. the systemd
        /// `EnvironmentFile` the runner's variables come from; repeatable,
        /// comma-separated in the variable. Default: none.
        #[arg(
            long = "sandbox-protect",
            env = "AGENT_RUNNER_SANDBOX_PROTECT",
            value_name = "PATH",
            value_delimiter = ',',
            help_heading = "Agent sandbox",
        )]
        pub sandbox_protect: Vec<PathBuf>,
        /// The name of one more variable of the runner's environment agents get
        /// (besides PATH, LANG, LC_*, TERM, TZ, the proxy variables and what each
        /// SDK needs); names that look like secrets are refused; repeatable,
        /// comma-separated in the variable. Default: none.
        #[arg(
            long = "sandbox-env",
            env = "AGENT_RUNNER_SANDBOX_ENV",
            value_name = "NAME",
            value_delimiter = ',',
            help_heading = "Agent sandbox",
        )]
        pub sandbox_env: Vec<String>,
        /// Open files per agent process (RLIMIT_NOFILE): enough for a language
        /// server watching a large repository. Default: `4096`.
        #[arg(
            long,
            env = "AGENT_RUNNER_SANDBOX_NOFILE",
            value_name = "N",
            help_heading = "Agent sandbox",
        )]
        pub sandbox_nofile: Option<u64>,
        /// The largest file an agent process may write, in bytes
        /// (RLIMIT_FSIZE): `fallocate -l 40G` or a runaway write stops there
        /// with EFBIG instead of filling the host's disk, and no agent's work
        /// needs one file that large (it bounds each file, not their sum);
        /// `0`: no limit of the sandbox's own. Default: `17179869184` (16 GiB).
        #[arg(
            long,
            env = "AGENT_RUNNER_SANDBOX_FSIZE",
            value_name = "BYTES",
            help_heading = "Agent sandbox",
        )]
        pub sandbox_fsize: Option<u64>,
        /// Memory of one thread's processes together, in bytes (cgroup
        /// `memory.max`; needs a delegated cgroup v2); `0`: unlimited.
        /// Default: unlimited.
        #[arg(
            long,
            env = "AGENT_RUNNER_SANDBOX_MEMORY_MAX",
            value_name = "BYTES",
            help_heading = "Agent sandbox",
        )]
        pub sandbox_memory_max: Option<u64>,
        /// Processes of one thread at once, their threads counted (cgroup
        /// `pids.max`, in a delegated cgroup v2 or, where that has no pids
        /// controller, the cgroup v1 pids hierarchy when the runner may
        /// create cgroups there, as root): a fork bomb stops at it while the
        /// runner and other threads go on; a parallel build on a many-core
        /// host may need more; `0`: unlimited. Default: `1024`.
        #[arg(
            long,
            env = "AGENT_RUNNER_SANDBOX_PIDS_MAX",
            value_name = "N",
            help_heading = "Agent sandbox",
        )]
        pub sandbox_pids_max: Option<u64>,
        /// CPU of one thread: `QUOTA_US PERIOD_US` (cgroup `cpu.max`, e.g.
        /// `50000 100000` for half a core; needs a delegated cgroup v2).
        /// Default: unlimited.
        #[arg(
            long,
            env = "AGENT_RUNNER_SANDBOX_CPU_MAX",
            value_name = "QUOTA PERIOD",
            help_heading = "Agent sandbox",
        )]
        pub sandbox_cpu_max: Option<String>,
    }
}

/// The sandbox settings, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxConfig {
    /// `--sandbox`.
    pub mode: Mode,
    /// `--agent-uid`.
    pub agent_user: Option<AgentUser>,
    /// `--sandbox-read-only`.
    pub read_only: Vec<PathBuf>,
    /// `--sandbox-env`: more names inherited from the runner.
    pub env: Vec<String>,
    /// Per-process limits.
    pub rlimits: Rlimits,
    /// Per-thread cgroup limits.
    pub cgroup_limits: CgroupLimits,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            mode: Mode::BestEffort,
            agent_user: None,
            read_only: Vec::new(),
            env: Vec::new(),
            rlimits: Rlimits::default(),
            cgroup_limits: CgroupLimits::default(),
        }
    }
}

impl SandboxArgs {
    /// Checked settings (defaults for what is not given).
    pub(super) fn resolve(self) -> Result<SandboxConfig, ConfigError> {
        let mut config = SandboxConfig::default();
        if let Some(mode) = self.sandbox {
            config.mode = mode
                .trim()
                .parse()
                .map_err(|e| key_err("sandbox", format!("{e}")))?;
        }
        if let Some(uid) = self.agent_uid {
            config.agent_user = Some(
                uid.trim()
                    .parse()
                    .map_err(|e| key_err("agent_uid", format!("{e}")))?,
            );
        }
        for dir in &self.sandbox_read_only {
            if !dir.is_absolute() {
                return Err(key_err(
                    "sandbox_read_only",
                    format!("{} is not an absolute path", dir.display()),
                ));
            }
        }
        config.read_only = self.sandbox_read_only;
        // Taken by `files` (the hidden paths); only checked here.
        if let Some(path) = self.sandbox_protect.iter().find(|p| !p.is_absolute()) {
            return Err(key_err(
                "sandbox_protect",
                format!("{} is not an absolute path", path.display()),
            ));
        }
        let env: Vec<String> = self
            .sandbox_env
            .into_iter()
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .collect();
        let policy = agent_launcher::EnvPolicy {
            inherit: env.clone(),
            set: Vec::new(),
        };
        policy
            .validate()
            .map_err(|e| key_err("sandbox_env", e.to_string()))?;
        config.env = env;
        if let Some(n) = self.sandbox_nofile {
            if n == 0 {
                return Err(key_err("sandbox_nofile", "must be at least 1"));
            }
            config.rlimits.nofile = Some(n);
        }
        // Given: `0` lifts the limit; not given: the launcher's default.
        let limit = |given: Option<u64>, default: Option<u64>| match given {
            Some(0) => None,
            Some(n) => Some(n),
            None => default,
        };
        config.rlimits.fsize = limit(self.sandbox_fsize, config.rlimits.fsize);
        config.cgroup_limits.memory_max =
            limit(self.sandbox_memory_max, config.cgroup_limits.memory_max);
        config.cgroup_limits.pids_max = limit(self.sandbox_pids_max, config.cgroup_limits.pids_max);
        if let Some(text) = self.sandbox_cpu_max {
            config.cgroup_limits.cpu_max = Some(parse_cpu_max(&text)?);
        }
        Ok(config)
    }
}

fn parse_cpu_max(text: &str) -> Result<(u64, u64), ConfigError> {
    let bad = || {
        key_err(
            "sandbox_cpu_max",
            format!("{text:?} is not `QUOTA_US PERIOD_US` (e.g. `50000 100000`)"),
        )
    };
    let mut words = text.split_whitespace();
    let (Some(q), Some(p), None) = (words.next(), words.next(), words.next()) else {
        return Err(bad());
    };
    let (q, p): (u64, u64) = (q.parse().map_err(|_| bad())?, p.parse().map_err(|_| bad())?);
    if q == 0 || p == 0 {
        return Err(bad());
    }
    Ok((q, p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_values() {
        let c = SandboxArgs::default().resolve().unwrap();
        assert_eq!(c, SandboxConfig::default());
        assert_eq!(c.mode, Mode::BestEffort);
        let c = SandboxArgs {
            sandbox: Some("enforce".into()),
            agent_uid: Some("65534:65534".into()),
            sandbox_read_only: vec!["/opt/node".into()],
            sandbox_env: vec!["GOPATH".into()],
            sandbox_nofile: Some(100),
            sandbox_pids_max: Some(64),
            sandbox_cpu_max: Some("50000 100000".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(c.mode, Mode::Enforce);
        assert_eq!(c.agent_user.map(|u| u.uid), Some(65534));
        assert_eq!(c.rlimits.nofile, Some(100));
        assert_eq!(c.cgroup_limits.pids_max, Some(64));
        assert_eq!(c.cgroup_limits.cpu_max, Some((50000, 100000)));
    }

    /// A thread's processes, and the size of a file, are bounded unless
    /// said otherwise; `0` lifts either bound.
    #[test]
    fn limits_have_defaults_and_zero_lifts_them() {
        let c = SandboxArgs::default().resolve().unwrap();
        assert_eq!(c.rlimits.nofile, Some(agent_launcher::DEFAULT_NOFILE));
        assert_eq!(c.rlimits.fsize, Some(16 << 30));
        assert_eq!(c.cgroup_limits.pids_max, Some(1024));
        assert_eq!(c.cgroup_limits.memory_max, None);
        let c = SandboxArgs {
            sandbox_fsize: Some(0),
            sandbox_pids_max: Some(0),
            sandbox_memory_max: Some(0),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(c.rlimits.fsize, None);
        assert_eq!(c.cgroup_limits.pids_max, None);
        assert_eq!(c.cgroup_limits.memory_max, None);
        let c = SandboxArgs {
            sandbox_fsize: Some(1 << 20),
            sandbox_memory_max: Some(1 << 30),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(c.rlimits.fsize, Some(1 << 20));
        assert_eq!(c.cgroup_limits.memory_max, Some(1 << 30));
    }

    #[test]
    fn flag_beats_file_and_file_keys_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(
            &file,
            "sandbox = \"off\"\nsandbox_read_only = [\"/opt/tools\"]\nsandbox_pids_max = 9\nagent_uid = \"nope\"\n",
        )
        .unwrap();
        let resolve = |sandbox: SandboxArgs| {
            RunConfig::resolve(
                RunArgs {
                    control_plane_url: Some("http://x:1".into()),
                    config: Some(file.clone()),
                    sandbox,
                    ..Default::default()
                },
                None,
            )
        };
        // The file's bad agent_uid is reported by its key.
        let err = resolve(SandboxArgs::default()).unwrap_err().to_string();
        assert!(err.starts_with("agent_uid:"), "{err}");
        let c = resolve(SandboxArgs {
            sandbox: Some("enforce".into()),
            agent_uid: Some("1000".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(c.sandbox.mode, Mode::Enforce);
        assert_eq!(c.sandbox.read_only, vec![PathBuf::from("/opt/tools")]);
        assert_eq!(c.sandbox.cgroup_limits.pids_max, Some(9));
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (
                SandboxArgs {
                    sandbox: Some("strict".into()),
                    ..Default::default()
                },
                "sandbox:",
            ),
            (
                SandboxArgs {
                    agent_uid: Some("0".into()),
                    ..Default::default()
                },
                "agent_uid:",
            ),
            (
                SandboxArgs {
                    sandbox_read_only: vec!["relative".into()],
                    ..Default::default()
                },
                "sandbox_read_only:",
            ),
            (
                SandboxArgs {
                    sandbox_protect: vec!["relative".into()],
                    ..Default::default()
                },
                "sandbox_protect:",
            ),
            (
                SandboxArgs {
                    sandbox_env: vec!["OPENAI_API_KEY".into()],
                    ..Default::default()
                },
                "sandbox_env:",
            ),
            (
                SandboxArgs {
                    sandbox_cpu_max: Some("half".into()),
                    ..Default::default()
                },
                "sandbox_cpu_max:",
            ),
            (
                SandboxArgs {
                    sandbox_nofile: Some(0),
                    ..Default::default()
                },
                "sandbox_nofile:",
            ),
        ];
        for (args, key) in cases {
            let err = args.resolve().unwrap_err().to_string();
            assert!(err.starts_with(key), "{err}");
        }
    }
}
