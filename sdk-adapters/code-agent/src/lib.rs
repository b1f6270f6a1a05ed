//! The `code-agent` SDK: drives an `a3s.code.agent.v1.CodeAgentService`
//! through its gRPC API only, whether the engine is embedded in the runner
//! (the default: `code_agent_engine` served over in-memory pipes, no port)
//! or remote (`CodeAgentConfig::endpoint`, any server of that interface).
//! One code path for both (module `connect`).
//!
//! How a runner thread maps onto the service:
//! - `create_thread` ⇒ `Initialize{workspace, env}` (the engine gives the
//!   thread's env to its tool processes; the embedded engine is also handed
//!   the thread's sandbox, in which alone its `bash` runs) and a FILE session whose id is the
//!   thread id (so it survives restarts; re-opening finds it with
//!   `GetSession`, else creates it again). The session id is the runner's
//!   `sdk_thread_id`. The thread's additional instructions follow the
//!   engine's default system prompt in the session's `system_prompt`.
//! - The first turn of a session this adapter created names the thread
//!   with a title derived from its message (module `title`).
//! - A turn is `StreamGenerate` with the user's text (metadata
//!   `reasoning_effort` when a level applies); its chunks become
//!   [`TurnEvent`](sdk_adapter::TurnEvent)s (module `turn`, tool calls via
//!   module `tools`). A turn on another model than the session's first
//!   `ConfigureSession`s it (every turn names its model, so an override
//!   lasts one turn).
//! - Steering is a second `StreamGenerate` with metadata `steer = "true"`;
//!   interrupt is `Cancel` (module `control`).
//! - `delete_thread` ⇒ `DestroySession`; `delete_agent` does it for each
//!   of the agent's threads this adapter knows.
//! - Confirmations: every session gets a confirmation policy naming the
//!   tools that need approval (`approve_tools`), and every turn follows its
//!   session's `CONFIRMATION_REQUIRED` events, asking the runner and
//!   answering with `ConfirmToolExecution` (module `approvals`).
//! - `describe` ⇒ `ListProviders` (module `describe`); before the embedded
//!   engine is started, registration reads the same provider store without
//!   starting it (`known`), so the engine starts with the first thread.

mod approvals;
mod config;
mod connect;
mod control;
mod describe;
mod mcp;
mod title;
mod tools;
mod turn;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use code_agent_proto::code_agent_service_server::{CodeAgentService, CodeAgentServiceServer};
use code_agent_proto::{
    ConfigureSessionRequest, CreateSessionRequest, DestroySessionRequest, GenerateRequest,
    GetSessionRequest, InitializeRequest, LlmConfig, SessionConfig, StorageType,
};
use sdk_adapter::{
    AgentSpec, SdkAdapter, SdkDescription, SdkError, SdkStatus, TURN_EVENT_BUFFER, ThreadHandle,
    ThreadSpec, TokenUsageBreakdown, Turn, TurnInput,
};
use sdk_process::ThreadTable;
use tokio::sync::{OnceCell, mpsc};
use tonic::Code;

pub use config::{AuthToken, CodeAgentConfig, check_endpoint};
pub use connect::{InMemoryClient, in_memory_client};

use crate::connect::{Backend, Client};
use crate::control::{CodeAgentControl, TURN_MSG_BUFFER, user_message};
use crate::turn::TurnTask;

/// The SDK's name on the wire.
pub const SDK_NAME: &str = "code-agent";

/// How long a steer may wait for the engine's next step boundary (a tool
/// call in progress, such as a long `bash`, delays it).
const STEER_TIMEOUT: Duration = Duration::from_secs(600);

/// The `code-agent` adapter.
pub struct CodeAgentAdapter {
    config: CodeAgentConfig,
    backend: OnceCell<Backend>,
    threads: ThreadTable<Slot>,
    /// Each advertised model's context window, from the last `describe`.
    context_windows: Mutex<HashMap<String, i64>>,
}

/// One runner thread.
#[derive(Default)]
struct Slot {
    state: tokio::sync::Mutex<SlotState>,
    /// The thread's token usage since this adapter started.
    usage: Arc<Mutex<TokenUsageBreakdown>>,
}

#[derive(Default)]
struct SlotState {
    /// The session exists in the engine (created or found) and the thread's
    /// env is registered.
    ready: bool,
    /// The model the session is configured with, once known.
    model: Option<String>,
    /// The session, once ensured.
    session_id: Option<String>,
    /// This adapter created the session and no turn has run on it yet: the
    /// next turn names the thread (module `title`).
    unnamed: bool,
}

/// A status as one line for users: the engine's message and the code.
pub(crate) fn status_text(status: &tonic::Status) -> String {
    let message = status.message();
    if message.is_empty() {
        format!("{:?}", status.code())
    } else {
        format!("{message} ({:?})", status.code())
    }
}

fn sdk_error(what: &str, status: &tonic::Status) -> SdkError {
    let text = format!("code-agent {what}: {}", status_text(status));
    match status.code() {
        Code::Unavailable | Code::DeadlineExceeded | Code::Unknown => SdkError::Unavailable(text),
        Code::InvalidArgument | Code::NotFound | Code::OutOfRange => SdkError::InvalidRequest(text),
        _ => SdkError::Failed(text),
    }
}

/// The session id of a thread: the runner's id, checked to be safe for the
/// engine to use as a file name.
fn session_id(spec: &ThreadSpec) -> Result<String, SdkError> {
    let id = spec.sdk_thread_id.as_deref().unwrap_or(&spec.thread_id);
    let safe = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if safe {
        Ok(id.to_owned())
    } else {
        Err(SdkError::InvalidRequest(format!(
            "thread id {id:?} cannot be a code-agent session id (1-128 of [A-Za-z0-9._-], not starting with '.')"
        )))
    }
}

impl CodeAgentAdapter {
    /// Nothing is started or dialled until the adapter is first used.
    pub fn new(config: CodeAgentConfig) -> Self {
        Self {
            config,
            backend: OnceCell::new(),
            threads: ThreadTable::new(),
            context_windows: Mutex::new(HashMap::new()),
        }
    }

    /// Drive `service` in this process: an engine the caller started (and
    /// perhaps configured) itself. `config.endpoint` and `config.state_dir`
    /// are not used.
    pub fn with_service<T: CodeAgentService>(
        service: CodeAgentServiceServer<T>,
        config: CodeAgentConfig,
    ) -> Self {
        let backend = OnceCell::new_with(Some(Backend::from(in_memory_client(service))));
        Self {
            backend,
            ..Self::new(config)
        }
    }

    /// Its settings.
    pub fn config(&self) -> &CodeAgentConfig {
        &self.config
    }

    /// The embedded engine's sandbox registry, once the backend is open.
    fn sandboxes(&self) -> Option<code_agent_engine::Sandboxes> {
        self.backend.get().and_then(|b| b.sandboxes.clone())
    }

    /// The client; starts the embedded engine on first use (a failure is
    /// retried on the next call).
    async fn client(&self) -> Result<Client, SdkError> {
        self.backend
            .get_or_try_init(|| Backend::open(&self.config))
            .await
            .map(|b| b.client.clone())
            .map_err(SdkError::Unavailable)
    }

    fn slot(&self, spec: &ThreadSpec) -> Arc<Slot> {
        let made = self
            .threads
            .get_or_try_insert(&spec.thread_id, &spec.agent_id, || {
                Ok::<_, std::convert::Infallible>(Slot::default())
            });
        match made {
            Ok(slot) => slot,
            Err(never) => match never {},
        }
    }

    /// A unary call under the request timeout.
    async fn call<T>(
        &self,
        what: &str,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, tonic::Status> {
        match tokio::time::timeout(self.config.request_timeout, call).await {
            Ok(result) => result.map(tonic::Response::into_inner),
            Err(_) => Err(tonic::Status::deadline_exceeded(format!(
                "{what}: no answer within {:?}",
                self.config.request_timeout
            ))),
        }
    }

    fn session_config(spec: &ThreadSpec, model: &str) -> SessionConfig {
        SessionConfig {
            name: spec.thread_id.clone(),
            workspace: spec.workspace.to_string_lossy().into_owned(),
            llm: Some(LlmConfig {
                model: model.to_owned(),
                ..Default::default()
            }),
            storage_type: StorageType::File.into(),
            // The session's system prompt, on every model call: the
            // engine's default one (which an empty prompt means) followed by
            // the thread's additional instructions.
            system_prompt: spec
                .instructions
                .as_ref()
                .map(|extra| {
                    format!(
                        "{}\n\n{extra}",
                        code_agent_engine::default_prompt(&spec.workspace)
                    )
                })
                .unwrap_or_default(),
            ..Default::default()
        }
    }

    /// Make sure the thread's session exists and its env is registered.
    async fn ensure_session(
        &self,
        spec: &ThreadSpec,
        state: &mut SlotState,
    ) -> Result<String, SdkError> {
        let id = session_id(spec)?;
        if state.ready {
            return Ok(id);
        }
        let mut client = self.client().await?;
        spec.create_workspace().await?;
        if let Some(sandboxes) = self.sandboxes() {
            // The embedded engine runs this thread's `bash` in the thread's
            // own sandbox (and nowhere else).
            sandboxes.register(&spec.workspace, spec.sandbox.get()?.clone());
        }
        let workspace = spec.workspace.to_string_lossy().into_owned();
        let init = InitializeRequest {
            workspace: workspace.clone(),
            env: spec.env.iter().cloned().collect(),
        };
        match self.call("Initialize", client.initialize(init)).await {
            Ok(_) => {}
            Err(status) if status.code() == Code::Unimplemented && spec.env.is_empty() => {
                tracing::debug!(error = %status_text(&status), "the engine has no Initialize; no env to pass");
            }
            Err(status) => return Err(sdk_error("Initialize", &status)),
        }
        let found = self
            .call(
                "GetSession",
                client.get_session(GetSessionRequest {
                    session_id: id.clone(),
                }),
            )
            .await;
        match found {
            Ok(found) => {
                state.model = found
                    .session
                    .and_then(|s| s.config)
                    .and_then(|c| c.llm)
                    .map(|l| l.model)
                    .filter(|m| !m.is_empty());
            }
            Err(status) if status.code() == Code::NotFound => {
                if spec.sdk_thread_id.as_deref().is_some() {
                    tracing::warn!(thread_id = %spec.thread_id, session_id = %id, "the code-agent session is gone; starting it afresh (its history is lost)");
                }
                let request = CreateSessionRequest {
                    session_id: Some(id.clone()),
                    config: Some(Self::session_config(spec, &spec.model)),
                    initial_context: Vec::new(),
                };
                match self
                    .call("CreateSession", client.create_session(request))
                    .await
                {
                    Ok(_) => {
                        state.model = Some(spec.model.clone());
                        state.unnamed = true;
                    }
                    Err(status) if status.code() == Code::AlreadyExists => state.model = None,
                    Err(status) => return Err(sdk_error("CreateSession", &status)),
                }
            }
            Err(status) => return Err(sdk_error("GetSession", &status)),
        }
        // The thread's MCP servers, scoped to its session (module `mcp`).
        // One that cannot connect fails the thread, naming the server.
        for server in spec.mcp_servers.iter() {
            let at = |e: String| {
                SdkError::InvalidRequest(format!(
                    "create_thread_request.mcp_servers ({}): {e}",
                    server.name
                ))
            };
            let register = mcp::register(server, &id).map_err(at)?;
            self.call("RegisterMcpServer", client.register_mcp_server(register))
                .await
                .map_err(|s| at(status_text(&s)))?;
            let connect = mcp::connect(server, &id).map_err(at)?;
            let connected = self
                .call("ConnectMcpServer", client.connect_mcp_server(connect))
                .await
                .map_err(|s| at(status_text(&s)))?;
            if !connected.success {
                return Err(at(connected.message));
            }
        }
        self.set_confirmation_policy(&mut client, &id).await?;
        state.ready = true;
        state.session_id = Some(id.clone());
        Ok(id)
    }

    /// Which tools of session `id` wait for approval (module `approvals`).
    /// An engine without the call is fine as long as none need it.
    async fn set_confirmation_policy(&self, client: &mut Client, id: &str) -> Result<(), SdkError> {
        let tools = &self.config.approve_tools;
        let policy = approvals::policy(tools, self.config.approval_timeout);
        let request = approvals::set_policy(id, policy);
        match self
            .call(
                "SetConfirmationPolicy",
                client.set_confirmation_policy(request),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(status) if status.code() == Code::Unimplemented && tools.is_empty() => {
                tracing::debug!(error = %status_text(&status), "the engine has no SetConfirmationPolicy; no tool needs approval");
                Ok(())
            }
            Err(status) => Err(sdk_error("SetConfirmationPolicy", &status)),
        }
    }

    /// The session's confirmation requests during a turn; `None` (logged)
    /// when the engine cannot stream them.
    async fn confirmations(
        &self,
        spec: &ThreadSpec,
    ) -> Result<Option<tonic::Streaming<code_agent_proto::AgentEvent>>, SdkError> {
        let id = session_id(spec)?;
        let client = self.client().await?;
        let subscribed = tokio::time::timeout(
            self.config.request_timeout,
            approvals::subscribe(&client, &id),
        )
        .await;
        Ok(match subscribed {
            Ok(Ok(stream)) => Some(stream),
            Ok(Err(status)) => {
                tracing::warn!(session_id = %id, error = %status_text(&status), "code-agent SubscribeEvents failed; confirmations will not be asked");
                None
            }
            Err(_) => {
                tracing::warn!(session_id = %id, "code-agent SubscribeEvents timed out; confirmations will not be asked");
                None
            }
        })
    }

    async fn destroy(&self, session_id: String) -> Result<(), SdkError> {
        let mut client = self.client().await?;
        let request = DestroySessionRequest {
            session_id: session_id.clone(),
        };
        match self
            .call("DestroySession", client.destroy_session(request))
            .await
        {
            Ok(_) => Ok(()),
            Err(status) if status.code() == Code::NotFound => Ok(()),
            Err(status) => Err(sdk_error("DestroySession", &status)),
        }
    }

    async fn open_stream(
        &self,
        spec: &ThreadSpec,
        state: &mut SlotState,
        input: &TurnInput,
    ) -> Result<(String, tonic::Streaming<code_agent_proto::GenerateChunk>), SdkError> {
        let effort = input.reasoning_level.as_deref();
        let model = input.model.as_str();
        let mut retried = false;
        loop {
            let id = self.ensure_session(spec, state).await?;
            let mut client = self.client().await?;
            if state.model.as_deref() != Some(model) {
                let request = ConfigureSessionRequest {
                    session_id: id.clone(),
                    config: Some(Self::session_config(spec, model)),
                };
                self.call("ConfigureSession", client.configure_session(request))
                    .await
                    .map_err(|s| sdk_error("ConfigureSession", &s))?;
                state.model = Some(model.to_owned());
            }
            let metadata: Vec<(&str, &str)> = effort
                .map(|e| ("reasoning_effort", e))
                .into_iter()
                .collect();
            let request = GenerateRequest {
                session_id: id.clone(),
                messages: vec![user_message(input.text.clone(), &metadata)],
            };
            match self
                .call("StreamGenerate", client.stream_generate(request))
                .await
            {
                Ok(stream) => return Ok((id, stream)),
                // The engine lost the session (a remote one restarted
                // without it): create it again, once.
                Err(status) if status.code() == Code::NotFound && !retried => {
                    retried = true;
                    state.ready = false;
                    state.model = None;
                }
                Err(status) if status.code() == Code::FailedPrecondition => {
                    return Err(SdkError::Failed(format!(
                        "code-agent session {id} is busy: {}",
                        status_text(&status)
                    )));
                }
                Err(status) => return Err(sdk_error("StreamGenerate", &status)),
            }
        }
    }
}

#[async_trait]
impl SdkAdapter for CodeAgentAdapter {
    fn name(&self) -> &str {
        SDK_NAME
    }

    async fn describe(&self) -> SdkDescription {
        let client = match self.client().await {
            Ok(client) => client,
            Err(e) => {
                let status = if self.config.endpoint.is_some() {
                    SdkStatus::Unconfigured
                } else {
                    SdkStatus::Error
                };
                return describe::description(status, Some(e.to_string()), Vec::new());
            }
        };
        let described = describe::probe(&client, self.config.describe_timeout).await;
        *self
            .context_windows
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = described.context_windows;
        described.description
    }

    /// The embedded engine not started yet: its providers are what the
    /// engine would load (the environment and `providers.json` in its
    /// state dir), read without starting it — the engine starts with the
    /// first thread. A remote or started engine is asked (`None`).
    fn known(&self) -> Option<SdkDescription> {
        if self.config.endpoint.is_some() || self.backend.initialized() {
            return None;
        }
        let store =
            code_agent_engine::providers::ProviderStore::open(self.config.state_dir.as_deref())
                .ok()?;
        let described = describe::from_providers(&store.list());
        *self
            .context_windows
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = described.context_windows;
        Some(described.description)
    }

    async fn create_agent(&self, _agent: &AgentSpec) -> Result<(), SdkError> {
        Ok(())
    }

    /// The runner deletes the agent's threads first; sessions of threads
    /// still known here are destroyed too (the first error is returned).
    async fn delete_agent(&self, agent_id: &str) -> Result<(), SdkError> {
        let mut first_error = None;
        for slot in self.threads.remove_agent(agent_id) {
            let session = slot.state.lock().await.session_id.take();
            if let Some(session) = session
                && let Err(e) = self.destroy(session).await
            {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn create_thread(&self, spec: &ThreadSpec) -> Result<ThreadHandle, SdkError> {
        let slot = self.slot(spec);
        let mut state = slot.state.lock().await;
        let result = self.ensure_session(spec, &mut state).await;
        match result {
            Ok(sdk_thread_id) => Ok(ThreadHandle { sdk_thread_id }),
            Err(e) => {
                drop(state);
                if spec.sdk_thread_id.as_deref().is_none() {
                    self.threads.remove(&spec.thread_id);
                }
                Err(e)
            }
        }
    }

    async fn delete_thread(&self, spec: &ThreadSpec) -> Result<(), SdkError> {
        if let Some(slot) = self.threads.remove(&spec.thread_id) {
            // Wait for a start_turn in progress to let go.
            let _ = slot.state.lock().await;
        }
        let destroyed = self.destroy(session_id(spec)?).await;
        if let Some(sandboxes) = self.sandboxes() {
            sandboxes.forget(&spec.workspace);
        }
        destroyed
    }

    async fn start_turn(&self, spec: &ThreadSpec, input: TurnInput) -> Result<Turn, SdkError> {
        let slot = self.slot(spec);
        let mut state = slot.state.lock().await;
        // Followed before the generation starts, so none is missed.
        let confirmations = self.confirmations(spec).await?;
        let (session_id, stream) = self.open_stream(spec, &mut state, &input).await?;
        let title = if std::mem::take(&mut state.unnamed) {
            title::from_first_message(&input.text)
        } else {
            None
        };
        drop(state);
        let client = self.client().await?;
        let turn_id = format!("turn-{}", uuid::Uuid::new_v4().simple());
        let (events, receiver) = mpsc::channel(TURN_EVENT_BUFFER);
        let (msgs_tx, msgs) = mpsc::channel(TURN_MSG_BUFFER);
        let control = Arc::new(CodeAgentControl::new(
            client.clone(),
            session_id.clone(),
            self.config.request_timeout,
            STEER_TIMEOUT,
            msgs_tx,
        ));
        let model = input.model.as_str();
        let context_window = self
            .context_windows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(model)
            .copied();
        let task = TurnTask {
            turn_id: turn_id.clone(),
            cwd: spec.workspace.to_string_lossy().into_owned(),
            user_text: input.text,
            title,
            events,
            stream,
            msgs,
            control: control.clone(),
            coalesce: self.config.coalesce,
            interrupt_grace: self.config.interrupt_grace,
            thread_usage: slot.usage.clone(),
            context_window,
            confirmations: confirmations.map(|events| turn::Confirmations {
                events,
                client,
                session_id,
                request_timeout: self.config.request_timeout,
            }),
        };
        tokio::spawn(task.run());
        Ok(Turn {
            sdk_turn_id: turn_id,
            events: receiver,
            control,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(thread_id: &str, sdk_thread_id: Option<&str>) -> ThreadSpec {
        ThreadSpec {
            agent_id: "a".into(),
            thread_id: thread_id.into(),
            workspace: "/w".into(),
            model: "m".into(),
            reasoning_level: None,
            sdk_thread_id: sdk_thread_id.map(str::to_owned),
            env: Vec::new(),
            sandbox: sdk_adapter::Sandbox::refused("unit test: no processes"),
            instructions: None,
            mcp_servers: Default::default(),
        }
    }

    #[test]
    fn session_ids_come_from_the_thread_and_are_checked() {
        assert_eq!(session_id(&spec("thr-1", None)).unwrap(), "thr-1");
        assert_eq!(session_id(&spec("thr-1", Some("s-2"))).unwrap(), "s-2");
        // The runner never hands over an empty SDK id (it filters proto3's
        // "empty means unset"); one that got here anyway is refused.
        assert!(session_id(&spec("thr-1", Some(""))).is_err());
        for bad in ["../x", ".hidden", "a/b", ""] {
            assert!(session_id(&spec(bad, None)).is_err(), "{bad}");
        }
        assert!(session_id(&spec(&"x".repeat(129), None)).is_err());
    }
}
