//! The settings of `agent-runner run`, each defined once: its flag, its
//! `AGENT_RUNNER_*` variable, its TOML key (the field name), its help (the
//! last sentence `Default: …` is the default), its help heading (the
//! section of docs/configuration.md). Also the small value parsers they
//! share.

use super::layer::settings;
use super::*;

settings! {
    /// Flags of `agent-runner run` (each also an env var and a config-file key).
    #[derive(Debug, Clone, Default, Args)]
    pub struct RunArgs {
        /// The TOML file with any of these settings (its keys are the flags'
        /// names with `_`: `drain_timeout = "60s"`). Default: none.
        #[arg(long, env = "AGENT_RUNNER_CONFIG", value_name = "FILE", help_heading = "Connection")]
        pub config: Option<PathBuf>,
        /// The control plane: `https://host[:port]` (TLS, system roots) or
        /// `http://host[:port]` (plaintext); a path is a prefix for every RPC
        /// (`http://127.0.0.1:50051/grpc` calls
        /// `/grpc/companyhelm.runner.v1.AgentRunnerControlService/RegisterRunner`);
        /// no query. Default: none (required).
        #[arg(
            long,
            env = "AGENT_RUNNER_CONTROL_PLANE_URL",
            value_name = "URL",
            help_heading = "Connection",
        )]
        pub control_plane_url: Option<String>,
        /// An extra CA certificate (PEM) trusted for an `https://` control plane
        /// (an error with `http://`). Default: system roots only.
        #[arg(long, env = "AGENT_RUNNER_CA_CERT", value_name = "PEM", help_heading = "Connection")]
        pub ca_cert: Option<PathBuf>,
        /// The file holding the bearer secret, sent as `authorization: Bearer …`
        /// on every call; surrounding whitespace is trimmed, an empty file is an
        /// error. Never pass the secret itself as a flag: AGENT_RUNNER_SECRET
        /// may hold it instead, and is used only when no secret file is set by
        /// flag, variable or config file. Default: none (no `authorization`
        /// header).
        #[arg(
            long,
            env = "AGENT_RUNNER_SECRET_FILE",
            value_name = "FILE",
            help_heading = "Connection",
        )]
        pub secret_file: Option<PathBuf>,
        /// The version of the control-plane protocol to speak: `0.2` (agents
        /// and threads) or `0.7` (thread-only: a thread names only its model;
        /// docs/protocol.md says what differs). Default: `0.2`.
        #[arg(
            long,
            env = "AGENT_RUNNER_PROTOCOL",
            value_name = "VERSION",
            help_heading = "Connection",
        )]
        pub protocol: Option<Protocol>,
        /// With protocol 0.7: the control plane's agent API, given to every
        /// thread's processes as AGENT_API_URL (next to the thread's
        /// `cli_secret` as AGENT_API_TOKEN) and named in the model's
        /// instructions; `http://` or `https://`. Default: none (only the token
        /// is given).
        #[arg(
            long,
            env = "AGENT_RUNNER_AGENT_API_URL",
            value_name = "URL",
            help_heading = "Connection",
        )]
        pub agent_api_url: Option<String>,
        /// The HTTP/2 keepalive ping interval (above zero). Default: `20s`.
        #[arg(
            long,
            env = "AGENT_RUNNER_KEEPALIVE_INTERVAL",
            value_name = "DUR",
            value_parser = parse_duration,
            help_heading = "Connection",
        )]
        pub keepalive_interval: Option<Duration>,
        /// How long a keepalive ping may go unanswered before the link is
        /// dropped (above zero). Default: `10s`.
        #[arg(
            long,
            env = "AGENT_RUNNER_KEEPALIVE_TIMEOUT",
            value_name = "DUR",
            value_parser = parse_duration,
            help_heading = "Connection",
        )]
        pub keepalive_timeout: Option<Duration>,
        /// The first reconnect delay; it doubles, jittered (above zero, at most
        /// the longest). Default: `250ms`.
        #[arg(
            long,
            env = "AGENT_RUNNER_RECONNECT_MIN_DELAY",
            value_name = "DUR",
            value_parser = parse_duration,
            help_heading = "Connection",
        )]
        pub reconnect_min_delay: Option<Duration>,
        /// The longest reconnect delay. Default: `30s`.
        #[arg(
            long,
            env = "AGENT_RUNNER_RECONNECT_MAX_DELAY",
            value_name = "DUR",
            value_parser = parse_duration,
            help_heading = "Connection",
        )]
        pub reconnect_max_delay: Option<Duration>,
        /// The outbound HTTP proxy for every destination,
        /// `http://[user:pass@]host:port`: the ControlChannel tunnels through it
        /// with CONNECT, and agents' git and CLIs get it too (with credentials,
        /// through a forwarder of the runner's on 127.0.0.1 that adds them:
        /// agents never see them). Default: HTTPS_PROXY or HTTP_PROXY by
        /// scheme, with NO_PROXY exceptions.
        #[arg(long, env = "AGENT_RUNNER_PROXY", value_name = "URL", help_heading = "Connection")]
        pub proxy: Option<String>,
        /// Durable state: the SQLite database, the delivery journal, transcripts,
        /// the admin and credential sockets. Default: ~/.agent-runner/state.
        #[arg(
            long,
            env = "AGENT_RUNNER_STATE_DIR",
            value_name = "DIR",
            help_heading = "Directories and limits",
        )]
        pub state_dir: Option<PathBuf>,
        /// One directory per agent, one workspace per thread. Default:
        /// ~/.agent-runner/workspaces.
        #[arg(
            long,
            env = "AGENT_RUNNER_WORKSPACE_ROOT",
            value_name = "DIR",
            help_heading = "Directories and limits",
        )]
        pub workspace_root: Option<PathBuf>,
        /// Turns running at once; a message beyond it waits for a slot in the
        /// request queue (`--max-queued-requests`), first come first served
        /// (at least 1). Default: `256`.
        #[arg(
            long,
            env = "AGENT_RUNNER_MAX_CONCURRENT_TURNS",
            value_name = "N",
            help_heading = "Directories and limits",
        )]
        pub max_concurrent_turns: Option<usize>,
        /// Requests waiting at once, runner-wide (for all agents and threads,
        /// user messages waiting for a turn slot included); beyond it a
        /// request gets a RequestError; a waiting request costs a few hundred
        /// bytes (at least 1). Default: `10000`.
        #[arg(
            long,
            env = "AGENT_RUNNER_MAX_QUEUED_REQUESTS",
            value_name = "N",
            help_heading = "Directories and limits",
        )]
        pub max_queued_requests: Option<usize>,
        /// Updates kept for the control plane (queued, or sent and not yet
        /// settled) before intermediate ones are coalesced or dropped (at least
        /// 16). Default: `10000`.
        #[arg(
            long,
            env = "AGENT_RUNNER_OUTBOX_CAPACITY",
            value_name = "N",
            help_heading = "Directories and limits",
        )]
        pub outbox_capacity: Option<usize>,
        /// On SIGTERM, how long running turns may go on before they are
        /// interrupted. Default: `30s`.
        #[arg(
            long,
            env = "AGENT_RUNNER_DRAIN_TIMEOUT",
            value_name = "DUR",
            value_parser = parse_duration,
            help_heading = "Directories and limits",
        )]
        pub drain_timeout: Option<Duration>,
        /// With no turn running and no request (heartbeats aside) for this long,
        /// drain and exit 0 (scale-to-zero deployments; see docs/operating.md).
        /// Default: `0s` (never).
        #[arg(
            long,
            env = "AGENT_RUNNER_EXIT_WHEN_IDLE",
            value_name = "DUR",
            value_parser = parse_duration,
            help_heading = "Directories and limits",
        )]
        pub exit_when_idle: Option<Duration>,
        /// How long an agent's approval request or question waits for the
        /// control plane's decision (`approvals/1`) before it is denied
        /// (resolved as a timeout; at least 1ms). Default: `10m`.
        #[arg(
            long,
            env = "AGENT_RUNNER_APPROVAL_TIMEOUT",
            value_name = "DUR",
            value_parser = parse_duration,
            help_heading = "Directories and limits",
        )]
        pub approval_timeout: Option<Duration>,
        /// What the runner answers an agent's approval request itself when the
        /// control plane did not accept `approvals/1`: `deny` or `approve`
        /// (questions get no answer either way). Default: `deny`.
        #[arg(
            long,
            env = "AGENT_RUNNER_APPROVAL_POLICY",
            value_name = "POLICY",
            value_parser = parse_approval_policy,
            help_heading = "Directories and limits",
        )]
        pub approval_policy: Option<super::ApprovalPolicy>,
        /// The largest skill package (an InstallSkillsMpRequest's or a thread's),
        /// in bytes; a fetch is stopped as soon as what it wrote (`.git`
        /// included) is larger. Default: `16777216` (16 MiB).
        #[arg(
            long,
            env = "AGENT_RUNNER_SKILL_MAX_BYTES",
            value_name = "BYTES",
            help_heading = "Directories and limits",
        )]
        pub skill_max_bytes: Option<u64>,
        /// Where skill packages may come from (see `SkillArgs`).
        #[command(flatten)]
        pub skills: SkillArgs,
        /// An SDK adapter to enable: `scripted`, `codex`, `claude-code` or
        /// `code-agent` (what each needs installed: docs/sdks.md); repeatable,
        /// comma-separated in the variable. Default: every built-in SDK.
        #[arg(
            long = "sdk",
            env = "AGENT_RUNNER_SDK",
            value_name = "NAME",
            value_delimiter = ',',
            help_heading = "SDKs",
        )]
        pub sdk: Vec<String>,
        /// How often every SDK is probed again; a changed status or model list
        /// goes out as `agent_sdk_update`; `0s`: never. Default: `5m`.
        #[arg(
            long,
            env = "AGENT_RUNNER_SDK_PROBE_INTERVAL",
            value_name = "DUR",
            value_parser = parse_duration,
            help_heading = "SDKs",
        )]
        pub sdk_probe_interval: Option<Duration>,
        /// Settings of the codex and claude-code adapters (see `ExternalSdkArgs`).
        #[command(flatten)]
        pub external_sdks: ExternalSdkArgs,
        /// Settings of the code-agent adapter (see `CodeAgentArgs`).
        #[command(flatten)]
        pub code_agent: CodeAgentArgs,
        /// Where GitHub installation tokens come from (see `GithubArgs`).
        #[command(flatten)]
        pub github: GithubArgs,
        /// The agent sandbox (see `SandboxArgs`).
        #[command(flatten)]
        pub sandbox: SandboxArgs,
        /// Where /livez, /readyz, /metrics and /status listen: `IP:PORT`; port
        /// 0 picks a free one (logged); empty turns them off. If the default
        /// port is taken the runner warns and runs without them; a port set
        /// here that is taken is an error. Default: `127.0.0.1:9464`.
        #[arg(
            long,
            env = "AGENT_RUNNER_HEALTH_ADDR",
            value_name = "ADDR",
            help_heading = "Observability",
        )]
        pub health_addr: Option<String>,
        /// Log lines on stderr: readable `text` or one `json` object a line.
        /// Default: `text`.
        #[arg(
            long,
            env = "AGENT_RUNNER_LOG_FORMAT",
            value_name = "FORMAT",
            help_heading = "Observability",
        )]
        pub log_format: Option<LogFormat>,
        /// A log level or a tracing filter (`agent_runner=debug`). Default:
        /// `info`.
        #[arg(
            long,
            env = "AGENT_RUNNER_LOG_LEVEL",
            value_name = "LEVEL",
            help_heading = "Observability",
        )]
        pub log_level: Option<String>,
    }
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

pub(super) fn parse_approval_policy(text: &str) -> Result<super::ApprovalPolicy, String> {
    super::ApprovalPolicy::parse(text)
}

pub(super) fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e} (examples: 500ms, 30s, 2m)"))
}

/// The version of the control-plane protocol the runner speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, Deserialize)]
pub enum Protocol {
    /// 0.2.0 and this project's additions: agents and threads.
    #[default]
    #[value(name = "0.2")]
    #[serde(rename = "0.2")]
    V02,
    /// 0.7.0, thread-only: no agents, no GitHub RPCs, a `cli_secret` per thread.
    #[value(name = "0.7")]
    #[serde(rename = "0.7")]
    V07,
}

impl Protocol {
    /// The version as the operator writes it (`0.2`, `0.7`).
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::V02 => "0.2",
            Protocol::V07 => "0.7",
        }
    }
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
