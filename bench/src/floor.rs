//! The cost floor: a bare tonic `ControlChannel` on loopback with nothing
//! behind either end, carrying the same `ClientMessage`s the runner sends.
//! What the runner achieves is reported as a ratio of this.
//!
//! - `throughput`: a client streams N item updates as fast as tonic takes
//!   them; the server only counts.
//! - `round_trip`: the server sends a `ServerMessage` and the client answers
//!   each at once with a `TurnUpdate`; the time between is the least a
//!   dispatch latency could be.
//! - `mock_ingest`: the same client stream into the mock control plane, to
//!   show what the measuring side itself can take.
//! - [`Flood`]: a bare client streaming item updates into the mock control
//!   plane as fast as it takes them, answering each request ahead of its
//!   own queue: what a heartbeat's round trip is on one stream carrying a
//!   flood, with nothing behind the client.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agent_runner_proto::runner::agent_runner_control_service_client::AgentRunnerControlServiceClient;
use agent_runner_proto::runner::agent_runner_control_service_server::{
    AgentRunnerControlService, AgentRunnerControlServiceServer,
};
use agent_runner_proto::runner::{
    ClientMessage, CreateUserMessageRequest, GetGithubInstallationAccessTokenForRunnerRequest,
    GetGithubInstallationAccessTokenForRunnerResponse, HeartbeatResponse, ItemStatus, ItemType,
    ItemUpdate, ListGithubInstallationsForRunnerRequest, ListGithubInstallationsForRunnerResponse,
    RegisterRunnerRequest, RegisterRunnerResponse, ServerMessage, TurnStatus, TurnUpdate,
    client_message::Payload, server_message::Request as Req,
};
use anyhow::{Context as _, Result};
use futures::Stream;
use tokio::net::TcpListener;
use tokio::sync::{Mutex, Notify, mpsc};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status, Streaming};

use crate::collector::Collector;

/// `n` item updates shaped like a `say` turn's: RUNNING then COMPLETED per
/// item, with realistic ids.
pub fn item_updates(n: usize) -> Vec<ClientMessage> {
    (0..n).map(item_update).collect()
}

/// The `i`th of [`item_updates`].
fn item_update(i: usize) -> ClientMessage {
    let turn = "turn-0b9e4c1e-5d1f-4c55-9d2a-3f1f7f0e8a11";
    let thread = "thr-4f1d2c3b4a5968778695a4b3c2d1e0f1";
    let status = if i.is_multiple_of(2) {
        ItemStatus::Running
    } else {
        ItemStatus::Completed
    };
    ClientMessage {
        request_id: Some(format!("m{}", i / 64)),
        payload: Some(Payload::ItemUpdate(ItemUpdate {
            sdk_item_id: format!("{turn}-item-{}", i / 2 + 1),
            status: status.into(),
            item_type: ItemType::AgentMessage.into(),
            text: Some(format!("{}", i / 2)),
            command_execution_item: None,
            thread_id: thread.to_owned(),
            sdk_turn_id: turn.to_owned(),
        })),
        sequence: 0,
    }
}

/// The server→client half of a live floor stream.
type OutboundTx = mpsc::Sender<Result<ServerMessage, Status>>;

#[derive(Clone)]
struct FloorService {
    received: Arc<AtomicU64>,
    arrived: Arc<Notify>,
    /// The server→client half of the live stream (round trips).
    outbound: Arc<Mutex<Option<OutboundTx>>>,
    replies: Arc<Mutex<Option<mpsc::Sender<Instant>>>>,
}

type Outbound = Pin<Box<dyn Stream<Item = Result<ServerMessage, Status>> + Send>>;

#[tonic::async_trait]
impl AgentRunnerControlService for FloorService {
    async fn register_runner(
        &self,
        _request: Request<RegisterRunnerRequest>,
    ) -> Result<Response<RegisterRunnerResponse>, Status> {
        Ok(Response::new(RegisterRunnerResponse::default()))
    }

    type ControlChannelStream = Outbound;

    async fn control_channel(
        &self,
        request: Request<Streaming<ClientMessage>>,
    ) -> Result<Response<Self::ControlChannelStream>, Status> {
        let mut inbound = request.into_inner();
        let received = self.received.clone();
        let arrived = self.arrived.clone();
        let replies = self.replies.lock().await.clone();
        tokio::spawn(async move {
            while let Ok(Some(_message)) = inbound.message().await {
                received.fetch_add(1, Ordering::Relaxed);
                arrived.notify_one();
                if let Some(r) = &replies {
                    let _ = r.send(Instant::now()).await;
                }
            }
        });
        let (tx, rx) = mpsc::channel(1024);
        *self.outbound.lock().await = Some(tx);
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn list_github_installations_for_runner(
        &self,
        _request: Request<ListGithubInstallationsForRunnerRequest>,
    ) -> Result<Response<ListGithubInstallationsForRunnerResponse>, Status> {
        Err(Status::unimplemented("floor"))
    }

    async fn get_github_installation_access_token_for_runner(
        &self,
        _request: Request<GetGithubInstallationAccessTokenForRunnerRequest>,
    ) -> Result<Response<GetGithubInstallationAccessTokenForRunnerResponse>, Status> {
        Err(Status::unimplemented("floor"))
    }

    async fn list_github_installations(
        &self,
        _request: Request<agent_runner_proto::runner::ListGithubInstallationsRequest>,
    ) -> Result<Response<agent_runner_proto::runner::ListGithubInstallationsResponse>, Status> {
        Err(Status::unimplemented("floor"))
    }

    async fn github_installation_access_token(
        &self,
        _request: Request<agent_runner_proto::runner::GithubInstallationAccessTokenRequest>,
    ) -> Result<Response<agent_runner_proto::runner::GithubInstallationAccessTokenResponse>, Status>
    {
        Err(Status::unimplemented("floor"))
    }
}

struct FloorServer {
    addr: SocketAddr,
    service: FloorService,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FloorServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve() -> Result<FloorServer> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let service = FloorService {
        received: Arc::new(AtomicU64::new(0)),
        arrived: Arc::new(Notify::new()),
        outbound: Arc::new(Mutex::new(None)),
        replies: Arc::new(Mutex::new(None)),
    };
    let incoming = TcpListenerStream::new(listener).map(|accepted| {
        accepted.inspect(|s| {
            let _ = s.set_nodelay(true);
        })
    });
    let router =
        Server::builder().add_service(AgentRunnerControlServiceServer::new(service.clone()));
    let task = tokio::spawn(async move {
        if let Err(e) = router.serve_with_incoming(incoming).await {
            eprintln!("floor server: {e}");
        }
    });
    Ok(FloorServer {
        addr,
        service,
        task,
    })
}

/// A client configured like the runner's (TCP_NODELAY, HTTP/2 keepalive).
pub async fn client(url: &str) -> Result<AgentRunnerControlServiceClient<Channel>> {
    let channel = Endpoint::from_shared(url.to_owned())?
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(10))
        .connect()
        .await
        .with_context(|| format!("connecting to {url}"))?;
    Ok(AgentRunnerControlServiceClient::new(channel))
}

/// Messages per second through a bare stream.
pub async fn throughput(n: usize) -> Result<f64> {
    Ok(throughput_cpu(n).await?.messages_per_s)
}

/// One bare stream's rate and what it cost.
#[derive(Debug, Clone, Copy)]
pub struct FloorRun {
    pub messages: usize,
    pub messages_per_s: f64,
    /// The bench process's CPU time while the messages went through: the
    /// bare client and its server, both in this process.
    pub cpu_seconds: f64,
}

/// [`throughput`], with its CPU time.
pub async fn throughput_cpu(n: usize) -> Result<FloorRun> {
    let server = serve().await?;
    let mut client = client(&format!("http://{}", server.addr)).await?;
    let messages = item_updates(n);
    let svc = &server.service;
    let cpu0 = crate::stats::live_threads_cpu(std::process::id())?;
    let start = Instant::now();
    let response = client.control_channel(tokio_stream::iter(messages)).await?;
    while svc.received.load(Ordering::Relaxed) < n as u64 {
        tokio::time::timeout(crate::collector::PATIENCE, svc.arrived.notified())
            .await
            .context("floor stream stalled")?;
    }
    let elapsed = start.elapsed();
    // At least 0: a thread that exited meanwhile takes its time with it.
    let cpu_seconds = (crate::stats::live_threads_cpu(std::process::id())? - cpu0).max(0.0);
    drop(response);
    Ok(FloorRun {
        messages: n,
        messages_per_s: n as f64 / elapsed.as_secs_f64(),
        cpu_seconds,
    })
}

/// Messages per second from a bare client into the mock control plane.
pub async fn mock_ingest(n: usize) -> Result<f64> {
    let cp = Arc::new(mock_control_plane::MockControlPlane::start(Default::default()).await?);
    let collector = Collector::start(cp.clone());
    let mut client = client(&cp.url()).await?;
    let messages = item_updates(n);
    let start = Instant::now();
    let response = client.control_channel(tokio_stream::iter(messages)).await?;
    collector.wait_received(n as u64).await?;
    let elapsed = start.elapsed();
    drop(response);
    Ok(n as f64 / elapsed.as_secs_f64())
}

/// `n` round trips: server sends, client answers at once.
pub async fn round_trip(n: usize) -> Result<Vec<Duration>> {
    let server = serve().await?;
    let (reply_tx, mut reply_rx) = mpsc::channel(16);
    *server.service.replies.lock().await = Some(reply_tx);
    let mut client = client(&format!("http://{}", server.addr)).await?;
    let (out_tx, out_rx) = mpsc::channel::<ClientMessage>(1024);
    let mut inbound = client
        .control_channel(ReceiverStream::new(out_rx))
        .await?
        .into_inner();
    // The client: answer every request with a TurnUpdate RUNNING at once.
    let answering = tokio::spawn(async move {
        while let Ok(Some(msg)) = inbound.message().await {
            let answer = ClientMessage {
                request_id: Some(msg.request_id),
                payload: Some(Payload::TurnUpdate(TurnUpdate {
                    sdk_turn_id: "turn-0b9e4c1e-5d1f-4c55-9d2a-3f1f7f0e8a11".into(),
                    status: TurnStatus::Running.into(),
                    thread_id: "thr-4f1d2c3b4a5968778695a4b3c2d1e0f1".into(),
                })),
                sequence: 0,
            };
            if out_tx.send(answer).await.is_err() {
                break;
            }
        }
    });
    let outbound = loop {
        if let Some(tx) = server.service.outbound.lock().await.clone() {
            break tx;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let msg = ServerMessage {
            request_id: format!("rt{i}"),
            request: Some(Req::CreateUserMessageRequest(CreateUserMessageRequest {
                agent_id: "bench".into(),
                thread_id: "thr-4f1d2c3b4a5968778695a4b3c2d1e0f1".into(),
                text: "say x".into(),
                allow_steer: false,
                model: None,
                model_reasoning_level: None,
            })),
            acked_sequence: 0,
        };
        let sent = Instant::now();
        outbound
            .send(Ok(msg))
            .await
            .context("floor stream closed")?;
        let got = tokio::time::timeout(crate::collector::PATIENCE, reply_rx.recv())
            .await
            .context("floor round trip stalled")?
            .context("floor stream closed")?;
        samples.push(got.duration_since(sent));
    }
    answering.abort();
    Ok(samples)
}

/// A bare client flooding the mock control plane with item updates until
/// dropped, answering every request with a `HeartbeatResponse` ahead of the
/// updates it has not yet handed to the transport (the runner's outbox
/// does the same). The round trips its `collector` measures are the least
/// one HTTP/2 stream allows while it carries a flood: the answer still
/// waits behind what the transport, the socket and the mock already hold.
pub struct Flood {
    pub collector: Collector,
    stop: Arc<std::sync::atomic::AtomicBool>,
    answering: tokio::task::JoinHandle<()>,
}

impl Flood {
    /// A flooding client into a mock granting `stream_window` bytes of
    /// HTTP/2 window (None: its default).
    pub async fn start(stream_window: Option<u32>) -> Result<Self> {
        let config = mock_control_plane::MockConfig {
            stream_window,
            ..Default::default()
        };
        let cp = Arc::new(mock_control_plane::MockControlPlane::start(config).await?);
        let collector = Collector::start(cp.clone());
        let mut client = client(&cp.url()).await?;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (answer_tx, answer_rx) = mpsc::channel::<ClientMessage>(64);
        let flooding = {
            let stop = stop.clone();
            tokio_stream::iter(
                (0..)
                    .map(item_update)
                    .take_while(move |_| !stop.load(Ordering::Relaxed)),
            )
        };
        // Answers first whenever one is waiting, then the flood.
        let outbound = futures::stream::select_with_strategy(
            ReceiverStream::new(answer_rx),
            flooding,
            |_: &mut ()| futures::stream::PollNext::Left,
        );
        let mut inbound = client.control_channel(outbound).await?.into_inner();
        let answering = tokio::spawn(async move {
            while let Ok(Some(msg)) = inbound.message().await {
                let answer = ClientMessage {
                    request_id: Some(msg.request_id),
                    payload: Some(Payload::HeartbeatResponse(HeartbeatResponse {})),
                    sequence: 0,
                };
                if answer_tx.send(answer).await.is_err() {
                    break;
                }
            }
        });
        Ok(Flood {
            collector,
            stop,
            answering,
        })
    }

    /// Ends the flood and the answering task (idempotent).
    fn halt(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.answering.abort();
    }

    /// Stops the flood and the mock, waits until neither holds what the
    /// mock received (freed when `self` is dropped), and returns how many
    /// messages arrived.
    pub async fn finish(&mut self) -> u64 {
        self.halt();
        if let Err(e) = self.collector.cp.stop().await {
            eprintln!("flood: stopping its mock control plane: {e}");
        }
        let received = self.collector.received();
        self.collector.close().await;
        received
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.halt();
    }
}
