//! The `codex` SDK: drives OpenAI's `codex app-server` (newline-delimited
//! JSON-RPC on stdio; wire shapes as of `@openai/codex` 0.169.0, checked
//! against `codex app-server generate-json-schema` and a live app-server).
//!
//! How a runner thread maps onto codex:
//! - One app-server process per thread, in the thread's workspace, with the
//!   thread's `ThreadSpec::env` in its environment, started
//!   by `create_thread` (`initialize`, `initialized`, `thread/start` with
//!   model, cwd, approval policy and sandbox from [`CodexConfig`], and the
//!   thread's additional instructions as `developerInstructions`, its MCP
//!   servers as `config` overrides `mcp_servers.<name>`, module `mcp`). Codex's
//!   thread id is the runner's `sdk_thread_id`.
//! - Re-opening a thread (after a runner restart) starts nothing; the first
//!   turn starts a process and `thread/resume`s it. So does the first turn
//!   after the process crashed or was killed. A codex thread that never ran
//!   a turn has nothing on disk to resume ("no rollout found"); it is started
//!   afresh instead and the new id used from then on.
//! - A turn is `turn/start` (the message, and the model/effort for this turn:
//!   an override, else the thread's own); its notifications become
//!   [`TurnEvent`](sdk_adapter::TurnEvent)s (module `turn`); steering is
//!   `turn/steer` with `expectedTurnId`, interrupt `turn/interrupt` (module
//!   `control`). Codex applies a model/effort to later turns too, which is
//!   why every turn names its model.
//! - Server-to-client requests are answered at once by policy (module
//!   `approvals`).
//! - `delete_thread`, `delete_agent` and dropping the adapter kill the
//!   process trees.

mod approvals;
mod config;
mod control;
mod describe;
mod items;
mod login;
mod mcp;
mod rpc;
mod server;

pub use server::operator_codex_home;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing;
mod turn;

use std::sync::Arc;

use sdk_process::{ThreadTable, TurnInbox};

use async_trait::async_trait;
use sdk_adapter::{
    AgentSpec, Login, LoginStarted, SdkAdapter, SdkDescription, SdkError, TURN_EVENT_BUFFER,
    ThreadHandle, ThreadSpec, Turn, TurnInput,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;

pub use config::{
    APPROVAL_POLICIES, CodexConfig, SANDBOX_MODES, check_approval_policy, check_sandbox,
};

use crate::control::{CodexControl, text_input};
use crate::describe::Describer;
use crate::rpc::RpcError;
use crate::server::{AppServer, StartError};
use crate::turn::TurnTask;

/// The SDK's name on the wire.
pub const SDK_NAME: &str = "codex";

/// The `codex` adapter.
pub struct CodexAdapter {
    config: CodexConfig,
    describer: Describer,
    threads: ThreadTable<Slot>,
}

/// One runner thread.
struct Slot {
    state: tokio::sync::Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    /// Codex's thread id, once known.
    codex_thread: Option<String>,
    server: Option<AppServer>,
}

impl CodexAdapter {
    /// The codex SDK with `config`.
    pub fn new(config: CodexConfig) -> Self {
        Self {
            config,
            describer: Describer::default(),
            threads: ThreadTable::new(),
        }
    }

    /// Its settings.
    pub fn config(&self) -> &CodexConfig {
        &self.config
    }

    fn slot(&self, spec: &ThreadSpec) -> Arc<Slot> {
        let made = self
            .threads
            .get_or_try_insert(&spec.thread_id, &spec.agent_id, || {
                Ok::<_, std::convert::Infallible>(Slot {
                    state: tokio::sync::Mutex::new(SlotState {
                        codex_thread: spec.sdk_thread_id.as_deref().map(str::to_owned),
                        server: None,
                    }),
                })
            });
        match made {
            Ok(slot) => slot,
            Err(never) => match never {},
        }
    }

    /// `thread/start` / `thread/resume` parameters for `spec`.
    fn thread_params(&self, spec: &ThreadSpec) -> Value {
        // Codex wants an absolute cwd.
        let cwd = std::path::absolute(&spec.workspace).unwrap_or_else(|_| spec.workspace.clone());
        let mut params = json!({
            "model": spec.model,
            "cwd": cwd.to_string_lossy(),
        });
        if let Some(policy) = &self.config.approval_policy {
            params["approvalPolicy"] = json!(policy);
        }
        if let Some(sandbox) = &self.config.sandbox {
            params["sandbox"] = json!(sandbox);
        }
        // Codex adds developer instructions to its own for every turn of
        // the thread; given again on resume, so they survive a restart.
        if let Some(instructions) = &spec.instructions {
            params["developerInstructions"] = json!(instructions);
        }
        // The thread's MCP servers, for this thread only (module `mcp`);
        // given again on resume, like the instructions.
        if !spec.mcp_servers.is_empty() {
            params["config"] = Value::Object(mcp::overrides(&spec.mcp_servers).0);
        }
        params
    }

    /// A live, initialized app-server for the slot, with its codex thread
    /// loaded (started, or resumed).
    async fn ensure_server(
        &self,
        spec: &ThreadSpec,
        state: &mut SlotState,
    ) -> Result<(), SdkError> {
        if state.server.as_ref().is_some_and(AppServer::is_alive) {
            return Ok(());
        }
        state.server = None;
        spec.create_workspace().await?;
        let label = format!("codex app-server (thread {})", spec.thread_id);
        let sandbox = spec.sandbox.get()?;
        // The MCP servers' secrets, named by the thread's `config` overrides.
        let mut env = spec.env.clone();
        env.extend(mcp::overrides(&spec.mcp_servers).1);
        let server = AppServer::start(
            &self.config,
            label,
            Some(&spec.workspace),
            &env,
            sandbox,
            self.config.request_timeout,
        )
        .await
        .map_err(start_error)?;
        let thread_id = match state.codex_thread.clone() {
            Some(codex_thread) => self.resume(&server, spec, codex_thread).await?,
            None => self.start_thread(&server, spec).await?,
        };
        state.codex_thread = Some(thread_id);
        state.server = Some(server);
        Ok(())
    }

    async fn start_thread(
        &self,
        server: &AppServer,
        spec: &ThreadSpec,
    ) -> Result<String, SdkError> {
        let result = server
            .rpc()
            .call("thread/start", self.thread_params(spec))
            .await
            .map_err(rpc_error)?;
        thread_id_of(&result)
    }

    async fn resume(
        &self,
        server: &AppServer,
        spec: &ThreadSpec,
        codex_thread: String,
    ) -> Result<String, SdkError> {
        let mut params = self.thread_params(spec);
        params["threadId"] = json!(codex_thread);
        params["excludeTurns"] = json!(true);
        match server.rpc().call("thread/resume", params).await {
            Ok(result) => thread_id_of(&result),
            Err(e)
                if e.server_message()
                    .is_some_and(|m| m.contains("no rollout found")) =>
            {
                tracing::info!(
                    thread_id = %spec.thread_id,
                    codex_thread = %codex_thread,
                    "codex thread never ran a turn, so there is nothing to resume; starting it afresh"
                );
                self.start_thread(server, spec).await
            }
            Err(e) => Err(rpc_error(e)),
        }
    }
}

impl Drop for CodexAdapter {
    fn drop(&mut self) {
        // Each slot's server kills its process tree as it drops; a slot
        // still borrowed by a running call is killed here explicitly.
        for slot in self.threads.all() {
            if let Ok(mut state) = slot.state.try_lock() {
                state.server = None;
            }
        }
    }
}

#[async_trait]
impl SdkAdapter for CodexAdapter {
    fn name(&self) -> &str {
        SDK_NAME
    }

    async fn describe(&self) -> SdkDescription {
        self.describer.describe(&self.config).await
    }

    fn known(&self) -> Option<SdkDescription> {
        self.describer.known(&self.config)
    }

    async fn login(&self, login: Login) -> Result<LoginStarted, SdkError> {
        let started = match login {
            Login::ApiKey(key) => login::api_key(&self.config, &key).await,
            Login::DeviceCode => login::device_code(&self.config).await,
        };
        // Whatever happened, the next description asks codex again.
        self.describer.forget().await;
        started
    }

    async fn describe_fresh(&self) -> SdkDescription {
        self.describer.forget().await;
        self.describer.describe(&self.config).await
    }

    async fn create_agent(&self, _agent: &AgentSpec) -> Result<(), SdkError> {
        Ok(())
    }

    async fn delete_agent(&self, agent_id: &str) -> Result<(), SdkError> {
        let slots = self.threads.remove_agent(agent_id);
        for slot in slots {
            slot.state.lock().await.server = None;
        }
        Ok(())
    }

    /// A new thread starts its app-server and `thread/start`s; a re-opened
    /// one (`sdk_thread_id` set) only records the id.
    async fn create_thread(&self, spec: &ThreadSpec) -> Result<ThreadHandle, SdkError> {
        let slot = self.slot(spec);
        let mut state = slot.state.lock().await;
        if let Some(known) = spec.sdk_thread_id.as_deref() {
            state.codex_thread.get_or_insert_with(|| known.to_owned());
            return Ok(ThreadHandle {
                sdk_thread_id: known.to_owned(),
            });
        }
        let result = self.ensure_server(spec, &mut state).await;
        if let Err(e) = result {
            drop(state);
            self.threads.remove(&spec.thread_id);
            return Err(e);
        }
        let sdk_thread_id = state
            .codex_thread
            .clone()
            .ok_or_else(|| SdkError::Failed("codex returned no thread id".into()))?;
        Ok(ThreadHandle { sdk_thread_id })
    }

    async fn delete_thread(&self, spec: &ThreadSpec) -> Result<(), SdkError> {
        let slot = self.threads.remove(&spec.thread_id);
        if let Some(slot) = slot {
            slot.state.lock().await.server = None;
        }
        Ok(())
    }

    async fn start_turn(&self, spec: &ThreadSpec, input: TurnInput) -> Result<Turn, SdkError> {
        let slot = self.slot(spec);
        let mut state = slot.state.lock().await;
        let effort = input.reasoning_level.as_deref();
        let mut retried = false;
        let (rpc, sink, sink_id, sink_tx, msgs, codex_thread, result) = loop {
            self.ensure_server(spec, &mut state).await?;
            let server = state
                .server
                .as_ref()
                .ok_or_else(|| SdkError::Failed("codex app-server vanished".into()))?;
            let codex_thread = state
                .codex_thread
                .clone()
                .ok_or_else(|| SdkError::Failed("codex thread id unknown".into()))?;
            let mut params = json!({
                "threadId": codex_thread,
                "input": text_input(&input.text),
                "model": input.model,
            });
            if let Some(effort) = effort {
                params["effort"] = json!(effort);
            }
            let sink = server.sink().clone();
            let (sink_id, sink_tx, msgs) = sink.install();
            let rpc = server.rpc().clone();
            match rpc.call("turn/start", params).await {
                Ok(result) => break (rpc, sink, sink_id, sink_tx, msgs, codex_thread, result),
                Err(e) => {
                    sink.clear(sink_id);
                    if !e.is_transport() {
                        return Err(rpc_error(e));
                    }
                    state.server = None;
                    // It died between turns (and we only just noticed):
                    // start it again, once.
                    if retried || !rpc.handle().is_gone() {
                        return Err(rpc_error(e));
                    }
                    retried = true;
                    tracing::info!(thread_id = %spec.thread_id, error = %e, "codex app-server went away before the turn started; starting it again");
                }
            }
        };
        let Some(turn_id) = result
            .get("turn")
            .and_then(|t| t.get("id"))
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            sink.clear(sink_id);
            return Err(SdkError::Failed("turn/start returned no turn id".into()));
        };
        let (events, receiver) = mpsc::channel(TURN_EVENT_BUFFER);
        let control = Arc::new(CodexControl::new(
            rpc.clone(),
            codex_thread,
            turn_id.clone(),
            sink_tx,
        ));
        let task = TurnTask {
            turn_id: turn_id.clone(),
            events,
            inbox: TurnInbox::new(
                turn_id.clone(),
                "codex app-server",
                rpc.handle().clone(),
                (sink, sink_id, msgs),
                self.config.interrupt_grace,
            ),
            control: control.clone(),
            coalesce: self.config.coalesce,
        };
        tokio::spawn(task.run());
        Ok(Turn {
            sdk_turn_id: turn_id,
            events: receiver,
            control,
        })
    }
}

fn thread_id_of(result: &Value) -> Result<String, SdkError> {
    result
        .get("thread")
        .and_then(|t| t.get("id"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| SdkError::Failed("codex returned no thread id".into()))
}

fn start_error(e: StartError) -> SdkError {
    match e {
        StartError::Spawn(e @ sdk_process::ChildError::NotFound { .. }) => {
            SdkError::Unavailable(e.to_string())
        }
        StartError::Spawn(e) => SdkError::Unavailable(e.to_string()),
        StartError::Rpc(e) => SdkError::Unavailable(format!("codex app-server did not start: {e}")),
    }
}

fn rpc_error(e: RpcError) -> SdkError {
    match e {
        RpcError::Server { .. } => SdkError::Failed(format!("codex: {e}")),
        RpcError::Child { .. } => SdkError::Failed(format!("codex app-server: {e}")),
    }
}
