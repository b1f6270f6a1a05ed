//! The runner's settings, resolved once at start-up.
//!
//! Every setting can come from a flag, an `AGENT_RUNNER_*` environment
//! variable (clap reads both), or a key of the optional TOML file named by
//! `--config`; precedence is flag > env > file > default. A malformed file or
//! value exits with a message naming the key. The bearer secret is never a
//! plain flag value: it comes from `--secret-file` (or `secret_file` in the
//! file) or from `AGENT_RUNNER_SECRET`, which `main` reads and removes from
//! the environment before anything else runs, so agents never inherit it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde::Deserialize;

pub use crate::secret::Secret;

/// Flags of `agent-runner run` (each also an env var; see `--help`).
#[derive(Debug, Clone, Default, Args)]
pub struct RunArgs {
    /// TOML file with any of the settings below (keys are the flag names with `_`).
    #[arg(long, env = "AGENT_RUNNER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Control plane URL: `https://host:port` (TLS, system roots), `http://host:port`
    /// (plaintext); a path is a prefix for every RPC (`http://h:50051/grpc`).
    #[arg(long, env = "AGENT_RUNNER_CONTROL_PLANE_URL")]
    pub control_plane_url: Option<String>,
    /// Extra CA certificate (PEM) trusted for an `https://` control plane.
    #[arg(long, env = "AGENT_RUNNER_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
    /// File holding the bearer secret sent as `authorization: Bearer …`
    /// (or set AGENT_RUNNER_SECRET; never pass the secret itself as a flag).
    #[arg(long, env = "AGENT_RUNNER_SECRET_FILE")]
    pub secret_file: Option<PathBuf>,
    /// Directory for durable state (SQLite). Default: ~/.agent-runner/state.
    #[arg(long, env = "AGENT_RUNNER_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Directory holding one workspace per agent and per thread.
    /// Default: ~/.agent-runner/workspaces.
    #[arg(long, env = "AGENT_RUNNER_WORKSPACE_ROOT")]
    pub workspace_root: Option<PathBuf>,
    /// SDK adapter to enable; repeatable (env: comma-separated). Default: all built in.
    #[arg(long = "sdk", env = "AGENT_RUNNER_SDK", value_delimiter = ',')]
    pub sdk: Vec<String>,
    /// Turns allowed to run at once; a message beyond it gets a RequestError. Default: 256.
    #[arg(long, env = "AGENT_RUNNER_MAX_CONCURRENT_TURNS")]
    pub max_concurrent_turns: Option<usize>,
    /// On SIGTERM, how long running turns may go on before they are interrupted. Default: 30s.
    #[arg(long, env = "AGENT_RUNNER_DRAIN_TIMEOUT", value_parser = parse_duration)]
    pub drain_timeout: Option<Duration>,
    /// Updates kept while disconnected before intermediate ones are coalesced. Default: 10000.
    #[arg(long, env = "AGENT_RUNNER_OUTBOX_CAPACITY")]
    pub outbox_capacity: Option<usize>,
    /// HTTP/2 keepalive ping interval. Default: 20s.
    #[arg(long, env = "AGENT_RUNNER_KEEPALIVE_INTERVAL", value_parser = parse_duration)]
    pub keepalive_interval: Option<Duration>,
    /// How long a keepalive ping may go unanswered before the link is dropped. Default: 10s.
    #[arg(long, env = "AGENT_RUNNER_KEEPALIVE_TIMEOUT", value_parser = parse_duration)]
    pub keepalive_timeout: Option<Duration>,
    /// First reconnect delay (jittered, doubling). Default: 250ms.
    #[arg(long, env = "AGENT_RUNNER_RECONNECT_MIN_DELAY", value_parser = parse_duration)]
    pub reconnect_min_delay: Option<Duration>,
    /// Longest reconnect delay. Default: 30s.
    #[arg(long, env = "AGENT_RUNNER_RECONNECT_MAX_DELAY", value_parser = parse_duration)]
    pub reconnect_max_delay: Option<Duration>,
    /// Largest skill package (bytes) an InstallSkillsMpRequest may install. Default: 16 MiB.
    #[arg(long, env = "AGENT_RUNNER_SKILL_MAX_BYTES")]
    pub skill_max_bytes: Option<u64>,
    /// Log format: `text` or `json`. Default: text.
    #[arg(long, env = "AGENT_RUNNER_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Log level or tracing filter (`info`, `agent_runner=debug`). Default: info.
    #[arg(long, env = "AGENT_RUNNER_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// Where /livez, /readyz, /metrics and /status listen: `IP:PORT` (port 0
    /// picks a free one, logged); empty turns them off. Default: 127.0.0.1:9464
    /// (if that port is taken the runner warns and goes on without them; a port
    /// set here that is taken is an error).
    #[arg(long, env = "AGENT_RUNNER_HEALTH_ADDR")]
    pub health_addr: Option<String>,
    /// Settings of the codex and claude-code adapters (see `ExternalSdkArgs`).
    #[command(flatten)]
    pub external_sdks: ExternalSdkArgs,
    /// Where GitHub installation tokens come from (see `GithubArgs`).
    #[command(flatten)]
    pub github: GithubArgs,
    /// Settings of the code-agent adapter (see `CodeAgentArgs`).
    #[command(flatten)]
    pub code_agent: CodeAgentArgs,
}

/// Where the health endpoints listen unless told otherwise.
pub const DEFAULT_HEALTH_ADDR: &str = "127.0.0.1:9464";

/// Where the health endpoints listen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthListen {
    pub addr: SocketAddr,
    /// Set by the operator (failing to listen is fatal) rather than the
    /// default (failing to listen is a warning: two runners on one host).
    pub explicit: bool,
}

/// `IP:PORT`, or empty (surrounding blanks ignored) for none.
pub fn parse_health_addr(text: &str) -> Result<Option<SocketAddr>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| {
        format!(
            "{text:?} is not IP:PORT (examples: 127.0.0.1:9464, 0.0.0.0:9464, [::]:9464; empty turns the endpoints off)"
        )
    })
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e} (examples: 500ms, 30s, 2m)"))
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The optional TOML file: the same settings, every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    control_plane_url: Option<String>,
    ca_cert: Option<PathBuf>,
    secret_file: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    workspace_root: Option<PathBuf>,
    sdk: Option<Vec<String>>,
    max_concurrent_turns: Option<usize>,
    drain_timeout: Option<String>,
    outbox_capacity: Option<usize>,
    keepalive_interval: Option<String>,
    keepalive_timeout: Option<String>,
    reconnect_min_delay: Option<String>,
    reconnect_max_delay: Option<String>,
    skill_max_bytes: Option<u64>,
    log_format: Option<LogFormat>,
    log_level: Option<String>,
    health_addr: Option<String>,
    // The codex and claude-code adapters (see `ExternalSdkArgs`).
    codex_bin: Option<PathBuf>,
    codex_approval_policy: Option<String>,
    codex_sandbox: Option<String>,
    claude_bin: Option<PathBuf>,
    claude_permission_mode: Option<String>,
    claude_models: Option<String>,
    // GitHub installation tokens (see `GithubArgs`).
    github_app_id: Option<u64>,
    github_app_private_key_file: Option<PathBuf>,
    github_api_url: Option<String>,
    github_host: Option<String>,
    // The code-agent adapter (see `CodeAgentArgs`).
    code_agent_endpoint: Option<String>,
    code_agent_state_dir: Option<PathBuf>,
}

/// A configuration problem, naming the key it concerns.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{key}: {message}")]
    Key { key: &'static str, message: String },
}

fn key_err(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Key {
        key,
        message: message.into(),
    }
}

/// Where the control plane is and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlPlaneUrl {
    /// `scheme://host:port`, what the transport connects to.
    pub origin: String,
    /// The path every RPC is prefixed with (`/grpc`), empty for none.
    pub path_prefix: String,
    pub tls: bool,
    pub host: String,
}

impl ControlPlaneUrl {
    pub fn parse(text: &str) -> Result<Self, String> {
        let uri: http::Uri = text
            .parse()
            .map_err(|e| format!("{text:?} is not a URL: {e}"))?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(format!("{text:?} must start with http:// or https://")),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| format!("{text:?} has no host"))?;
        if uri.query().is_some() {
            return Err(format!("{text:?} must not have a query"));
        }
        let path_prefix = uri.path().trim_end_matches('/').to_owned();
        Ok(Self {
            origin: format!("{}://{}", if tls { "https" } else { "http" }, authority),
            path_prefix,
            tls,
            host: authority.host().to_owned(),
        })
    }
}

/// Everything `run` needs, resolved.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub control_plane: ControlPlaneUrl,
    pub ca_cert_pem: Option<Vec<u8>>,
    pub secret: Option<Secret>,
    pub state_dir: PathBuf,
    pub workspace_root: PathBuf,
    /// Empty means every built-in SDK.
    pub sdks: Vec<String>,
    pub max_concurrent_turns: usize,
    pub drain_timeout: Duration,
    pub outbox_capacity: usize,
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
    pub reconnect_min_delay: Duration,
    pub reconnect_max_delay: Duration,
    pub skill_max_bytes: u64,
    pub log_format: LogFormat,
    pub log_level: String,
    /// `None`: health endpoints off.
    pub health: Option<HealthListen>,
    /// Settings of the adapters that drive external CLIs.
    pub sdk_options: crate::sdks::SdkOptions,
    /// Where GitHub installation tokens come from.
    pub github: GithubConfig,
}

impl RunConfig {
    /// Merge flags/env (already in `args`), the file, and defaults.
    /// `env_secret` is `AGENT_RUNNER_SECRET`, taken out of the environment by `main`.
    pub fn resolve(args: RunArgs, env_secret: Option<Secret>) -> Result<Self, ConfigError> {
        let file = match &args.config {
            Some(path) => load_file(path)?,
            None => FileConfig::default(),
        };
        let github = args
            .github
            .clone()
            .or(GithubArgs::from_file(&file))
            .resolve()?;
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));

        let url_text = args
            .control_plane_url
            .or(file.control_plane_url)
            .ok_or_else(|| {
                key_err(
                    "control_plane_url",
                    "required (--control-plane-url, AGENT_RUNNER_CONTROL_PLANE_URL, or control_plane_url in the config file)",
                )
            })?;
        let control_plane =
            ControlPlaneUrl::parse(&url_text).map_err(|m| key_err("control_plane_url", m))?;

        let ca_cert_pem = match args.ca_cert.or(file.ca_cert) {
            Some(path) => Some(
                std::fs::read(&path)
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

        let secret = match args.secret_file.or(file.secret_file) {
            Some(path) => Some(read_secret_file(&path)?),
            None => env_secret,
        };

        let sdks = if !args.sdk.is_empty() {
            args.sdk
        } else {
            file.sdk.unwrap_or_default()
        };
        let sdks = sdks
            .into_iter()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect();

        let health = match args.health_addr.or(file.health_addr) {
            Some(text) => parse_health_addr(&text)
                .map_err(|m| key_err("health_addr", m))?
                .map(|addr| HealthListen {
                    addr,
                    explicit: true,
                }),
            None => parse_health_addr(DEFAULT_HEALTH_ADDR)
                .map_err(|m| key_err("health_addr", m))?
                .map(|addr| HealthListen {
                    addr,
                    explicit: false,
                }),
        };

        let from_file = ExternalSdkArgs {
            codex_bin: file.codex_bin,
            codex_approval_policy: file.codex_approval_policy,
            codex_sandbox: file.codex_sandbox,
            claude_bin: file.claude_bin,
            claude_permission_mode: file.claude_permission_mode,
            claude_models: file.claude_models,
        };
        let sdk_options = args.external_sdks.or(from_file).resolve()?;

        let sdk_options = crate::sdks::SdkOptions {
            code_agent: args
                .code_agent
                .or(CodeAgentArgs {
                    code_agent_endpoint: file.code_agent_endpoint,
                    code_agent_state_dir: file.code_agent_state_dir,
                })
                .resolve()?,
            ..sdk_options
        };

        let duration = |key: &'static str,
                        flag: Option<Duration>,
                        file: Option<String>,
                        default| match (flag, file) {
            (Some(d), _) => Ok(d),
            (None, Some(text)) => parse_duration(&text).map_err(|m| key_err(key, m)),
            (None, None) => Ok(default),
        };

        let config = Self {
            control_plane,
            ca_cert_pem,
            secret,
            state_dir: args
                .state_dir
                .or(file.state_dir)
                .unwrap_or_else(|| home.join(".agent-runner/state")),
            workspace_root: args
                .workspace_root
                .or(file.workspace_root)
                .unwrap_or_else(|| home.join(".agent-runner/workspaces")),
            sdks,
            max_concurrent_turns: args
                .max_concurrent_turns
                .or(file.max_concurrent_turns)
                .unwrap_or(256),
            drain_timeout: duration(
                "drain_timeout",
                args.drain_timeout,
                file.drain_timeout,
                Duration::from_secs(30),
            )?,
            outbox_capacity: args
                .outbox_capacity
                .or(file.outbox_capacity)
                .unwrap_or(10_000),
            keepalive_interval: duration(
                "keepalive_interval",
                args.keepalive_interval,
                file.keepalive_interval,
                Duration::from_secs(20),
            )?,
            keepalive_timeout: duration(
                "keepalive_timeout",
                args.keepalive_timeout,
                file.keepalive_timeout,
                Duration::from_secs(10),
            )?,
            reconnect_min_delay: duration(
                "reconnect_min_delay",
                args.reconnect_min_delay,
                file.reconnect_min_delay,
                Duration::from_millis(250),
            )?,
            reconnect_max_delay: duration(
                "reconnect_max_delay",
                args.reconnect_max_delay,
                file.reconnect_max_delay,
                Duration::from_secs(30),
            )?,
            skill_max_bytes: args
                .skill_max_bytes
                .or(file.skill_max_bytes)
                .unwrap_or(crate::skills::DEFAULT_MAX_BYTES),
            log_format: args.log_format.or(file.log_format).unwrap_or_default(),
            log_level: args
                .log_level
                .or(file.log_level)
                .unwrap_or_else(|| "info".to_owned()),
            health,
            sdk_options,
            github,
        };
        let mut config = config;
        default_code_agent_state_dir(&mut config.sdk_options.code_agent, &config.state_dir);
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), ConfigError> {
        if self.max_concurrent_turns == 0 {
            return Err(key_err("max_concurrent_turns", "must be at least 1"));
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

/// Only the GitHub settings of `args` and its config file: what
/// `agent-runner github` needs when it talks to GitHub as the App (no
/// control plane involved).
pub fn resolve_github(args: &RunArgs) -> Result<GithubConfig, ConfigError> {
    let file = match &args.config {
        Some(path) => load_file(path)?,
        None => FileConfig::default(),
    };
    args.github
        .clone()
        .or(GithubArgs::from_file(&file))
        .resolve()
}

fn load_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::File {
        path: path.to_owned(),
        // toml's message names the key and shows the line.
        message: e.to_string(),
    })
}

fn read_secret_file(path: &Path) -> Result<Secret, ConfigError> {
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

// ---------------------------------------------------------------------------
// External agent SDKs (codex, claude-code): flags, env vars and file keys.
// Kept in one block; `RunArgs`, `FileConfig`, `RunConfig` and `resolve` only
// hook it in.
// ---------------------------------------------------------------------------

/// Flags of the adapters that drive external agent CLIs. A CLI that is
/// missing does not stop the runner: its SDK registers as UNCONFIGURED.
#[derive(Debug, Clone, Default, Args)]
pub struct ExternalSdkArgs {
    /// The `codex` executable for the codex SDK. Default: `codex` on PATH.
    #[arg(long, env = "AGENT_RUNNER_CODEX_BIN")]
    pub codex_bin: Option<PathBuf>,
    /// Codex approval policy for every thread: untrusted, on-request or never
    /// (approval requests are declined, except under `never`, where codex does
    /// not ask). Default: codex's own config.
    #[arg(long, env = "AGENT_RUNNER_CODEX_APPROVAL_POLICY")]
    pub codex_approval_policy: Option<String>,
    /// Codex sandbox for every thread: read-only, workspace-write or
    /// danger-full-access. Default: codex's own config.
    #[arg(long, env = "AGENT_RUNNER_CODEX_SANDBOX")]
    pub codex_sandbox: Option<String>,
    /// The `claude` executable for the claude-code SDK. Default: `claude` on PATH.
    #[arg(long, env = "AGENT_RUNNER_CLAUDE_BIN")]
    pub claude_bin: Option<PathBuf>,
    /// Claude Code permission mode: acceptEdits, auto, bypassPermissions,
    /// default, dontAsk or plan. Permission prompts are allowed only under
    /// bypassPermissions (which the runner implements itself, so it also works
    /// as root) and denied otherwise. Default: Claude Code's own.
    #[arg(long, env = "AGENT_RUNNER_CLAUDE_PERMISSION_MODE")]
    pub claude_permission_mode: Option<String>,
    /// Models the claude-code SDK advertises: comma-separated `name` or
    /// `name:level/level` (levels are passed as --effort).
    /// Default: sonnet:low/medium/high,opus:low/medium/high,haiku.
    #[arg(long, env = "AGENT_RUNNER_CLAUDE_MODELS")]
    pub claude_models: Option<String>,
}

impl ExternalSdkArgs {
    /// Each setting from `self`, else from `other`.
    fn or(self, other: Self) -> Self {
        Self {
            codex_bin: self.codex_bin.or(other.codex_bin),
            codex_approval_policy: self.codex_approval_policy.or(other.codex_approval_policy),
            codex_sandbox: self.codex_sandbox.or(other.codex_sandbox),
            claude_bin: self.claude_bin.or(other.claude_bin),
            claude_permission_mode: self.claude_permission_mode.or(other.claude_permission_mode),
            claude_models: self.claude_models.or(other.claude_models),
        }
    }

    /// Checked adapter settings (defaults for what is not given).
    fn resolve(self) -> Result<crate::sdks::SdkOptions, ConfigError> {
        let mut options = crate::sdks::SdkOptions::default();
        if let Some(bin) = self.codex_bin {
            options.codex.bin = bin;
        }
        if let Some(policy) = self.codex_approval_policy {
            sdk_codex::check_approval_policy(&policy)
                .map_err(|m| key_err("codex_approval_policy", m))?;
            options.codex.approval_policy = Some(policy);
        }
        if let Some(sandbox) = self.codex_sandbox {
            sdk_codex::check_sandbox(&sandbox).map_err(|m| key_err("codex_sandbox", m))?;
            options.codex.sandbox = Some(sandbox);
        }
        if let Some(bin) = self.claude_bin {
            options.claude.bin = bin;
        }
        if let Some(mode) = self.claude_permission_mode {
            sdk_claude_code::check_permission_mode(&mode)
                .map_err(|m| key_err("claude_permission_mode", m))?;
            options.claude.permission_mode = Some(mode);
        }
        if let Some(models) = self.claude_models {
            options.claude.models =
                sdk_claude_code::parse_models(&models).map_err(|m| key_err("claude_models", m))?;
        }
        Ok(options)
    }
}

// ---------------------------------------------------------------------------
// The code-agent adapter: flags, env vars and file keys. Kept in one block;
// `RunArgs`, `FileConfig` and `resolve` only hook it in. The engine itself
// reads its model provider from the environment (OPENAI_API_KEY,
// OPENAI_BASE_URL, CODE_AGENT_MODELS); the key never appears here.
// ---------------------------------------------------------------------------

/// Flags of the code-agent adapter.
#[derive(Debug, Clone, Default, Args)]
pub struct CodeAgentArgs {
    /// A remote a3s CodeAgentService for the code-agent SDK (`http://host:port`
    /// or `https://…`, e.g. `agent-runner code-agent serve` elsewhere; it must
    /// see the same workspace paths). Default: the engine embedded in the
    /// runner (no port opened).
    #[arg(long, env = "AGENT_RUNNER_CODE_AGENT_ENDPOINT")]
    pub code_agent_endpoint: Option<String>,
    /// State directory of the embedded engine (sessions, providers).
    /// Default: <state dir>/code-agent.
    #[arg(long, env = "AGENT_RUNNER_CODE_AGENT_STATE_DIR")]
    pub code_agent_state_dir: Option<PathBuf>,
}

impl CodeAgentArgs {
    /// Each setting from `self`, else from `other`.
    fn or(self, other: Self) -> Self {
        Self {
            code_agent_endpoint: self.code_agent_endpoint.or(other.code_agent_endpoint),
            code_agent_state_dir: self.code_agent_state_dir.or(other.code_agent_state_dir),
        }
    }

    /// Checked settings; the state dir default comes later
    /// ([`default_code_agent_state_dir`]), once the runner's is known.
    fn resolve(self) -> Result<sdk_code_agent::CodeAgentConfig, ConfigError> {
        let mut config = sdk_code_agent::CodeAgentConfig::default();
        if let Some(url) = self
            .code_agent_endpoint
            .map(|u| u.trim().to_owned())
            .filter(|u| !u.is_empty())
        {
            sdk_code_agent::check_endpoint(&url).map_err(|m| key_err("code_agent_endpoint", m))?;
            config.endpoint = Some(url);
        }
        config.state_dir = self.code_agent_state_dir;
        Ok(config)
    }
}

/// The embedded engine's state dir defaults to `<state dir>/code-agent`.
fn default_code_agent_state_dir(
    config: &mut sdk_code_agent::CodeAgentConfig,
    runner_state_dir: &Path,
) {
    if config.endpoint.is_none() && config.state_dir.is_none() {
        config.state_dir = Some(runner_state_dir.join("code-agent"));
    }
}

#[cfg(test)]
mod code_agent_tests {
    use super::*;

    fn with(code_agent: CodeAgentArgs, config: Option<PathBuf>) -> Result<RunConfig, ConfigError> {
        RunConfig::resolve(
            RunArgs {
                control_plane_url: Some("http://x:1".into()),
                state_dir: Some("/var/lib/ar".into()),
                config,
                code_agent,
                ..Default::default()
            },
            None,
        )
    }

    #[test]
    fn embedded_by_default_with_state_under_the_runners() {
        let c = with(CodeAgentArgs::default(), None).unwrap();
        let o = &c.sdk_options.code_agent;
        assert_eq!(o.endpoint, None);
        assert_eq!(o.state_dir, Some(PathBuf::from("/var/lib/ar/code-agent")));
    }

    #[test]
    fn flag_over_file_and_bad_endpoints_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("runner.toml");
        std::fs::write(
            &file,
            "code_agent_endpoint = \"http://file:1\"\ncode_agent_state_dir = \"/srv/ca\"\n",
        )
        .unwrap();
        let c = with(CodeAgentArgs::default(), Some(file.clone())).unwrap();
        let o = &c.sdk_options.code_agent;
        assert_eq!(o.endpoint.as_deref(), Some("http://file:1"));
        assert_eq!(o.state_dir, Some(PathBuf::from("/srv/ca")));

        let flag = CodeAgentArgs {
            code_agent_endpoint: Some("https://engine:443".into()),
            ..Default::default()
        };
        let c = with(flag, Some(file)).unwrap();
        assert_eq!(
            c.sdk_options.code_agent.endpoint.as_deref(),
            Some("https://engine:443")
        );

        let blank = CodeAgentArgs {
            code_agent_endpoint: Some(" ".into()),
            ..Default::default()
        };
        assert_eq!(
            with(blank, None).unwrap().sdk_options.code_agent.endpoint,
            None
        );

        let bad = CodeAgentArgs {
            code_agent_endpoint: Some("engine:50051".into()),
            ..Default::default()
        };
        let err = with(bad, None).unwrap_err().to_string();
        assert!(err.starts_with("code_agent_endpoint:"), "{err}");
    }
}

// ---------------------------------------------------------------------------
// GitHub installation tokens: flags, env vars and file keys. Kept in one
// block; `RunArgs`, `FileConfig`, `RunConfig` and `resolve` only hook it in.
// ---------------------------------------------------------------------------

/// Where installation tokens come from: the control plane (default), or the
/// runner's own GitHub App when `--github-app-id` is set.
#[derive(Debug, Clone, Default, Args)]
pub struct GithubArgs {
    /// GitHub App id: mint installation tokens as this App instead of asking
    /// the control plane (needs --github-app-private-key-file).
    #[arg(long, env = "AGENT_RUNNER_GITHUB_APP_ID")]
    pub github_app_id: Option<u64>,
    /// The App's private key (PEM), read at start-up; never logged.
    #[arg(long, env = "AGENT_RUNNER_GITHUB_APP_PRIVATE_KEY_FILE")]
    pub github_app_private_key_file: Option<PathBuf>,
    /// GitHub API URL for the App (GitHub Enterprise Server:
    /// `https://HOST/api/v3`). Default: https://api.github.com.
    #[arg(long, env = "AGENT_RUNNER_GITHUB_API_URL")]
    pub github_api_url: Option<String>,
    /// The git host tokens are for (`host` or `host:port`). Default:
    /// github.com, or the host of --github-api-url (without `api.`).
    #[arg(long, env = "AGENT_RUNNER_GITHUB_HOST")]
    pub github_host: Option<String>,
}

/// The runner's own GitHub App.
#[derive(Debug, Clone)]
pub struct GithubAppConfig {
    pub app_id: u64,
    /// Checked at start-up; prints as `***`.
    pub key: crate::github::jwt::AppKey,
    /// Without a trailing `/`.
    pub api_url: String,
}

/// Where installation tokens come from and what host they are for.
#[derive(Debug, Clone)]
pub struct GithubConfig {
    /// `None`: from the control plane.
    pub app: Option<GithubAppConfig>,
    /// The git host (`github.com`, `ghe.example.com`, `127.0.0.1:8080`).
    pub host: String,
}

/// The default git host.
pub const DEFAULT_GITHUB_HOST: &str = "github.com";

impl Default for GithubConfig {
    /// Tokens from the control plane, for github.com.
    fn default() -> Self {
        Self {
            app: None,
            host: DEFAULT_GITHUB_HOST.to_owned(),
        }
    }
}

impl GithubArgs {
    fn from_file(file: &FileConfig) -> Self {
        Self {
            github_app_id: file.github_app_id,
            github_app_private_key_file: file.github_app_private_key_file.clone(),
            github_api_url: file.github_api_url.clone(),
            github_host: file.github_host.clone(),
        }
    }

    /// Each setting from `self`, else from `other`.
    fn or(self, other: Self) -> Self {
        Self {
            github_app_id: self.github_app_id.or(other.github_app_id),
            github_app_private_key_file: self
                .github_app_private_key_file
                .or(other.github_app_private_key_file),
            github_api_url: self.github_api_url.or(other.github_api_url),
            github_host: self.github_host.or(other.github_host),
        }
    }

    fn resolve(self) -> Result<GithubConfig, ConfigError> {
        let api_url_given = self.github_api_url.is_some();
        let app = match (self.github_app_id, self.github_app_private_key_file) {
            (None, None) => None,
            (Some(_), None) => {
                return Err(key_err(
                    "github_app_private_key_file",
                    "required with github_app_id",
                ));
            }
            (None, Some(_)) => {
                return Err(key_err(
                    "github_app_id",
                    "required with github_app_private_key_file",
                ));
            }
            (Some(0), Some(_)) => return Err(key_err("github_app_id", "must be at least 1")),
            (Some(app_id), Some(path)) => {
                let pem = std::fs::read(&path).map_err(|e| {
                    key_err(
                        "github_app_private_key_file",
                        format!("{}: {e}", path.display()),
                    )
                })?;
                // The message never quotes the file.
                let key = crate::github::jwt::AppKey::from_pem(&pem).map_err(|m| {
                    key_err(
                        "github_app_private_key_file",
                        format!("{}: {m}", path.display()),
                    )
                })?;
                let api_url = match self.github_api_url {
                    Some(url) => check_api_url(&url).map_err(|m| key_err("github_api_url", m))?,
                    None => crate::github::app::DEFAULT_API_URL.to_owned(),
                };
                Some(GithubAppConfig {
                    app_id,
                    key,
                    api_url,
                })
            }
        };
        if app.is_none() && api_url_given {
            return Err(key_err(
                "github_api_url",
                "only applies with github_app_id (the control plane mints tokens otherwise)",
            ));
        }
        let host = match self.github_host {
            Some(host) => check_git_host(&host).map_err(|m| key_err("github_host", m))?,
            None => match &app {
                Some(app) => git_host_of_api(&app.api_url),
                None => DEFAULT_GITHUB_HOST.to_owned(),
            },
        };
        Ok(GithubConfig { app, host })
    }
}

/// An `http(s)://host[:port][/path]` URL, without a trailing `/`.
fn check_api_url(text: &str) -> Result<String, String> {
    let text = text.trim().trim_end_matches('/');
    let uri: http::Uri = text
        .parse()
        .map_err(|e| format!("{text:?} is not a URL: {e}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(format!("{text:?} must start with http:// or https://"));
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("{text:?} has no host"));
    }
    if uri.query().is_some() {
        return Err(format!("{text:?} must not have a query"));
    }
    Ok(text.to_owned())
}

/// `host` or `host:port`, nothing else.
fn check_git_host(text: &str) -> Result<String, String> {
    let text = text.trim();
    let authority: http::uri::Authority = text
        .parse()
        .map_err(|_| format!("{text:?} is not a host or host:port"))?;
    if text.is_empty() || text.contains('@') || authority.host().is_empty() {
        return Err(format!("{text:?} is not a host or host:port"));
    }
    Ok(text.to_owned())
}

/// The git host of an API URL: `api.github.com` → `github.com`,
/// `https://ghe.example.com/api/v3` → `ghe.example.com`, else its
/// `host:port`.
fn git_host_of_api(api_url: &str) -> String {
    let Ok(uri) = api_url.parse::<http::Uri>() else {
        return DEFAULT_GITHUB_HOST.to_owned();
    };
    let Some(authority) = uri.authority() else {
        return DEFAULT_GITHUB_HOST.to_owned();
    };
    let text = authority.as_str();
    text.strip_prefix("api.").unwrap_or(text).to_owned()
}

#[cfg(test)]
mod github_tests {
    use super::*;

    fn with(github: GithubArgs) -> Result<RunConfig, ConfigError> {
        RunConfig::resolve(
            RunArgs {
                control_plane_url: Some("http://x:1".into()),
                github,
                ..Default::default()
            },
            None,
        )
    }

    fn key_file(dir: &Path) -> PathBuf {
        mock_control_plane::github_api::test_app_key()
            .write_private_key(dir, "app.pem")
            .unwrap()
    }

    #[test]
    fn control_plane_by_default() {
        let c = with(GithubArgs::default()).unwrap();
        assert!(c.github.app.is_none());
        assert_eq!(c.github.host, "github.com");
        let c = with(GithubArgs {
            github_host: Some("127.0.0.1:8080".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(c.github.host, "127.0.0.1:8080");
    }

    #[test]
    fn app_mode_hosts_from_the_api_url() {
        let dir = tempfile::tempdir().unwrap();
        let key = key_file(dir.path());
        for (api, host) in [
            (None, "github.com"),
            (Some("https://ghe.example.com/api/v3/"), "ghe.example.com"),
            (Some("https://api.acme.ghe.com"), "acme.ghe.com"),
            (Some("http://127.0.0.1:9999"), "127.0.0.1:9999"),
        ] {
            let c = with(GithubArgs {
                github_app_id: Some(42),
                github_app_private_key_file: Some(key.clone()),
                github_api_url: api.map(str::to_owned),
                ..Default::default()
            })
            .unwrap();
            let app = c.github.app.as_ref().unwrap();
            assert_eq!(app.app_id, 42);
            assert_eq!(c.github.host, host, "{api:?}");
            assert!(!app.api_url.ends_with('/'));
            let printed = format!("{c:?}");
            assert!(!printed.contains("PRIVATE KEY"), "{printed}");
        }
    }

    #[test]
    fn file_keys_and_precedence() {
        let dir = tempfile::tempdir().unwrap();
        let key = key_file(dir.path());
        let file = dir.path().join("runner.toml");
        std::fs::write(
            &file,
            format!(
                "github_app_id = 7\ngithub_app_private_key_file = {:?}\ngithub_api_url = \"http://file:1\"\ngithub_host = \"file-host\"\n",
                key.display().to_string()
            ),
        )
        .unwrap();
        let c = RunConfig::resolve(
            RunArgs {
                control_plane_url: Some("http://x:1".into()),
                config: Some(file.clone()),
                github: GithubArgs {
                    github_app_id: Some(8),
                    ..Default::default()
                },
                ..Default::default()
            },
            None,
        )
        .unwrap();
        let app = c.github.app.as_ref().unwrap();
        assert_eq!(app.app_id, 8, "the flag wins over the file");
        assert_eq!(app.api_url, "http://file:1");
        assert_eq!(c.github.host, "file-host");
        // `agent-runner github` in App mode needs no control plane URL.
        let g = resolve_github(&RunArgs {
            config: Some(file),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(g.app.unwrap().app_id, 7);
    }

    #[test]
    fn bad_settings_name_their_key_and_never_quote_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let good = key_file(dir.path());
        let bad = dir.path().join("bad.pem");
        std::fs::write(
            &bad,
            "-----BEGIN RSA PRIVATE KEY-----\nc2VjcmV0LWtleS1tYXRlcmlhbA==\n-----END RSA PRIVATE KEY-----\n",
        )
        .unwrap();
        let cases = [
            (
                GithubArgs {
                    github_app_id: Some(1),
                    ..Default::default()
                },
                "github_app_private_key_file:",
            ),
            (
                GithubArgs {
                    github_app_private_key_file: Some(good.clone()),
                    ..Default::default()
                },
                "github_app_id:",
            ),
            (
                GithubArgs {
                    github_app_id: Some(0),
                    github_app_private_key_file: Some(good.clone()),
                    ..Default::default()
                },
                "github_app_id:",
            ),
            (
                GithubArgs {
                    github_app_id: Some(1),
                    github_app_private_key_file: Some(dir.path().join("missing.pem")),
                    ..Default::default()
                },
                "github_app_private_key_file:",
            ),
            (
                GithubArgs {
                    github_app_id: Some(1),
                    github_app_private_key_file: Some(bad),
                    ..Default::default()
                },
                "github_app_private_key_file:",
            ),
            (
                GithubArgs {
                    github_app_id: Some(1),
                    github_app_private_key_file: Some(good),
                    github_api_url: Some("ftp://x".into()),
                    ..Default::default()
                },
                "github_api_url:",
            ),
            (
                GithubArgs {
                    github_api_url: Some("https://ghe.example.com/api/v3".into()),
                    ..Default::default()
                },
                "github_api_url:",
            ),
            (
                GithubArgs {
                    github_host: Some("https://github.com/".into()),
                    ..Default::default()
                },
                "github_host:",
            ),
        ];
        for (github, key) in cases {
            let err = with(github).unwrap_err().to_string();
            assert!(err.starts_with(key), "{err}");
            assert!(!err.contains("c2VjcmV0"), "{err}");
        }
    }
}

#[cfg(test)]
mod external_sdk_tests {
    use super::*;

    fn with(external: ExternalSdkArgs) -> Result<RunConfig, ConfigError> {
        RunConfig::resolve(
            RunArgs {
                control_plane_url: Some("http://x:1".into()),
                external_sdks: external,
                ..Default::default()
            },
            None,
        )
    }

    #[test]
    fn defaults_flags_and_file_keys() {
        let c = with(ExternalSdkArgs::default()).unwrap();
        assert_eq!(c.sdk_options.codex.bin, PathBuf::from("codex"));
        assert_eq!(c.sdk_options.claude.bin, PathBuf::from("claude"));
        assert_eq!(c.sdk_options.claude.models.len(), 3);

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("runner.toml");
        std::fs::write(
            &file,
            "codex_bin = \"/opt/codex\"\ncodex_approval_policy = \"never\"\ncodex_sandbox = \"read-only\"\nclaude_models = \"sonnet:low/high\"\nclaude_permission_mode = \"plan\"\n",
        )
        .unwrap();
        let c = RunConfig::resolve(
            RunArgs {
                control_plane_url: Some("http://x:1".into()),
                config: Some(file),
                external_sdks: ExternalSdkArgs {
                    codex_sandbox: Some("workspace-write".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
            None,
        )
        .unwrap();
        let o = &c.sdk_options;
        assert_eq!(o.codex.bin, PathBuf::from("/opt/codex"));
        assert_eq!(o.codex.approval_policy.as_deref(), Some("never"));
        assert_eq!(o.codex.sandbox.as_deref(), Some("workspace-write"));
        assert_eq!(o.claude.permission_mode.as_deref(), Some("plan"));
        assert_eq!(o.claude.models.len(), 1);
        assert_eq!(o.claude.models[0].reasoning_levels, ["low", "high"]);
    }

    #[test]
    fn bad_values_name_their_key() {
        for (external, key) in [
            (
                ExternalSdkArgs {
                    codex_approval_policy: Some("sometimes".into()),
                    ..Default::default()
                },
                "codex_approval_policy:",
            ),
            (
                ExternalSdkArgs {
                    codex_sandbox: Some("none".into()),
                    ..Default::default()
                },
                "codex_sandbox:",
            ),
            (
                ExternalSdkArgs {
                    claude_permission_mode: Some("yolo".into()),
                    ..Default::default()
                },
                "claude_permission_mode:",
            ),
            (
                ExternalSdkArgs {
                    claude_models: Some(" , ".into()),
                    ..Default::default()
                },
                "claude_models:",
            ),
        ] {
            let err = with(external).unwrap_err().to_string();
            assert!(err.starts_with(key), "{err}");
        }
    }
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
    fn missing_url_names_the_key() {
        let err = RunConfig::resolve(RunArgs::default(), None)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("control_plane_url:"), "{err}");
    }
}
