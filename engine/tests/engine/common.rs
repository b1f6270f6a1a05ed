//! Shared set-up: an engine served on 127.0.0.1:0, a client, the mock model,
//! a temp workspace, and helpers to run turns and wait for events.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use code_agent_engine::testing::{MockLlm, MockReply};
use code_agent_engine::{Engine, EngineConfig, serve};
use code_agent_proto::code_agent_service_client::CodeAgentServiceClient;
use code_agent_proto::*;
use futures::StreamExt;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

pub type Client = CodeAgentServiceClient<Channel>;

/// Generous bound for things that must happen (never asserted as timing).
pub const PATIENCE: Duration = Duration::from_secs(30);

pub struct Harness {
    pub client: Client,
    pub mock: MockLlm,
    pub workspace: TempDir,
    pub state: TempDir,
    stop: CancellationToken,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Harness {
    pub async fn start(replies: Vec<MockReply>) -> Harness {
        let mock = MockLlm::start(replies).await;
        let workspace = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        Self::start_on(mock, workspace, state).await
    }

    /// An engine on an existing workspace and state dir (restart tests).
    pub async fn start_on(mock: MockLlm, workspace: TempDir, state: TempDir) -> Harness {
        Self::start_configured(mock, workspace, state, EngineConfig::default()).await
    }

    /// An engine whose generations stop after `max_steps` model calls.
    pub async fn start_with_steps(replies: Vec<MockReply>, max_steps: u32) -> Harness {
        let config = EngineConfig {
            max_steps,
            ..EngineConfig::default()
        };
        let mock = MockLlm::start(replies).await;
        let (workspace, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        Self::start_configured(mock, workspace, state, config).await
    }

    pub async fn start_configured(
        mock: MockLlm,
        workspace: TempDir,
        state: TempDir,
        config: EngineConfig,
    ) -> Harness {
        let engine = Engine::start(EngineConfig {
            state_dir: Some(state.path().to_path_buf()),
            default_workspace: Some(workspace.path().to_path_buf()),
            ..config
        })
        .await
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(engine, listener, stop.clone()));
        let client = CodeAgentServiceClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        Harness {
            client,
            mock,
            workspace,
            state,
            stop,
            server,
        }
    }

    /// Stops the server; returns what a restarted engine needs.
    pub async fn stop(self) -> (MockLlm, TempDir, TempDir) {
        self.stop.cancel();
        self.server.await.unwrap().unwrap();
        (self.mock, self.workspace, self.state)
    }

    pub fn ws(&self) -> &Path {
        self.workspace.path()
    }

    /// The session config pointing at the mock model.
    pub fn config(&self, storage: StorageType) -> SessionConfig {
        SessionConfig {
            name: "test".into(),
            workspace: self.ws().display().to_string(),
            llm: Some(LlmConfig {
                model: "mock-model".into(),
                base_url: self.mock.base_url(),
                api_key: "sk-test".into(),
                ..Default::default()
            }),
            storage_type: storage as i32,
            ..Default::default()
        }
    }

    pub async fn session_with(&mut self, config: SessionConfig) -> String {
        self.client
            .create_session(CreateSessionRequest {
                session_id: None,
                config: Some(config),
                initial_context: vec![],
            })
            .await
            .unwrap()
            .into_inner()
            .session_id
    }

    pub async fn session(&mut self) -> String {
        let config = self.config(StorageType::Memory);
        self.session_with(config).await
    }

    /// Opens a StreamGenerate for one user message.
    pub async fn open_stream(
        &mut self,
        session: &str,
        text: &str,
        metadata: HashMap<String, String>,
    ) -> tonic::Streaming<GenerateChunk> {
        self.client
            .stream_generate(user_request(session, text, metadata))
            .await
            .unwrap()
            .into_inner()
    }

    /// Runs one turn and returns every chunk.
    pub async fn turn(&mut self, session: &str, text: &str) -> Vec<GenerateChunk> {
        let stream = self.open_stream(session, text, HashMap::new()).await;
        drain(stream).await
    }

    /// Subscribes to a session's events (all types when `types` is empty).
    pub async fn events(&mut self, session: &str, types: &[&str]) -> tonic::Streaming<AgentEvent> {
        self.client
            .subscribe_events(SubscribeEventsRequest {
                session_id: Some(session.into()),
                event_types: types.iter().map(|t| t.to_string()).collect(),
            })
            .await
            .unwrap()
            .into_inner()
    }

    /// The session as `GetSession` shows it.
    pub async fn session_info(&mut self, session: &str) -> Session {
        self.client
            .get_session(GetSessionRequest {
                session_id: session.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .session
            .unwrap()
    }

    pub async fn context_usage(&mut self, session: &str) -> ContextUsage {
        self.client
            .get_context_usage(GetContextUsageRequest {
                session_id: session.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .usage
            .unwrap()
    }

    pub async fn todos(&mut self, session: &str) -> Vec<Todo> {
        self.client
            .get_todos(GetTodosRequest {
                session_id: session.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .todos
    }

    pub async fn destroy(&mut self, session: &str) {
        self.client
            .destroy_session(DestroySessionRequest {
                session_id: session.into(),
            })
            .await
            .unwrap();
    }

    pub async fn set_confirmation_policy(&mut self, session: &str, policy: ConfirmationPolicy) {
        self.client
            .set_confirmation_policy(SetConfirmationPolicyRequest {
                session_id: session.into(),
                policy: Some(policy),
            })
            .await
            .unwrap();
    }

    pub async fn set_permission_policy(&mut self, session: &str, policy: PermissionPolicy) {
        self.client
            .set_permission_policy(SetPermissionPolicyRequest {
                session_id: session.into(),
                policy: Some(policy),
            })
            .await
            .unwrap();
    }

    /// Answers a CONFIRMATION_REQUIRED for the tool call `tool_id`.
    pub async fn confirm(
        &mut self,
        session: &str,
        tool_id: &str,
        approved: bool,
        reason: Option<&str>,
    ) -> ConfirmToolExecutionResponse {
        self.client
            .confirm_tool_execution(ConfirmToolExecutionRequest {
                session_id: session.into(),
                tool_id: tool_id.into(),
                approved,
                reason: reason.map(Into::into),
            })
            .await
            .unwrap()
            .into_inner()
    }

    pub async fn messages(&mut self, session: &str) -> Vec<ConversationMessage> {
        self.client
            .get_messages(GetMessagesRequest {
                session_id: session.into(),
                limit: None,
                offset: None,
            })
            .await
            .unwrap()
            .into_inner()
            .messages
    }
}

pub fn user_message(text: &str, metadata: HashMap<String, String>) -> Message {
    Message {
        role: "user".into(),
        content: text.into(),
        metadata,
    }
}

/// A generate request with one user message.
pub fn user_request(
    session: &str,
    text: &str,
    metadata: HashMap<String, String>,
) -> GenerateRequest {
    GenerateRequest {
        session_id: session.into(),
        messages: vec![user_message(text, metadata)],
    }
}

/// A confirmation policy that asks before every tool call.
pub fn ask_all() -> ConfirmationPolicy {
    ConfirmationPolicy {
        enabled: true,
        ..Default::default()
    }
}

/// Every chunk of a stream (panics on an error status).
pub async fn drain(mut stream: tonic::Streaming<GenerateChunk>) -> Vec<GenerateChunk> {
    let mut out = Vec::new();
    while let Some(chunk) = tokio::time::timeout(PATIENCE, stream.next())
        .await
        .expect("stream stalled")
    {
        out.push(chunk.expect("stream error"));
    }
    out
}

/// Waits for the next event of `kind` on a subscription.
pub async fn next_event(
    events: &mut tonic::Streaming<AgentEvent>,
    kind: agent_event::EventType,
) -> AgentEvent {
    loop {
        let event = tokio::time::timeout(PATIENCE, events.next())
            .await
            .expect("no event in time")
            .expect("event stream ended")
            .expect("event stream error");
        if event.r#type == kind as i32 {
            return event;
        }
    }
}

/// The chunk types, without metadata chunks.
pub fn kinds(chunks: &[GenerateChunk]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for c in chunks {
        let kind = c.r#type.as_str();
        if kind == "metadata" || (kind == "content" && out.last() == Some(&"content")) {
            continue;
        }
        out.push(kind);
    }
    out
}

/// The tool results of a turn, in order.
pub fn results(chunks: &[GenerateChunk]) -> Vec<ToolResult> {
    chunks
        .iter()
        .filter_map(|c| c.tool_result.clone())
        .collect()
}

pub fn done(chunks: &[GenerateChunk]) -> &GenerateChunk {
    chunks
        .last()
        .filter(|c| c.r#type == "done")
        .expect("ends with done")
}

/// The `messages` of the model request `index` the mock received.
pub fn request_messages(mock: &MockLlm, index: usize) -> Vec<serde_json::Value> {
    mock.requests()[index]["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Whether any message of a request has `needle` in its content.
pub fn request_mentions(mock: &MockLlm, index: usize, needle: &str) -> bool {
    request_messages(mock, index)
        .iter()
        .any(|m| m["content"].as_str().is_some_and(|c| c.contains(needle)))
}

/// Registers `config` for `session` and connects it by `name`: the
/// registration must succeed; the connection's answer is returned.
pub async fn register_and_connect(
    h: &mut Harness,
    session: &str,
    config: McpServerConfigProto,
    name: &str,
) -> ConnectMcpServerResponse {
    let registered = h
        .client
        .register_mcp_server(scoped(
            RegisterMcpServerRequest {
                config: Some(config),
            },
            Some(session),
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(registered.success);
    h.client
        .connect_mcp_server(scoped(
            ConnectMcpServerRequest { name: name.into() },
            Some(session),
        ))
        .await
        .unwrap()
        .into_inner()
}

/// `message` as a request of `session` (the `x-code-agent-session-id`
/// metadata the cron and MCP RPCs are scoped by); `None`: the operator's.
pub fn scoped<T>(message: T, session: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(s) = session {
        request
            .metadata_mut()
            .insert(code_agent_engine::mcp::SESSION_METADATA, s.parse().unwrap());
    }
    request
}
