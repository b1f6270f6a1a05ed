//! What the adapter suites share: an engine configured with a provider that
//! points at a `MockLlm` on loopback, driven by the adapter in-process
//! (in-memory pipes) or remote (the engine served on 127.0.0.1:0).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use code_agent_engine::testing::{MockLlm, MockReply};
use code_agent_engine::{Engine, EngineConfig};
use code_agent_proto::code_agent_service_client::CodeAgentServiceClient;
use code_agent_proto::{
    AddProviderRequest, ModelInfo, ModelLimitInfo, ProviderInfo, SetDefaultModelRequest,
};
use sdk_adapter::testing::{create, start, thread_spec};
use sdk_adapter::{ThreadSpec, Turn};
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

/// Thread `thread_id` on [`MODEL`] at its default reasoning level, its
/// workspace under `root`.
pub fn spec_in(root: &Path, thread_id: &str) -> ThreadSpec {
    ThreadSpec {
        thread_id: thread_id.into(),
        workspace: root.join("ws").join(thread_id),
        reasoning_level: None,
        ..thread_spec(root, MODEL)
    }
}

impl Harness {
    pub fn spec(&self, thread_id: &str) -> ThreadSpec {
        spec_in(self.dir.path(), thread_id)
    }

    /// Create the thread; its spec as the runner would keep it.
    pub async fn thread(&self, spec: ThreadSpec) -> ThreadSpec {
        create(&self.adapter, spec).await
    }

    pub async fn turn(&self, spec: &ThreadSpec, text: &str) -> Turn {
        start(&self.adapter, spec, text).await
    }
}

pub fn workspace(spec: &ThreadSpec) -> PathBuf {
    std::fs::canonicalize(&spec.workspace).expect("workspace exists")
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
