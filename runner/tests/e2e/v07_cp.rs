//! A small protocol 0.7 control plane for the 0.7 end-to-end tests, built
//! from the 0.7 definitions only (`agent_runner_proto::runner_v07`), not
//! from the 0.2 types the runner's core uses: what a control plane written
//! against the published 0.7 package sees of the runner.
//!
//! It serves `RegisterRunner` and `ControlChannel` on 127.0.0.1:0, records
//! every registration and every `ClientMessage`, and checks each message by
//! 0.7's `buf.validate` rules; a violation, a message whose payload 0.7
//! does not know (an `AgentUpdate` or `SkillMpUpdate` would decode to
//! none), or (with acknowledged delivery) a sequence that is missing or
//! does not grow is recorded, and [`V07ControlPlane::assert_clean`] fails
//! the test on it. With `acked-delivery/1` accepted it acknowledges each
//! message with a message carrying only `acked_sequence`, and drops a
//! sequence it has processed already, as the extension asks.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner_proto::Validate;
use agent_runner_proto::runner_v07::agent_runner_control_service_server::{
    AgentRunnerControlService, AgentRunnerControlServiceServer,
};
use agent_runner_proto::runner_v07::server_message::Request;
use agent_runner_proto::runner_v07::{
    ClientMessage, RegisterRunnerRequest, RegisterRunnerResponse, ServerMessage,
};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Response, Status, Streaming};

type Outbound = mpsc::UnboundedSender<Result<ServerMessage, Status>>;

#[derive(Default)]
struct State {
    registrations: Vec<RegisterRunnerRequest>,
    /// Every message processed (duplicates dropped), in arrival order.
    received: Vec<ClientMessage>,
    /// What broke the 0.7 rules.
    violations: Vec<String>,
    /// The highest sequence processed.
    processed: u64,
    /// The live channel's outbound half.
    outbound: Option<Outbound>,
    /// ControlChannel calls so far.
    channels: usize,
}

#[derive(Clone)]
struct Service {
    state: Arc<Mutex<State>>,
    acked: bool,
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

#[tonic::async_trait]
impl AgentRunnerControlService for Service {
    async fn register_runner(
        &self,
        request: tonic::Request<RegisterRunnerRequest>,
    ) -> Result<Response<RegisterRunnerResponse>, Status> {
        let request = request.into_inner();
        let mut state = lock(&self.state);
        if let Err(e) = request.validate() {
            state.violations.push(format!(
                "registration: {}",
                agent_runner_proto::violations(&e)
            ));
        }
        let offered = request.features.iter().any(|f| f == "acked-delivery/1");
        state.registrations.push(request);
        Ok(Response::new(RegisterRunnerResponse {
            features: if self.acked && offered {
                vec!["acked-delivery/1".into()]
            } else {
                Vec::new()
            },
            acked_sequence: if self.acked { state.processed } else { 0 },
        }))
    }

    type ControlChannelStream = UnboundedReceiverStream<Result<ServerMessage, Status>>;

    async fn control_channel(
        &self,
        request: tonic::Request<Streaming<ClientMessage>>,
    ) -> Result<Response<Self::ControlChannelStream>, Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::unbounded_channel();
        {
            let mut state = lock(&self.state);
            state.outbound = Some(tx.clone());
            state.channels += 1;
        }
        let (state, acked) = (self.state.clone(), self.acked);
        tokio::spawn(async move {
            while let Some(Ok(msg)) = inbound.next().await {
                let mut s = lock(&state);
                check(&mut s, &msg, acked);
                if acked && msg.sequence != 0 {
                    if msg.sequence <= s.processed {
                        continue;
                    }
                    s.processed = msg.sequence;
                    let _ = tx.send(Ok(ServerMessage {
                        request_id: String::new(),
                        request: None,
                        acked_sequence: msg.sequence,
                    }));
                }
                s.received.push(msg);
            }
        });
        Ok(Response::new(UnboundedReceiverStream::new(rx)))
    }
}

/// Records what breaks 0.7's rules in `msg`.
fn check(s: &mut State, msg: &ClientMessage, acked: bool) {
    if let Err(e) = msg.validate() {
        s.violations
            .push(format!("{}: {msg:?}", agent_runner_proto::violations(&e)));
    }
    if msg.payload.is_none() {
        s.violations
            .push(format!("a message 0.7 does not know (no payload): {msg:?}"));
    }
    if acked && msg.sequence == 0 {
        s.violations.push(format!(
            "acked delivery: a message without a sequence: {msg:?}"
        ));
    }
}

/// The 0.7 control plane (see the module doc).
pub struct V07ControlPlane {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for V07ControlPlane {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl V07ControlPlane {
    /// Listening on 127.0.0.1:0; accepting `acked-delivery/1` if `acked`.
    pub async fn start(acked: bool) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the 0.7 control plane");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let service = Service {
            state: state.clone(),
            acked,
        };
        let server = tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(AgentRunnerControlServiceServer::new(service))
                .serve_with_incoming(incoming)
                .await;
        });
        Self {
            addr,
            state,
            server,
        }
    }

    /// The URL to give the runner.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sends `request` as `request_id` on the live channel.
    pub fn send(&self, request_id: &str, request: Request) {
        let s = lock(&self.state);
        let tx = s.outbound.as_ref().expect("a live ControlChannel");
        tx.send(Ok(ServerMessage {
            request_id: request_id.to_owned(),
            request: Some(request),
            acked_sequence: 0,
        }))
        .expect("the channel is open");
    }

    /// Ends the live ControlChannel from the control plane's side (with
    /// an error, as a control plane's crash or a proxy's reset does).
    pub fn drop_channel(&self) {
        if let Some(tx) = lock(&self.state).outbound.take() {
            let _ = tx.send(Err(Status::unavailable("dropped by the test")));
        }
    }

    /// Every registration so far.
    pub fn registrations(&self) -> Vec<RegisterRunnerRequest> {
        lock(&self.state).registrations.clone()
    }

    /// Every message processed so far.
    pub fn received(&self) -> Vec<ClientMessage> {
        lock(&self.state).received.clone()
    }

    /// The messages answering `rid`.
    pub fn replies(&self, rid: &str) -> Vec<ClientMessage> {
        self.received()
            .into_iter()
            .filter(|m| m.request_id.as_deref() == Some(rid))
            .collect()
    }

    /// Waits (up to `WAIT`) for a message matching `pred`.
    pub async fn wait_for(
        &self,
        what: &str,
        pred: impl Fn(&ClientMessage) -> bool,
    ) -> ClientMessage {
        let deadline = tokio::time::Instant::now() + crate::support::WAIT;
        loop {
            if let Some(m) = self.received().into_iter().find(|m| pred(m)) {
                return m;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {what} within {:?}; received: {:#?}",
                crate::support::WAIT,
                self.received()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits for the `n`th ControlChannel call to be open.
    pub async fn wait_channels(&self, n: usize) {
        let deadline = tokio::time::Instant::now() + crate::support::WAIT;
        loop {
            {
                let s = lock(&self.state);
                if s.channels >= n && s.outbound.is_some() {
                    return;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "ControlChannel {n} never opened"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Fails the test on anything 0.7 forbids that arrived.
    pub fn assert_clean(&self) {
        let violations = lock(&self.state).violations.clone();
        assert!(violations.is_empty(), "0.7 rules broken: {violations:#?}");
    }
}
