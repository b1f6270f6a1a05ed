//! `RunConfig`: every setting `run` needs, merged from flags/env, the file
//! and defaults (flag > env > file > default), each error naming its key
//! and where its value came from.

use super::layer::Layer as _;
use super::*;

/// Everything `run` needs, resolved.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Where the control plane is.
    pub control_plane: ControlPlaneUrl,
    /// An extra CA certificate (PEM) for TLS.
    pub ca_cert_pem: Option<Vec<u8>>,
    /// The bearer secret, if any.
    pub secret: Option<Secret>,
    /// Durable state lives here.
    pub state_dir: PathBuf,
    /// Agent homes and thread workspaces live here.
    pub workspace_root: PathBuf,
    /// Empty means every built-in SDK.
    pub sdks: Vec<String>,
    /// Turns allowed at once.
    pub max_concurrent_turns: usize,
    /// Requests allowed to wait at once, runner-wide.
    pub max_queued_requests: usize,
    /// How long running turns may go on after SIGTERM.
    pub drain_timeout: Duration,
    /// Updates kept while disconnected.
    pub outbox_capacity: usize,
    /// HTTP/2 keepalive ping interval.
    pub keepalive_interval: Duration,
    /// How long a ping may go unanswered.
    pub keepalive_timeout: Duration,
    /// First reconnect delay.
    pub reconnect_min_delay: Duration,
    /// Longest reconnect delay.
    pub reconnect_max_delay: Duration,
    /// Largest skill package accepted.
    pub skill_max_bytes: u64,
    /// Where skill packages may come from; the skill cache's bound.
    pub skills: SkillConfig,
    /// How often SDKs are probed for changes (zero: never).
    pub sdk_probe_interval: Duration,
    /// How log lines are written.
    pub log_format: LogFormat,
    /// The tracing filter (e.g. `info`).
    pub log_level: String,
    /// `None`: health endpoints off.
    pub health: Option<HealthListen>,
    /// Settings of the adapters that drive external CLIs.
    pub sdk_options: crate::config::SdkOptions,
    /// Where GitHub installation tokens come from.
    pub github: GithubConfig,
    /// The file the bearer secret was read from (hidden from agents).
    pub secret_file: Option<PathBuf>,
    /// The GitHub App's private key file, if any (hidden from agents).
    pub github_app_key_file: Option<PathBuf>,
    /// Every path a file setting marked hidden names (`files`: the config
    /// file, the secret file, the App key, …): the sandbox hides them.
    pub hidden_files: Vec<PathBuf>,
    /// The agent sandbox.
    pub sandbox: SandboxConfig,
    /// The outbound HTTP proxy (`--proxy`, else HTTPS_PROXY/HTTP_PROXY/NO_PROXY).
    pub proxy: crate::util::proxy::ProxyConfig,
    /// `--exit-when-idle`: drain and exit after this long idle (`None`: never).
    pub exit_when_idle: Option<Duration>,
    /// The protocol version spoken to the control plane.
    pub protocol: Protocol,
    /// With protocol 0.7: the control plane's agent API (`AGENT_API_URL`).
    pub agent_api_url: Option<String>,
    /// How long an approval request waits for the control plane.
    pub approval_timeout: Duration,
    /// What the runner answers itself without `approvals/1`.
    pub approval_policy: super::ApprovalPolicy,
}

/// How often SDKs are probed for changes unless the operator says otherwise.
pub const DEFAULT_SDK_PROBE_INTERVAL: Duration = Duration::from_secs(300);

impl RunConfig {
    /// Merge flags/env (already in `args`), the file, and defaults.
    /// `env_secret` is `AGENT_RUNNER_SECRET`, taken out of the environment by `main`.
    pub fn resolve(args: RunArgs, env_secret: Option<Secret>) -> Result<Self, ConfigError> {
        Self::resolve_sourced(args, None, env_secret).map(|(config, _)| config)
    }

    /// [`RunConfig::resolve`], also saying where each setting came from.
    /// `matches` are clap's for `args` (they tell a flag from its variable);
    /// without them a value whose variable is not set counts as a flag.
    pub fn resolve_sourced(
        args: RunArgs,
        matches: Option<&clap::ArgMatches>,
        env_secret: Option<Secret>,
    ) -> Result<(Self, Sources), ConfigError> {
        let file = FileLayer::load(args.config.as_deref())?;
        let sources = Sources::record(&args, matches, &file);
        match Self::from_settings(args.or(file.args), env_secret) {
            Ok(config) => Ok((config, sources)),
            Err(e) => Err(sources.locate(e)),
        }
    }

    /// The merged settings, checked, with defaults for what none gave.
    fn from_settings(s: RunArgs, env_secret: Option<Secret>) -> Result<Self, ConfigError> {
        let github_app_key_file = s.github.github_app_private_key_file.clone();
        let hidden_files = super::files::hidden(&s);
        let github = s.github.resolve()?;
        let url_text = s.control_plane_url.ok_or_else(|| {
            key_err(
                "control_plane_url",
                "required (--control-plane-url, AGENT_RUNNER_CONTROL_PLANE_URL, or control_plane_url in the config file)",
            )
        })?;
        let control_plane =
            ControlPlaneUrl::parse(&url_text).map_err(|m| key_err("control_plane_url", m))?;
        let ca_cert_pem = match &s.ca_cert {
            Some(path) => Some(
                std::fs::read(path)
                    .map_err(|e| key_err("ca_cert", format!("{}: {e}", path.display())))?,
            ),
            None => None,
        };
        if ca_cert_pem.is_some() && !control_plane.tls {
            return Err(key_err(
                "ca_cert",
                "only applies to an https:// control_plane_url",
            ));
        }
        // The one exception to flag > env > file: a secret file set anywhere
        // (even in the file) wins over AGENT_RUNNER_SECRET.
        let secret = match &s.secret_file {
            Some(path) => Some(read_secret_file(path)?),
            None => env_secret,
        };
        let sandbox = s.sandbox.resolve()?;
        let skills = s.skills.resolve()?;
        let sdks = s
            .sdk
            .into_iter()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        // Set by the operator (even to the default's value): failing to
        // listen is fatal.
        let health = match &s.health_addr {
            Some(text) => (text.as_str(), true),
            None => (DEFAULT_HEALTH_ADDR, false),
        };
        let health = parse_health_addr(health.0)
            .map_err(|m| key_err("health_addr", m))?
            .map(|addr| HealthListen {
                addr,
                explicit: health.1,
            });
        let proxy = crate::util::proxy::ProxyConfig::resolve(s.proxy.as_deref())
            .map_err(|m| key_err("proxy", m))?;
        let mut sdk_options = s.external_sdks.resolve()?;
        sdk_options.code_agent = s.code_agent.resolve()?;
        let protocol = s.protocol.unwrap_or_default();
        let agent_api_url = agent_api_url(s.agent_api_url.as_deref(), protocol)?;
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        let mut config = Self {
            control_plane,
            ca_cert_pem,
            secret,
            state_dir: s.state_dir.unwrap_or_else(default_state_dir),
            workspace_root: s
                .workspace_root
                .unwrap_or_else(|| home.join(".agent-runner/workspaces")),
            sdks,
            max_concurrent_turns: s.max_concurrent_turns.unwrap_or(256),
            max_queued_requests: s.max_queued_requests.unwrap_or(DEFAULT_MAX_QUEUED_REQUESTS),
            drain_timeout: s.drain_timeout.unwrap_or(Duration::from_secs(30)),
            outbox_capacity: s.outbox_capacity.unwrap_or(10_000),
            keepalive_interval: s.keepalive_interval.unwrap_or(Duration::from_secs(20)),
            keepalive_timeout: s.keepalive_timeout.unwrap_or(Duration::from_secs(10)),
            reconnect_min_delay: s.reconnect_min_delay.unwrap_or(Duration::from_millis(250)),
            reconnect_max_delay: s.reconnect_max_delay.unwrap_or(Duration::from_secs(30)),
            skill_max_bytes: s.skill_max_bytes.unwrap_or(DEFAULT_SKILL_MAX_BYTES),
            skills,
            sdk_probe_interval: s.sdk_probe_interval.unwrap_or(DEFAULT_SDK_PROBE_INTERVAL),
            log_format: s.log_format.unwrap_or_default(),
            log_level: s.log_level.unwrap_or_else(|| "info".to_owned()),
            health,
            sdk_options,
            github,
            secret_file: s.secret_file,
            github_app_key_file,
            hidden_files,
            sandbox,
            proxy,
            exit_when_idle: s.exit_when_idle.filter(|d| !d.is_zero()),
            protocol,
            agent_api_url,
            approval_timeout: s
                .approval_timeout
                .unwrap_or(super::DEFAULT_APPROVAL_TIMEOUT),
            approval_policy: s.approval_policy.unwrap_or_default(),
        };
        // `--proxy` reaches the embedded engine's model providers too.
        config.sdk_options.code_agent.model_proxy = config.proxy.model_proxy();
        config.sdk_options.code_agent.approval_timeout = config.approval_timeout;
        default_code_agent_state_dir(&mut config.sdk_options.code_agent, &config.state_dir);
        config.check()?;
        Ok(config)
    }

    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.max_concurrent_turns == 0 {
            return Err(key_err("max_concurrent_turns", "must be at least 1"));
        }
        if self.approval_timeout.is_zero() {
            return Err(key_err("approval_timeout", "must be more than 0s"));
        }
        if self.max_queued_requests == 0 {
            return Err(key_err("max_queued_requests", "must be at least 1"));
        }
        if self.outbox_capacity < 16 {
            return Err(key_err("outbox_capacity", "must be at least 16"));
        }
        if self.reconnect_min_delay.is_zero() || self.reconnect_min_delay > self.reconnect_max_delay
        {
            return Err(key_err(
                "reconnect_min_delay",
                "must be above zero and at most reconnect_max_delay",
            ));
        }
        if self.keepalive_interval.is_zero() || self.keepalive_timeout.is_zero() {
            return Err(key_err(
                "keepalive_interval",
                "keepalive_interval and keepalive_timeout must be above zero",
            ));
        }
        Ok(())
    }
}

/// `--agent-api-url`, checked: an `http(s)://` URL, and only with protocol
/// 0.7 (0.2 has no thread token to go with it); empty is none.
fn agent_api_url(text: Option<&str>, protocol: Protocol) -> Result<Option<String>, ConfigError> {
    let Some(text) = text.map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    if protocol != Protocol::V07 {
        return Err(key_err(
            "agent_api_url",
            "only applies with protocol = 0.7 (protocol 0.2 gives threads no agent API token)",
        ));
    }
    let ok = (text.starts_with("http://") || text.starts_with("https://"))
        && text.parse::<http::Uri>().is_ok_and(|u| u.host().is_some())
        && !text.chars().any(char::is_whitespace);
    if !ok {
        return Err(key_err(
            "agent_api_url",
            format!("{text:?} is not an http:// or https:// URL"),
        ));
    }
    Ok(Some(text.to_owned()))
}

/// Only the GitHub settings of `args` and its config file: what
/// `agent-runner github` needs when it talks to GitHub as the App (no
/// control plane involved).
pub fn resolve_github(args: &RunArgs) -> Result<GithubConfig, ConfigError> {
    let file = FileLayer::load(args.config.as_deref())?;
    let sources = Sources::record(args, None, &file);
    args.github
        .clone()
        .or(file.args.github)
        .resolve()
        .map_err(|e| sources.locate(e))
}

/// The `control_plane_url` key of the config file at `path`, if any.
pub fn file_control_plane_url(path: Option<&Path>) -> Result<Option<String>, ConfigError> {
    Ok(FileLayer::load(path)?.args.control_plane_url)
}

/// The `health_addr` key of the config file at `path`, if any: what
/// `agent-runner status` reads when neither its flag nor env says.
pub fn file_health_addr(path: Option<&Path>) -> Result<Option<String>, ConfigError> {
    Ok(FileLayer::load(path)?.args.health_addr)
}

/// The state dir when no setting names one: `~/.agent-runner/state`
/// (`run`, and the commands that find a running runner, share it).
pub fn default_state_dir() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
        .join(".agent-runner/state")
}

/// The `state_dir` key of the config file at `path`, if any: where
/// `agent-runner ps`, `threads`, `interrupt`, `kill` and `logs` look for
/// the runner when neither `--state-dir` nor its env var says.
pub fn file_state_dir(path: Option<&Path>) -> Result<Option<PathBuf>, ConfigError> {
    Ok(FileLayer::load(path)?.args.state_dir)
}

pub(super) fn read_secret_file(path: &Path) -> Result<Secret, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| key_err("secret_file", format!("{}: {e}", path.display())))?;
    let secret = text.trim();
    if secret.is_empty() {
        return Err(key_err(
            "secret_file",
            format!("{} is empty", path.display()),
        ));
    }
    Ok(Secret::new(secret.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: &str) -> RunArgs {
        RunArgs {
            control_plane_url: Some(url.into()),
            ..Default::default()
        }
    }

    #[test]
    fn url_prefix_and_scheme() {
        let u = ControlPlaneUrl::parse("http://127.0.0.1:50051/grpc/").unwrap();
        assert_eq!(u.origin, "http://127.0.0.1:50051");
        assert_eq!(u.path_prefix, "/grpc");
        assert!(!u.tls);
        let u = ControlPlaneUrl::parse("https://cp.example.com").unwrap();
        assert!(u.tls);
        assert_eq!(u.path_prefix, "");
        assert!(ControlPlaneUrl::parse("ftp://x").is_err());
        assert!(ControlPlaneUrl::parse("127.0.0.1:50051").is_err());
    }

    #[test]
    fn precedence_flag_over_file_over_default() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("runner.toml");
        std::fs::write(
            &file,
            "control_plane_url = \"http://file:1\"\nmax_concurrent_turns = 7\ndrain_timeout = \"5s\"\n",
        )
        .unwrap();
        let mut a = args("http://flag:2");
        a.config = Some(file.clone());
        let c = RunConfig::resolve(a, None).unwrap();
        assert_eq!(c.control_plane.origin, "http://flag:2");
        assert_eq!(c.max_concurrent_turns, 7);
        assert_eq!(c.drain_timeout, Duration::from_secs(5));
        assert_eq!(c.outbox_capacity, 10_000);
        let a = RunArgs {
            config: Some(file),
            ..Default::default()
        };
        assert_eq!(
            RunConfig::resolve(a, None).unwrap().control_plane.origin,
            "http://file:1"
        );
    }

    #[test]
    fn sdk_probe_interval_from_the_file_or_five_minutes() {
        let c = RunConfig::resolve(args("http://x:1"), None).unwrap();
        assert_eq!(c.sdk_probe_interval, Duration::from_secs(300));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("runner.toml");
        std::fs::write(&file, "sdk_probe_interval = \"0s\"\n").unwrap();
        let a = RunArgs {
            config: Some(file.clone()),
            ..args("http://x:1")
        };
        assert_eq!(
            RunConfig::resolve(a, None).unwrap().sdk_probe_interval,
            Duration::ZERO
        );
        std::fs::write(&file, "sdk_probe_interval = \"often\"\n").unwrap();
        let a = RunArgs {
            config: Some(file),
            ..args("http://x:1")
        };
        let err = RunConfig::resolve(a, None).unwrap_err().to_string();
        assert!(err.starts_with("sdk_probe_interval:"), "{err}");
    }

    #[test]
    fn malformed_file_names_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("runner.toml");
        std::fs::write(&file, "max_concurrent_turns = \"many\"\n").unwrap();
        let a = RunArgs {
            config: Some(file.clone()),
            ..args("http://x:1")
        };
        let err = RunConfig::resolve(a, None).unwrap_err().to_string();
        assert!(err.contains("max_concurrent_turns"), "{err}");

        std::fs::write(&file, "no_such_key = 1\n").unwrap();
        let a = RunArgs {
            config: Some(file.clone()),
            ..args("http://x:1")
        };
        let err = RunConfig::resolve(a, None).unwrap_err().to_string();
        assert!(err.contains("no_such_key"), "{err}");

        std::fs::write(&file, "drain_timeout = \"soon\"\n").unwrap();
        let a = RunArgs {
            config: Some(file),
            ..args("http://x:1")
        };
        let err = RunConfig::resolve(a, None).unwrap_err().to_string();
        assert!(err.starts_with("drain_timeout:"), "{err}");
    }

    #[test]
    fn secret_file_wins_and_never_prints() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "s3cret\n").unwrap();
        let a = RunArgs {
            secret_file: Some(path),
            ..args("http://x:1")
        };
        let c = RunConfig::resolve(a, Some(Secret::new("env"))).unwrap();
        assert_eq!(c.secret.as_ref().unwrap().expose(), "s3cret");
        assert!(!format!("{c:?}").contains("s3cret"));
    }

    #[test]
    fn health_addr_default_explicit_empty_and_bad() {
        let c = RunConfig::resolve(args("http://x:1"), None).unwrap();
        let h = c.health.unwrap();
        assert_eq!(h.addr.to_string(), DEFAULT_HEALTH_ADDR);
        assert!(!h.explicit);
        assert!(h.addr.ip().is_loopback());

        let a = RunArgs {
            health_addr: Some("0.0.0.0:0".into()),
            ..args("http://x:1")
        };
        let h = RunConfig::resolve(a, None).unwrap().health.unwrap();
        assert!(h.explicit);
        assert_eq!(h.addr.port(), 0);

        let a = RunArgs {
            health_addr: Some(String::new()),
            ..args("http://x:1")
        };
        assert!(RunConfig::resolve(a, None).unwrap().health.is_none());

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("runner.toml");
        std::fs::write(&file, "health_addr = \"\"\n").unwrap();
        let a = RunArgs {
            config: Some(file.clone()),
            ..args("http://x:1")
        };
        assert!(RunConfig::resolve(a, None).unwrap().health.is_none());

        let a = RunArgs {
            health_addr: Some("localhost:9464".into()),
            ..args("http://x:1")
        };
        let err = RunConfig::resolve(a, None).unwrap_err().to_string();
        assert!(err.starts_with("health_addr:"), "{err}");
    }

    #[test]
    fn protocol_defaults_to_0_2_and_agent_api_url_needs_0_7() {
        let c = RunConfig::resolve(args("http://x:1"), None).unwrap();
        assert_eq!(c.protocol, Protocol::V02);
        assert_eq!(c.agent_api_url, None);
        let a = RunArgs {
            protocol: Some(Protocol::V07),
            agent_api_url: Some("https://cp.example/agent-api".into()),
            ..args("http://x:1")
        };
        let c = RunConfig::resolve(a, None).unwrap();
        assert_eq!(c.protocol, Protocol::V07);
        assert_eq!(
            c.agent_api_url.as_deref(),
            Some("https://cp.example/agent-api")
        );
        let a = RunArgs {
            agent_api_url: Some("https://cp.example".into()),
            ..args("http://x:1")
        };
        let err = RunConfig::resolve(a, None).unwrap_err().to_string();
        assert!(err.starts_with("agent_api_url:"), "{err}");
        let a = RunArgs {
            protocol: Some(Protocol::V07),
            agent_api_url: Some("ftp://cp".into()),
            ..args("http://x:1")
        };
        let err = RunConfig::resolve(a, None).unwrap_err().to_string();
        assert!(err.starts_with("agent_api_url:"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("runner.toml");
        std::fs::write(&file, "protocol = \"0.9\"\n").unwrap();
        let a = RunArgs {
            config: Some(file.clone()),
            ..args("http://x:1")
        };
        let err = RunConfig::resolve(a, None).unwrap_err().to_string();
        assert!(err.contains("protocol"), "{err}");
        std::fs::write(&file, "protocol = \"0.7\"\n").unwrap();
        let a = RunArgs {
            config: Some(file),
            ..Default::default()
        };
        let a = RunArgs {
            control_plane_url: Some("http://x:1".into()),
            ..a
        };
        assert_eq!(RunConfig::resolve(a, None).unwrap().protocol, Protocol::V07);
    }

    #[test]
    fn missing_url_names_the_key() {
        let err = RunConfig::resolve(RunArgs::default(), None)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("control_plane_url:"), "{err}");
    }
}
