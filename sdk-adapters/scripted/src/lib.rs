//! The deterministic `scripted` SDK (docs/protocol.md, "The scripted language"): tests, demos and outside
//! harnesses drive the whole runner with it, no LLM involved.
//!
//! A user message is a script, one step per non-blank line:
//!
//! | line | what happens |
//! |---|---|
//! | `say TEXT` | an `AgentMessage` item with TEXT |
//! | `think TEXT` | a `Reasoning` item with TEXT |
//! | `run COMMAND` | a `CommandExecution` item; `sh -c COMMAND` really runs in the thread's workspace, started through the thread's sandbox (`ThreadSpec::sandbox`), with the thread's `ThreadSpec::env` added to its environment |
//! | `sleep MS` | waits MS milliseconds; an interrupt cuts it short |
//! | `usage INPUT OUTPUT` | a [`TurnEvent::Usage`](sdk_adapter::TurnEvent::Usage) |
//! | `fail TEXT` | the turn ends `Failed(TEXT)` |
//! | `name TEXT` | a [`TurnEvent::ThreadNamed`](sdk_adapter::TurnEvent::ThreadNamed) with TEXT: the thread's name becomes TEXT |
//! | `instructions` (the whole line) | an `AgentMessage` item with the thread's `ThreadSpec::instructions` (`(no instructions)` when none): the scripted SDK's "model" is given them for every turn |
//! | `mcp SERVER TOOL [JSON]` | an `McpToolCall` item `SERVER/TOOL JSON` (RUNNING), then the same plus a line with the tool's text result, or `error: …` (COMPLETED): TOOL of the thread's MCP server SERVER (`ThreadSpec::mcp_servers`) really called through the MCP client (`mcp-client`; a stdio server started through the thread's sandbox), arguments the JSON object (default `{}`). The turn goes on either way; an interrupt cuts the call short. A server is connected on its first call in a turn and closed when the turn ends |
//! | anything else | an `AgentMessage` item `echo: ` + the line |
//!
//! Where the contract leaves room, this crate decides (each module documents
//! its part):
//! - Keywords need one space and a non-blank argument after them; a bare
//!   `say` is "anything else" (`echo: say`). A malformed `sleep`/`usage`
//!   fails the turn when it is reached, naming its line (module `script`).
//! - `usage` totals are cumulative over the turn, not the thread (module
//!   `turn`).
//! - A steering message joins right after the step in progress, before the
//!   steps still waiting (module `plan`); `steer` never accepts a text that
//!   will not run because the turn finished (module `control`).
//! - `run` keeps at most [`OUTPUT_CAP_BYTES`] of output, kills the command's
//!   whole process group on interrupt, and kills whatever the command left
//!   running when its shell exits (module `command`).

mod command;
mod control;
mod mcp;
mod plan;
mod script;
mod turn;

use async_trait::async_trait;
use sdk_adapter::{
    AgentSpec, ModelInfo, SdkAdapter, SdkDescription, SdkError, SdkStatus, ThreadHandle,
    ThreadSpec, Turn, TurnInput,
};

pub use sdk_adapter::cap::{OUTPUT_CAP_BYTES, WORD_TAIL};

/// The SDK's name on the wire.
pub const SDK_NAME: &str = "scripted";
/// The model with reasoning levels `low` and `high`.
pub const MODEL_FAST: &str = "scripted-fast";
/// The model with only its default level.
pub const MODEL_SLOW: &str = "scripted-slow";

/// The `scripted` adapter. It holds no state: every turn is self-contained.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScriptedAdapter;

impl ScriptedAdapter {
    /// The scripted SDK (no configuration: it is always ready).
    pub fn new() -> Self {
        Self
    }

    /// The models this SDK advertises.
    pub fn models() -> Vec<ModelInfo> {
        vec![
            ModelInfo::new(MODEL_FAST, &["low", "high"]),
            ModelInfo::new(MODEL_SLOW, &[]),
        ]
    }
}

/// Always ready, always the same models.
fn description() -> SdkDescription {
    SdkDescription {
        name: SDK_NAME.to_owned(),
        status: SdkStatus::Ready,
        error_message: None,
        models: ScriptedAdapter::models(),
    }
}

#[async_trait]
impl SdkAdapter for ScriptedAdapter {
    fn name(&self) -> &str {
        SDK_NAME
    }

    async fn describe(&self) -> SdkDescription {
        description()
    }

    fn known(&self) -> Option<SdkDescription> {
        Some(description())
    }

    async fn create_agent(&self, _agent: &AgentSpec) -> Result<(), SdkError> {
        Ok(())
    }

    async fn delete_agent(&self, _agent_id: &str) -> Result<(), SdkError> {
        Ok(())
    }

    /// Checks model and level, creates the workspace if missing, and returns
    /// `spec.sdk_thread_id` when re-opening, else a fresh `thread-<uuid>`.
    async fn create_thread(&self, spec: &ThreadSpec) -> Result<ThreadHandle, SdkError> {
        check_model(&spec.model, spec.reasoning_level.as_deref())?;
        spec.create_workspace().await?;
        let sdk_thread_id = match spec.sdk_thread_id.as_deref() {
            Some(id) => id.to_owned(),
            None => format!("thread-{}", uuid::Uuid::new_v4()),
        };
        Ok(ThreadHandle { sdk_thread_id })
    }

    /// Nothing to release; the workspace belongs to the runner core.
    async fn delete_thread(&self, _spec: &ThreadSpec) -> Result<(), SdkError> {
        Ok(())
    }

    /// Checks the turn's model and level (the runner resolved them; an SDK
    /// still refuses what it does not run).
    async fn start_turn(&self, spec: &ThreadSpec, input: TurnInput) -> Result<Turn, SdkError> {
        check_model(&input.model, input.reasoning_level.as_deref())?;
        Ok(turn::start(
            spec.workspace.clone(),
            spec.env.clone(),
            spec.sandbox.clone(),
            spec.instructions.clone(),
            spec.mcp_servers.clone(),
            input.text,
        ))
    }
}

/// `model` must be advertised, and `level` (when given) advertised for it.
fn check_model(model: &str, level: Option<&str>) -> Result<(), SdkError> {
    let models = ScriptedAdapter::models();
    let Some(info) = models.iter().find(|m| m.name == model) else {
        let names: Vec<&str> = models.iter().map(|m| m.name.as_str()).collect();
        return Err(SdkError::InvalidRequest(format!(
            "the scripted SDK has no model `{model}` (it offers: {})",
            names.join(", ")
        )));
    };
    if let Some(level) = level
        && !info.reasoning_levels.iter().any(|l| l == level)
    {
        let offered = if info.reasoning_levels.is_empty() {
            "none".to_owned()
        } else {
            info.reasoning_levels.join(", ")
        };
        return Err(SdkError::InvalidRequest(format!(
            "model `{model}` has no reasoning level `{level}` (it offers: {offered})"
        )));
    }
    Ok(())
}
