//! What a mock control plane is started with: where it listens, how a runner
//! must address and authenticate to it (and which secrets name which runner,
//! when several serve at once), and the GitHub installations it hands out.

use std::fmt;
use std::net::SocketAddr;

use serde::Deserialize;

use crate::acks::AckMode;

/// Options for [`crate::MockControlPlane::start`]. `Default` is a plaintext,
/// unauthenticated server on `127.0.0.1:0` without a path prefix.
#[derive(Clone, Default)]
pub struct MockConfig {
    /// Address to bind; `None` means `127.0.0.1:0` (a free loopback port).
    pub listen: Option<SocketAddr>,
    /// Serve the service under this path, e.g. `"/grpc"`: the methods are then
    /// `/grpc/companyhelm.runner.v1.AgentRunnerControlService/...` and the
    /// unprefixed paths answer `UNIMPLEMENTED`. `None`, `""` and `"/"` mean no
    /// prefix.
    pub path_prefix: Option<String>,
    /// When set, every RPC must carry `authorization: Bearer <secret>`, else it
    /// fails with `UNAUTHENTICATED`. With [`MockConfig::runners`] as well,
    /// this secret is one more identity, named [`DEFAULT_RUNNER`].
    pub bearer_secret: Option<String>,
    /// Several runners at once, each known by its secret (as a real control
    /// plane knows a runner by its credentials): a call must carry one of
    /// these secrets (or `bearer_secret`), and it speaks for that runner
    /// only. Each runner has its own live stream (a new one replaces only
    /// that runner's), its own sequence numbers and acknowledgements, and
    /// its own view ([`crate::MockControlPlane::runner`]). Empty (default):
    /// one runner, [`DEFAULT_RUNNER`], whoever calls.
    pub runners: Vec<RunnerIdentity>,
    /// `(certificate chain PEM, private key PEM)`: serve TLS instead of
    /// plaintext; [`crate::MockControlPlane::url`] then starts with `https`.
    pub tls: Option<(String, String)>,
    /// Served by `ListGithubInstallationsForRunner` and
    /// `GetGithubInstallationAccessTokenForRunner`.
    pub github_installations: Vec<GithubInstallation>,
    /// Hold the ControlChannel's response headers until the first message
    /// to send, as grpc-go and Python grpcio servers do.
    pub delay_headers: bool,
    /// Acknowledged delivery: accept and acknowledge at once (default),
    /// late, never, or refuse the feature (a legacy control plane).
    pub ack_mode: AckMode,
    /// Forget what was processed when restarted (a control plane without
    /// durable state): the next registration answers `acked_sequence` 0.
    pub forget_acks_on_restart: bool,
    /// Time spent "processing" each received message before reading the
    /// next (a slow control plane, e.g. Python grpcio: what the runner sent
    /// piles up in HTTP/2 buffers, where a dropped connection loses it).
    /// Zero (default): read as fast as possible.
    pub read_delay: std::time::Duration,
    /// Which names the two GitHub RPCs are served under; the others answer
    /// `UNIMPLEMENTED`.
    pub github_rpc_names: GithubRpcNames,
    /// The protocol version served: 0.2 (default) or 0.7, thread-only
    /// ([`crate::versions`]).
    pub protocol: crate::versions::Protocol,
    /// The HTTP/2 receive window the mock grants each stream and each
    /// connection, in bytes: how much a runner may have on the wire before
    /// the mock has taken it in, and so how much an answer can wait behind.
    /// `None` (default): hyper's default, 1 MiB, as most Rust and Go
    /// control planes have it.
    pub stream_window: Option<u32>,
}

/// The name of the runner identity of an unnamed mock: the only one when no
/// [`MockConfig::runners`] are configured, and the one `bearer_secret`
/// names when they are.
pub const DEFAULT_RUNNER: &str = "default";

/// One runner a mock serving several tells apart by its bearer secret.
#[derive(Clone, PartialEq, Eq)]
pub struct RunnerIdentity {
    /// How tests and logs name it, e.g. `agent-runner-0` (the secret is
    /// never logged).
    pub name: String,
    /// The bearer secret it authenticates with.
    pub secret: String,
}

impl fmt::Debug for RunnerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunnerIdentity")
            .field("name", &self.name)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// The names a control plane may serve the two GitHub RPCs under (same
/// fields either way).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GithubRpcNames {
    /// `ListGithubInstallationsForRunner` and
    /// `GetGithubInstallationAccessTokenForRunner` (protocol 0.2.0).
    #[default]
    ForRunner,
    /// `ListGithubInstallations` and `GithubInstallationAccessToken` (the
    /// names of protocol 0.3.0–0.5.24).
    Later,
    /// Both pairs.
    Both,
}

impl GithubRpcNames {
    /// Whether the 0.2.0 names are served.
    pub fn serves_for_runner(self) -> bool {
        matches!(self, GithubRpcNames::ForRunner | GithubRpcNames::Both)
    }

    /// Whether the later names are served.
    pub fn serves_later(self) -> bool {
        matches!(self, GithubRpcNames::Later | GithubRpcNames::Both)
    }
}

impl std::str::FromStr for GithubRpcNames {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "for-runner" => Ok(GithubRpcNames::ForRunner),
            "later" => Ok(GithubRpcNames::Later),
            "both" => Ok(GithubRpcNames::Both),
            other => Err(format!(
                "unknown GitHub RPC names {other:?} (for-runner, later, both)"
            )),
        }
    }
}

impl MockConfig {
    /// Serve under `prefix` (see [`MockConfig::path_prefix`]).
    pub fn with_path_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.path_prefix = Some(prefix.into());
        self
    }

    /// Require `authorization: Bearer <secret>` on every RPC.
    pub fn with_bearer_secret(mut self, secret: impl Into<String>) -> Self {
        self.bearer_secret = Some(secret.into());
        self
    }

    /// Accept one more runner, `name`, authenticating with `secret` (see
    /// [`MockConfig::runners`]).
    pub fn with_runner(mut self, name: impl Into<String>, secret: impl Into<String>) -> Self {
        self.runners.push(RunnerIdentity {
            name: name.into(),
            secret: secret.into(),
        });
        self
    }

    /// Serve TLS with this PEM certificate chain and private key.
    pub fn with_tls(mut self, cert_pem: impl Into<String>, key_pem: impl Into<String>) -> Self {
        self.tls = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Bind this address instead of `127.0.0.1:0`.
    pub fn with_listen(mut self, addr: SocketAddr) -> Self {
        self.listen = Some(addr);
        self
    }

    /// Send the ControlChannel's response headers only with the first
    /// message (see [`MockConfig::delay_headers`]).
    pub fn with_delayed_headers(mut self) -> Self {
        self.delay_headers = true;
        self
    }

    /// Treat acknowledged delivery this way (see [`AckMode`]).
    pub fn with_ack_mode(mut self, mode: AckMode) -> Self {
        self.ack_mode = mode;
        self
    }

    /// Forget acknowledgements on restart (see
    /// [`MockConfig::forget_acks_on_restart`]).
    pub fn with_forgetful_restarts(mut self) -> Self {
        self.forget_acks_on_restart = true;
        self
    }

    /// Serve the GitHub RPCs under `names` (see [`GithubRpcNames`]).
    pub fn with_github_rpc_names(mut self, names: GithubRpcNames) -> Self {
        self.github_rpc_names = names;
        self
    }

    /// Spend `delay` on each received message (see
    /// [`MockConfig::read_delay`]).
    pub fn with_read_delay(mut self, delay: std::time::Duration) -> Self {
        self.read_delay = delay;
        self
    }

    /// Grant `bytes` of HTTP/2 receive window per stream and connection
    /// (see [`MockConfig::stream_window`]).
    pub fn with_stream_window(mut self, bytes: u32) -> Self {
        self.stream_window = Some(bytes);
        self
    }

    /// Add one GitHub installation to serve.
    pub fn with_github_installation(mut self, installation: GithubInstallation) -> Self {
        self.github_installations.push(installation);
        self
    }
}

impl fmt::Debug for MockConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockConfig")
            .field("listen", &self.listen)
            .field("path_prefix", &self.path_prefix)
            .field(
                "bearer_secret",
                &self.bearer_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("runners", &self.runners)
            .field("tls", &self.tls.as_ref().map(|_| "<pem>"))
            .field("github_installations", &self.github_installations)
            .field("delay_headers", &self.delay_headers)
            .field("ack_mode", &self.ack_mode)
            .field("forget_acks_on_restart", &self.forget_acks_on_restart)
            .field("github_rpc_names", &self.github_rpc_names)
            .field("read_delay", &self.read_delay)
            .field("stream_window", &self.stream_window)
            .finish()
    }
}

/// One GitHub App installation the mock links to the runner. In files (the
/// binary's `--github-installations`) the keys are camelCase or snake_case:
/// `installationId`, `accessToken`, `expiresUnixMs`, `repositories`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GithubInstallation {
    /// The installation the token is for.
    #[serde(alias = "installation_id")]
    pub installation_id: i64,
    /// The token handed out.
    #[serde(alias = "access_token")]
    pub access_token: String,
    /// When it expires (Unix milliseconds).
    #[serde(alias = "expires_unix_ms", default)]
    pub expires_unix_ms: i64,
    /// The repositories it covers (`owner/name`).
    #[serde(default)]
    pub repositories: Vec<String>,
}

impl fmt::Debug for GithubInstallation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GithubInstallation")
            .field("installation_id", &self.installation_id)
            .field("access_token", &"<redacted>")
            .field("expires_unix_ms", &self.expires_unix_ms)
            .field("repositories", &self.repositories)
            .finish()
    }
}
