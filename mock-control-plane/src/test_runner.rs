//! A minimal fake runner for this crate's own tests: a real tonic client of
//! the mock (registration, a `ControlChannel` stream, the GitHub RPCs), plus
//! an optional responder that answers requests the way the `scripted` SDK
//! would, so scenarios and stdio can be tested end to end without the real
//! runner.

use std::time::Duration;

use agent_runner_proto::runner::agent_runner_control_service_client::AgentRunnerControlServiceClient;
use agent_runner_proto::runner::{
    AgentSdk, AgentSdkStatus, AgentStatus, AgentUpdate, ClientMessage, HeartbeatResponse,
    ItemStatus, ItemType, ItemUpdate, RegisterRunnerRequest, ServerMessage, ThreadStatus,
    ThreadUpdate, TurnStatus, TurnUpdate, client_message, server_message,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status, Streaming};

/// Generous bound for waits in tests: they finish as soon as the condition
/// holds, this only stops a broken test from hanging.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

pub(crate) type Client = AgentRunnerControlServiceClient<Channel>;

/// A client for the server at `url` (its path, if any, prefixes every
/// method, as a runner pointed at that URL would do).
pub(crate) async fn client(url: &str) -> Client {
    let channel = Endpoint::from_shared(url.to_owned())
        .expect("valid url")
        .connect()
        .await
        .expect("connects to the mock");
    AgentRunnerControlServiceClient::with_origin(channel, url.parse().expect("valid uri"))
}

/// `message` with `authorization: Bearer <secret>` when a secret is given.
pub(crate) fn request<T>(message: T, secret: Option<&str>) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(secret) = secret {
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {secret}").parse().expect("ascii"),
        );
    }
    request
}

pub(crate) fn scripted_sdk() -> RegisterRunnerRequest {
    RegisterRunnerRequest {
        agent_sdks: vec![AgentSdk {
            name: "scripted".into(),
            models: vec![],
            status: AgentSdkStatus::Ready as i32,
            error_message: None,
        }],
        features: Vec::new(),
    }
}

/// One open `ControlChannel` stream, seen from the runner's side.
pub(crate) struct Stream {
    pub(crate) outbound: mpsc::Sender<ClientMessage>,
    pub(crate) inbound: Streaming<ServerMessage>,
}

impl Stream {
    pub(crate) async fn open(client: &mut Client, secret: Option<&str>) -> Result<Stream, Status> {
        let (outbound, rx) = mpsc::channel(64);
        let inbound = client
            .control_channel(request(ReceiverStream::new(rx), secret))
            .await?
            .into_inner();
        Ok(Stream { outbound, inbound })
    }

    pub(crate) async fn send(&self, message: ClientMessage) {
        self.outbound
            .send(message)
            .await
            .expect("the stream's sender is open");
    }

    /// The next ServerMessage, or the status the stream ended with
    /// (`Ok(None)` for a clean end).
    pub(crate) async fn next(&mut self) -> Result<Option<ServerMessage>, Status> {
        tokio::time::timeout(WAIT, self.inbound.message())
            .await
            .unwrap_or_else(|_| Err(Status::deadline_exceeded("test waited too long")))
    }
}

pub(crate) fn reply(request_id: &str, payload: client_message::Payload) -> ClientMessage {
    ClientMessage {
        request_id: (!request_id.is_empty()).then(|| request_id.to_owned()),
        payload: Some(payload),
        sequence: 0,
    }
}

/// Answers like a runner with the `scripted` SDK: agents and threads become
/// READY (thread ids `thread-1`, `thread-2`…), a user message runs a turn
/// (`turn-N`) whose `say X` lines become agent messages, deletes answer
/// DELETED, heartbeats are answered. Runs until the stream ends.
pub(crate) async fn respond_like_scripted(mut stream: Stream) {
    let mut threads = 0;
    let mut turns = 0;
    while let Ok(Some(message)) = stream.inbound.message().await {
        let id = message.request_id.as_str();
        let mut out = Vec::new();
        use client_message::Payload as P;
        match message.request {
            Some(server_message::Request::HeartbeatRequest(_)) => {
                out.push(P::HeartbeatResponse(HeartbeatResponse {}));
            }
            Some(server_message::Request::CreateAgentRequest(r)) => {
                out.push(P::AgentUpdate(AgentUpdate {
                    agent_id: r.agent_id,
                    status: AgentStatus::Ready as i32,
                }));
            }
            Some(server_message::Request::DeleteAgentRequest(r)) => {
                out.push(P::AgentUpdate(AgentUpdate {
                    agent_id: r.agent_id,
                    status: AgentStatus::Deleted as i32,
                }));
            }
            Some(server_message::Request::CreateThreadRequest(_)) => {
                threads += 1;
                out.push(P::ThreadUpdate(ThreadUpdate {
                    thread_id: format!("thread-{threads}"),
                    status: ThreadStatus::Ready as i32,
                }));
            }
            Some(server_message::Request::DeleteThreadRequest(r)) => {
                out.push(P::ThreadUpdate(ThreadUpdate {
                    thread_id: r.thread_id,
                    status: ThreadStatus::Deleted as i32,
                }));
            }
            Some(server_message::Request::CreateUserMessageRequest(r)) => {
                turns += 1;
                let turn = format!("turn-{turns}");
                let turn_update = |status: TurnStatus| {
                    P::TurnUpdate(TurnUpdate {
                        sdk_turn_id: turn.clone(),
                        status: status as i32,
                        thread_id: r.thread_id.clone(),
                    })
                };
                let item = |n: usize, kind: ItemType, status: ItemStatus, text: &str| {
                    P::ItemUpdate(ItemUpdate {
                        sdk_item_id: format!("{turn}-item-{n}"),
                        status: status as i32,
                        item_type: kind as i32,
                        text: Some(text.to_owned()),
                        command_execution_item: None,
                        thread_id: r.thread_id.clone(),
                        sdk_turn_id: turn.clone(),
                    })
                };
                out.push(turn_update(TurnStatus::Running));
                out.push(item(0, ItemType::UserMessage, ItemStatus::Running, &r.text));
                out.push(item(
                    0,
                    ItemType::UserMessage,
                    ItemStatus::Completed,
                    &r.text,
                ));
                for (n, line) in r.text.lines().enumerate() {
                    if let Some(said) = line.strip_prefix("say ") {
                        out.push(item(
                            n + 1,
                            ItemType::AgentMessage,
                            ItemStatus::Running,
                            said,
                        ));
                        out.push(item(
                            n + 1,
                            ItemType::AgentMessage,
                            ItemStatus::Completed,
                            said,
                        ));
                    }
                }
                out.push(turn_update(TurnStatus::Completed));
            }
            _ => {}
        }
        for payload in out {
            if stream.outbound.send(reply(id, payload)).await.is_err() {
                return;
            }
        }
    }
}

/// Registers with `scripted` and answers on a ControlChannel stream in the
/// background, like a runner would.
pub(crate) async fn spawn_scripted_runner(url: &str) {
    spawn_scripted_runner_as(url, None).await;
}

/// [`spawn_scripted_runner`] authenticating with `secret` (one runner of a
/// mock serving several).
pub(crate) async fn spawn_scripted_runner_as(url: &str, secret: Option<&str>) {
    let mut client = client(url).await;
    client
        .register_runner(request(scripted_sdk(), secret))
        .await
        .expect("registers");
    let stream = Stream::open(&mut client, secret)
        .await
        .expect("opens the stream");
    tokio::spawn(async move {
        // Keep the client (and its connection) alive as long as the stream.
        let _client = client;
        respond_like_scripted(stream).await;
    });
}
