//! The one gRPC client the adapter talks through, whichever engine is
//! behind it.
//!
//! - Remote (`endpoint` set): a lazily connecting tonic [`Channel`] to the
//!   URL (TLS for `https://`: the configured CA certificate, else the
//!   system roots), every call carrying `authorization: Bearer <token>`
//!   when a token is configured (`code-agent serve` requires one). An
//!   unreachable engine is found by the first call, not at start.
//! - In-process (the default): the engine is started here and served over
//!   in-memory pipes (`tokio::io::duplex`): every connection the channel
//!   opens is a fresh pipe whose server half is handed to the engine's tonic
//!   server through a bounded queue. No port is opened, yet the adapter uses
//!   exactly the same client code as for a remote engine.

use std::sync::Arc;

use code_agent_proto::code_agent_service_client::CodeAgentServiceClient;
use code_agent_proto::code_agent_service_server::{CodeAgentService, CodeAgentServiceServer};
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::{CancellationToken, DropGuard};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Uri};

use crate::CodeAgentConfig;

/// The generated client over whichever channel.
pub(crate) type Client = CodeAgentServiceClient<InterceptedService<Channel, BearerAuth>>;

/// Adds `authorization: Bearer <token>` to every call (none without a
/// token: the embedded engine).
#[derive(Clone)]
pub(crate) struct BearerAuth(Option<MetadataValue<Ascii>>);

impl Interceptor for BearerAuth {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

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
            Some(url) => remote(url, config),
            None => in_process(config).await,
        }
    }
}

fn remote(url: &str, config: &CodeAgentConfig) -> Result<Backend, String> {
    let mut endpoint = Endpoint::from_shared(url.to_owned())
        .map_err(|e| format!("code-agent endpoint {url:?}: {e}"))?;
    if url.starts_with("https://") {
        let tls = match &config.ca_cert_pem {
            Some(pem) => ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)),
            None => ClientTlsConfig::new().with_native_roots(),
        };
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|e| format!("code-agent endpoint {url:?}: TLS: {e}"))?;
    }
    let auth = match &config.auth_token {
        Some(token) => {
            let mut value: MetadataValue<Ascii> = format!("Bearer {}", token.expose())
                .parse()
                .map_err(|_| "code_agent_auth_token: not a valid header value".to_owned())?;
            value.set_sensitive(true);
            Some(value)
        }
        None => None,
    };
    Ok(Backend {
        client: CodeAgentServiceClient::with_interceptor(endpoint.connect_lazy(), BearerAuth(auth)),
        sandboxes: None,
        _server: None,
    })
}

async fn in_process(config: &CodeAgentConfig) -> Result<Backend, String> {
    let state_dir = config.state_dir.clone();
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
        client_options: code_agent_engine::llm::ClientOptions {
            proxy: config.model_proxy.clone(),
            ..Default::default()
        },
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
    channel: Channel,
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
        client: CodeAgentServiceClient::new(channel.clone()),
        channel,
        _server: Arc::new(stop.drop_guard()),
    }
}

impl From<InMemoryClient> for Backend {
    fn from(in_memory: InMemoryClient) -> Self {
        Backend {
            client: CodeAgentServiceClient::with_interceptor(in_memory.channel, BearerAuth(None)),
            sandboxes: None,
            _server: Some(in_memory._server),
        }
    }
}
