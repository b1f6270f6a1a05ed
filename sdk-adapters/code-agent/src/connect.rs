//! The one gRPC client the adapter talks through, whichever engine is
//! behind it.
//!
//! - Remote (`endpoint` set): a lazily connecting tonic [`Channel`] to the
//!   URL (TLS with the system roots for `https://`). An unreachable engine
//!   is found by the first call, not at start.
//! - In-process (the default): the engine is started here and served over
//!   in-memory pipes (`tokio::io::duplex`): every connection the channel
//!   opens is a fresh pipe whose server half is handed to the engine's tonic
//!   server through a bounded queue. No port is opened, yet the adapter uses
//!   exactly the same client code as for a remote engine.

use std::path::PathBuf;
use std::sync::Arc;

use code_agent_proto::code_agent_service_client::CodeAgentServiceClient;
use code_agent_proto::code_agent_service_server::{CodeAgentService, CodeAgentServiceServer};
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::{CancellationToken, DropGuard};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint, Uri};

use crate::CodeAgentConfig;

/// The generated client over whichever channel.
pub(crate) type Client = CodeAgentServiceClient<Channel>;

/// Bytes buffered in each direction of an in-memory connection.
const PIPE_BUFFER: usize = 256 * 1024;
/// Connections waiting for the in-process server to accept them. When the
/// queue is full, opening another connection waits for room (tonic's
/// connect timeout, if any, bounds the wait); nothing is dropped.
const PENDING_CONNECTIONS: usize = 16;

/// A connected client; keeps an embedded engine's server alive.
#[derive(Clone)]
pub(crate) struct Backend {
    pub client: Client,
    /// The embedded engine's sandboxes: each thread's own is registered
    /// there, so the engine's `bash` runs in it (`None`: a remote engine, or
    /// one the embedder started, which sandboxes its tools itself).
    pub sandboxes: Option<code_agent_engine::Sandboxes>,
    /// Stops the in-process server when the last clone drops.
    _server: Option<Arc<DropGuard>>,
}

impl Backend {
    /// The backend `config` asks for. Errors are the reason the SDK is not
    /// usable (they reach `describe` and `RequestError`s).
    pub(crate) async fn open(config: &CodeAgentConfig) -> Result<Self, String> {
        match &config.endpoint {
            Some(url) => remote(url),
            None => in_process(config.state_dir.clone()).await,
        }
    }
}

fn remote(url: &str) -> Result<Backend, String> {
    let mut endpoint = Endpoint::from_shared(url.to_owned())
        .map_err(|e| format!("code-agent endpoint {url:?}: {e}"))?;
    if url.starts_with("https://") {
        endpoint = endpoint
            .tls_config(ClientTlsConfig::new().with_native_roots())
            .map_err(|e| format!("code-agent endpoint {url:?}: TLS: {e}"))?;
    }
    Ok(Backend {
        client: CodeAgentServiceClient::new(endpoint.connect_lazy()),
        sandboxes: None,
        _server: None,
    })
}

async fn in_process(state_dir: Option<PathBuf>) -> Result<Backend, String> {
    if let Some(dir) = &state_dir {
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|e| format!("code-agent state dir {}: {e}", dir.display()))?;
    }
    // Only the threads' own sandboxes (registered per thread) may run
    // processes: the embedded engine makes none of its own.
    let config = code_agent_engine::EngineConfig {
        state_dir,
        launcher: code_agent_engine::EngineLauncher::RegisteredOnly,
        ..Default::default()
    };
    let engine = code_agent_engine::Engine::start(config)
        .await
        .map_err(|e| format!("starting the embedded code-agent engine: {e:#}"))?;
    let mut backend = Backend::from(in_memory_client(engine.grpc_service()));
    backend.sandboxes = Some(engine.sandboxes());
    Ok(backend)
}

/// A client of a `CodeAgentService` served in this process over in-memory
/// pipes (no port). The server stops when the last clone drops.
#[derive(Clone)]
pub struct InMemoryClient {
    /// The engine's gRPC client.
    pub client: CodeAgentServiceClient<Channel>,
    _server: Arc<DropGuard>,
}

/// Serve `service` over in-memory pipes and return a client of it (the
/// embedded engine; also for embedders and tests that configure an engine
/// before handing it over).
pub fn in_memory_client<T: CodeAgentService>(service: CodeAgentServiceServer<T>) -> InMemoryClient {
    let (accept, incoming) = mpsc::channel::<tokio::io::DuplexStream>(PENDING_CONNECTIONS);
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let incoming =
        tokio_stream::StreamExt::map(ReceiverStream::new(incoming), Ok::<_, std::io::Error>);
    tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, stopped.cancelled_owned())
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "the embedded code-agent engine's server stopped");
        }
    });
    let connector = tower::service_fn(move |_: Uri| {
        let accept = accept.clone();
        async move {
            let (client, server) = tokio::io::duplex(PIPE_BUFFER);
            accept.send(server).await.map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "the embedded code-agent engine has stopped",
                )
            })?;
            Ok::<_, std::io::Error>(TokioIo::new(client))
        }
    });
    // The URI is never dialled: the connector above ignores it.
    let channel = Endpoint::from_static("http://code-agent.in-process")
        .connect_with_connector_lazy(connector);
    InMemoryClient {
        client: CodeAgentServiceClient::new(channel),
        _server: Arc::new(stop.drop_guard()),
    }
}

impl From<InMemoryClient> for Backend {
    fn from(in_memory: InMemoryClient) -> Self {
        Backend {
            client: in_memory.client,
            sandboxes: None,
            _server: Some(in_memory._server),
        }
    }
}
