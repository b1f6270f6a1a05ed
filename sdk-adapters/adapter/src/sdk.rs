//! The adapter trait and the values that cross it.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::TurnEvent;

/// How many events a turn may buffer before the adapter must wait for the
/// runner to take them (backpressure, never loss).
pub const TURN_EVENT_BUFFER: usize = 256;

/// Whether an SDK can take work right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SdkStatus {
    /// Configured and able to run turns.
    Ready,
    /// Present but missing configuration (binary absent, no credentials…).
    Unconfigured,
    /// Configured but failing.
    Error,
}

/// A model an SDK offers, with the reasoning levels it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelInfo {
    /// The model's name, as turns and threads name it.
    pub name: String,
    /// Empty means the model only has its default level.
    pub reasoning_levels: Vec<String>,
}

impl ModelInfo {
    /// A model `name` accepting `levels` (empty: its default level only).
    pub fn new(name: &str, levels: &[&str]) -> Self {
        Self {
            name: name.to_owned(),
            reasoning_levels: levels.iter().map(|l| (*l).to_owned()).collect(),
        }
    }
}

/// What registration advertises for one SDK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdkDescription {
    /// The SDK's name (`scripted`, `codex`, …), as agents name it.
    pub name: String,
    /// Whether it can take work.
    pub status: SdkStatus,
    /// Why the SDK is not ready.
    pub error_message: Option<String>,
    /// The models it offers.
    pub models: Vec<ModelInfo>,
}

/// An agent as the adapter sees it.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    /// The agent's id (path-safe: the runner checked it).
    pub agent_id: String,
    /// The agent's home directory (skills live under `.agents/skills/`).
    pub home: PathBuf,
}

/// A thread to create, or to re-open after a restart.
#[derive(Debug, Clone)]
pub struct ThreadSpec {
    /// The owning agent's id.
    pub agent_id: String,
    /// The thread's id (path-safe: the runner checked it).
    pub thread_id: String,
    /// The thread's own workspace; commands run here.
    pub workspace: PathBuf,
    /// The thread's model.
    pub model: String,
    /// The thread's reasoning level (`None`: the model's default; never an
    /// empty string).
    pub reasoning_level: Option<String>,
    /// The SDK's own id from an earlier `create_thread`, when re-opening
    /// (never an empty string).
    pub sdk_thread_id: Option<String>,
    /// Extra environment for every process the thread's agent starts
    /// (e.g. the runner's `GIT_CONFIG_*` credential-helper settings).
    /// Adapters add it on top of their own environment.
    pub env: Vec<(String, String)>,
    /// The thread's sandbox: every process started for the thread (a
    /// command, an agent CLI and what it runs) is launched through it, so
    /// it is confined to the thread's workspace, HOME and TMPDIR and killed
    /// with the thread. Its HOME and TMPDIR are the thread's.
    pub sandbox: crate::Sandbox,
    /// Instructions the control plane adds to the SDK's own system or
    /// developer prompt for every turn of the thread
    /// (`CreateThreadRequest.additional_model_instructions`; never an empty
    /// string). Each adapter documents where they go.
    pub instructions: Option<String>,
    /// The thread's MCP servers (`CreateThreadRequest.mcp_servers`). The
    /// runner keeps them in memory only (their secrets are never written
    /// to its state): a thread re-opened after a runner restart has none.
    pub mcp_servers: Arc<[crate::McpServer]>,
}

impl ThreadSpec {
    /// Create the thread's workspace if it is missing.
    pub async fn create_workspace(&self) -> Result<(), SdkError> {
        tokio::fs::create_dir_all(&self.workspace)
            .await
            .map_err(|e| {
                SdkError::Failed(format!(
                    "cannot create workspace {}: {e}",
                    self.workspace.display()
                ))
            })
    }
}

/// How the control plane asks an SDK to log in (`CodexConfigurationRequest`).
pub enum Login {
    /// Log in with this API key. A secret: adapters never log it, never put
    /// it on a command line, and keep it out of their error texts.
    ApiKey(String),
    /// Start a device-code login: a person enters a code on a web page.
    DeviceCode,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Login::ApiKey(_) => f.write_str("ApiKey(<redacted>)"),
            Login::DeviceCode => f.write_str("DeviceCode"),
        }
    }
}

/// A login that started.
#[derive(Debug)]
pub enum LoginStarted {
    /// Done: the SDK is logged in.
    Done,
    /// A device-code login waits for a person.
    DeviceCode {
        /// The code the person enters.
        user_code: String,
        /// Where they enter it.
        verification_url: String,
        /// Resolves when the login completes (`Ok`) or fails (the reason).
        completion: tokio::sync::oneshot::Receiver<Result<(), String>>,
    },
}

/// What the runner stores about a created thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadHandle {
    /// The SDK's id for the thread (persisted; passed back on re-open).
    pub sdk_thread_id: String,
}

/// One user message that starts a turn.
#[derive(Debug, Clone)]
pub struct TurnInput {
    /// The user's message.
    pub text: String,
    /// The model this turn runs with (the runner resolved the message's
    /// override against the thread's model).
    pub model: String,
    /// The reasoning level this turn runs at; `None`: the model's default.
    pub reasoning_level: Option<String>,
}

/// A started turn.
pub struct Turn {
    /// The SDK's id for the turn.
    pub sdk_turn_id: String,
    /// Events until [`TurnEvent::Finished`]; bounded by [`TURN_EVENT_BUFFER`].
    pub events: mpsc::Receiver<TurnEvent>,
    /// Steers and interrupts the turn while it runs.
    pub control: Arc<dyn TurnControl>,
}

/// Steering and interruption of a running turn.
#[async_trait]
pub trait TurnControl: Send + Sync {
    /// Deliver `text` into the running turn. On success the adapter emits
    /// [`TurnEvent::Steered`] with `tag` where the text joins the turn.
    async fn steer(&self, text: String, tag: u64) -> Result<(), SteerError>;
    /// Ask the turn to stop. Returns at once; the turn ends with
    /// [`TurnEvent::Finished`] (`Interrupted`) soon after. Idempotent.
    fn interrupt(&self);
}

/// Why a steer was not delivered.
#[derive(Debug, thiserror::Error)]
pub enum SteerError {
    /// The turn finished before the text could join it.
    #[error("the turn already ended")]
    TurnEnded,
    /// The SDK cannot steer, or refused this text.
    #[error("{0}")]
    Rejected(String),
}

/// An adapter failure; its text reaches the control plane in a `RequestError`.
#[derive(Debug, thiserror::Error)]
pub enum SdkError {
    /// The request is wrong for this SDK (unknown model, bad option…).
    #[error("{0}")]
    InvalidRequest(String),
    /// The SDK is not configured or not reachable.
    #[error("sdk unavailable: {0}")]
    Unavailable(String),
    /// The SDK failed.
    #[error("{0}")]
    Failed(String),
}

/// One agent SDK the runner can drive.
#[async_trait]
pub trait SdkAdapter: Send + Sync + 'static {
    /// The SDK's name on the wire (`scripted`, `code-agent`, `codex`…).
    fn name(&self) -> &str;
    /// Current status and models, probing whatever that takes (a CLI
    /// started, an engine asked).
    async fn describe(&self) -> SdkDescription;
    /// What can be said at once, without starting or asking anything slow
    /// (a cached answer, a binary that is not there, a fixed model list);
    /// `None` when only [`SdkAdapter::describe`] can tell. Registration
    /// advertises this and sends an `agent_sdk_update` when the slow
    /// description arrives. Default: `None`.
    fn known(&self) -> Option<SdkDescription> {
        None
    }
    /// Like [`SdkAdapter::describe`], but never from a cache: the runner's
    /// periodic re-probe and its checks after a login call this. The
    /// default is `describe` (for adapters that cache nothing).
    async fn describe_fresh(&self) -> SdkDescription {
        self.describe().await
    }
    /// Log the SDK in on the control plane's behalf. Default: this SDK has
    /// no login the runner can drive.
    async fn login(&self, login: Login) -> Result<LoginStarted, SdkError> {
        let _ = login;
        Err(SdkError::InvalidRequest(format!(
            "the {} SDK cannot be logged in by the runner",
            self.name()
        )))
    }
    /// Prepare an agent. Called again for known agents after a restart.
    async fn create_agent(&self, agent: &AgentSpec) -> Result<(), SdkError>;
    /// Release everything the SDK holds for the agent.
    async fn delete_agent(&self, agent_id: &str) -> Result<(), SdkError>;
    /// Create a thread, or re-open one when `spec.sdk_thread_id` is set.
    async fn create_thread(&self, spec: &ThreadSpec) -> Result<ThreadHandle, SdkError>;
    /// Release the SDK's resources for a thread (its turn is already over).
    async fn delete_thread(&self, spec: &ThreadSpec) -> Result<(), SdkError>;
    /// Start a turn on a thread that has none running.
    async fn start_turn(&self, spec: &ThreadSpec, input: TurnInput) -> Result<Turn, SdkError>;
}
