//! The flags of `agent-runner run` (each also an `AGENT_RUNNER_*` env var),
//! and the small value parsers they share.

use super::*;

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
    /// Requests allowed to wait at once, runner-wide (for all agents and
    /// threads); beyond it a request gets a RequestError. Default: 10000.
    #[arg(long, env = "AGENT_RUNNER_MAX_QUEUED_REQUESTS")]
    pub max_queued_requests: Option<usize>,
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
    /// How often every SDK is probed again; a change of status or models
    /// since registration is sent as an `agent_sdk_update`. `0s`: never.
    /// Default: 5m.
    #[arg(long, env = "AGENT_RUNNER_SDK_PROBE_INTERVAL", value_parser = parse_duration)]
    pub sdk_probe_interval: Option<Duration>,
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
    /// Outbound HTTP proxy for every destination (`http://[user:pass@]host:port`;
    /// the ControlChannel tunnels through it with CONNECT). Unset: HTTPS_PROXY /
    /// HTTP_PROXY by scheme; NO_PROXY lists hosts reached directly. Agents' git
    /// and CLIs get the same proxy.
    #[arg(long, env = "AGENT_RUNNER_PROXY")]
    pub proxy: Option<String>,
    /// With no turn running and no request (heartbeats aside) for this long,
    /// drain and exit 0 (scale-to-zero deployments). `0s` or unset: never.
    #[arg(long, env = "AGENT_RUNNER_EXIT_WHEN_IDLE", value_parser = parse_duration)]
    pub exit_when_idle: Option<Duration>,
    /// Settings of the codex and claude-code adapters (see `ExternalSdkArgs`).
    #[command(flatten)]
    pub external_sdks: ExternalSdkArgs,
    /// Where GitHub installation tokens come from (see `GithubArgs`).
    #[command(flatten)]
    pub github: GithubArgs,
    /// Settings of the code-agent adapter (see `CodeAgentArgs`).
    #[command(flatten)]
    pub code_agent: CodeAgentArgs,
    /// The agent sandbox (see `SandboxArgs`).
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// Requests allowed to wait at once, runner-wide, unless the operator says
/// otherwise: far above any legitimate burst; each costs a few hundred
/// bytes while it waits.
pub const DEFAULT_MAX_QUEUED_REQUESTS: usize = 10_000;

/// Default limit on a package's total size.
pub const DEFAULT_SKILL_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// Where the health endpoints listen unless told otherwise.
pub const DEFAULT_HEALTH_ADDR: &str = "127.0.0.1:9464";

/// Where the health endpoints listen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthListen {
    /// The address.
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

pub(super) fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e} (examples: 500ms, 30s, 2m)"))
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}
