//! What the adapter suites share: an engine configured with a provider that
//! points at a `MockLlm` on loopback, driven by the adapter in-process
//! (in-memory pipes) or remote (the engine served on 127.0.0.1:0).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use agent_runner_proto::code_agent::code_agent_service_client::CodeAgentServiceClient;
use agent_runner_proto::code_agent::{
    AddProviderRequest, ModelInfo, ModelLimitInfo, ProviderInfo, SetDefaultModelRequest,
};
use code_agent_engine::testing::{MockLlm, MockReply};
use code_agent_engine::{Engine, EngineConfig};
use sdk_adapter::{ItemKind, ItemStatus, SdkAdapter, ThreadSpec, Turn, TurnEvent, TurnInput};
use sdk_code_agent::{CodeAgentAdapter, CodeAgentConfig, in_memory_client};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

pub const MODEL: &str = "mock-model";
pub const REASONING_MODEL: &str = "mock-reasoner";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    InProcess,
    Remote,
}

pub struct Harness {
    pub mock: MockLlm,
    pub adapter: CodeAgentAdapter,
    /// A second client of the same engine, to look behind the adapter.
    pub admin: CodeAgentServiceClient<Channel>,
    pub dir: tempfile::TempDir,
    _admin_guard: Option<sdk_code_agent::InMemoryClient>,
    stop: CancellationToken,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Register a provider `mock` for `mock` and make it the default.
pub async fn configure(admin: &mut CodeAgentServiceClient<Channel>, mock: &MockLlm) {
    let model = |id: &str, reasoning: bool| ModelInfo {
        id: id.into(),
        name: id.into(),
        reasoning,
        tool_call: true,
        limit: Some(ModelLimitInfo {
            context: 32_000,
            output: 4_096,
        }),
        ..Default::default()
    };
    admin
        .add_provider(AddProviderRequest {
            provider: Some(ProviderInfo {
                name: "mock".into(),
                api_key: Some("sk-test-mock".into()),
                base_url: Some(mock.base_url()),
                models: vec![model(MODEL, false), model(REASONING_MODEL, true)],
            }),
        })
        .await
        .expect("AddProvider");
    admin
        .set_default_model(SetDefaultModelRequest {
            provider: "mock".into(),
            model: MODEL.into(),
        })
        .await
        .expect("SetDefaultModel");
}

pub fn adapter_config() -> CodeAgentConfig {
    CodeAgentConfig::default()
}

pub async fn harness(mode: Mode, replies: Vec<MockReply>) -> Harness {
    let mock = MockLlm::start(replies).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::start(EngineConfig {
        state_dir: Some(dir.path().join("engine")),
        ..Default::default()
    })
    .await
    .expect("engine starts");
    let stop = CancellationToken::new();
    let (adapter, mut admin, guard) = match mode {
        Mode::InProcess => {
            let admin = in_memory_client(engine.grpc_service());
            let adapter = CodeAgentAdapter::with_service(engine.grpc_service(), adapter_config());
            (adapter, admin.client.clone(), Some(admin))
        }
        Mode::Remote => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let url = format!("http://{}", listener.local_addr().expect("addr"));
            tokio::spawn(code_agent_engine::serve(engine, listener, stop.clone()));
            let admin = CodeAgentServiceClient::connect(url.clone())
                .await
                .expect("connect to the engine");
            let adapter = CodeAgentAdapter::new(CodeAgentConfig {
                endpoint: Some(url),
                ..adapter_config()
            });
            (adapter, admin, None)
        }
    };
    configure(&mut admin, &mock).await;
    Harness {
        mock,
        adapter,
        admin,
        dir,
        _admin_guard: guard,
        stop,
    }
}

pub fn spec_in(root: &Path, thread_id: &str) -> ThreadSpec {
    ThreadSpec {
        agent_id: "agent".into(),
        thread_id: thread_id.into(),
        workspace: root.join("ws").join(thread_id),
        model: MODEL.into(),
        reasoning_level: None,
        sdk_thread_id: None,
        env: Vec::new(),
    }
}

impl Harness {
    pub fn spec(&self, thread_id: &str) -> ThreadSpec {
        spec_in(self.dir.path(), thread_id)
    }

    /// Create the thread; its spec as the runner would keep it.
    pub async fn thread(&self, mut spec: ThreadSpec) -> ThreadSpec {
        let handle = self
            .adapter
            .create_thread(&spec)
            .await
            .expect("create_thread");
        spec.sdk_thread_id = Some(handle.sdk_thread_id);
        spec
    }

    pub async fn turn(&self, spec: &ThreadSpec, text: &str) -> Turn {
        self.adapter
            .start_turn(spec, input(text))
            .await
            .expect("start_turn")
    }
}

pub fn input(text: &str) -> TurnInput {
    TurnInput {
        text: text.into(),
        model: None,
        reasoning_level: None,
    }
}

pub fn workspace(spec: &ThreadSpec) -> PathBuf {
    std::fs::canonicalize(&spec.workspace).expect("workspace exists")
}

/// The first COMPLETED item of `kind`.
pub fn completed_of(events: &[TurnEvent], kind: ItemKind) -> sdk_adapter::ItemEvent {
    sdk_adapter::testing::completed(events)
        .into_iter()
        .find(|i| i.kind == kind)
        .unwrap_or_else(|| panic!("no completed {kind:?} in {events:#?}"))
}

/// Every update of one item, in order.
pub fn updates_of(events: &[TurnEvent], item_id: &str) -> Vec<sdk_adapter::ItemEvent> {
    events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::Item(i) if i.item_id == item_id => Some(i.clone()),
            _ => None,
        })
        .collect()
}

/// Every item is reported RUNNING before COMPLETED, and COMPLETED once.
pub fn check_item_lifecycles(events: &[TurnEvent]) {
    let mut ids: Vec<&str> = Vec::new();
    for e in events {
        if let TurnEvent::Item(i) = e
            && !ids.contains(&i.item_id.as_str())
        {
            ids.push(&i.item_id);
        }
    }
    for id in ids {
        let updates = updates_of(events, id);
        assert_eq!(updates[0].status, ItemStatus::Running, "{updates:#?}");
        let done: Vec<_> = updates
            .iter()
            .filter(|u| u.status == ItemStatus::Completed)
            .collect();
        assert_eq!(done.len(), 1, "{updates:#?}");
        assert_eq!(
            updates.last().map(|u| u.status),
            Some(ItemStatus::Completed),
            "{updates:#?}"
        );
    }
}

/// Processes whose working directory is `dir` (the tool processes of a
/// session in that workspace).
pub fn processes_in(dir: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir)
                && sdk_adapter::testing::alive(*pid)
        })
        .collect()
}
