//! The handle tests hold: starts the tonic server on a socket it binds
//! itself, stops it and serves again on the same port, and exposes the
//! recorded state, the live stream and fault injection. These methods see
//! every runner at once (with one runner, simply the runner);
//! [`crate::RunnerView`] sees one runner of several.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use agent_runner_proto::runner::agent_runner_control_service_server::AgentRunnerControlServiceServer;
use agent_runner_proto::runner::{ClientMessage, ServerMessage, server_message};
use agent_runner_proto::runner_v07::agent_runner_control_service_server::AgentRunnerControlServiceServer as V07Server;
use anyhow::{Context as _, Result, bail};
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{Mutex, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::Status;
use tonic::transport::{Identity, Server, ServerTlsConfig};

use crate::acks::{AckMode, SequenceReport, Sequencing};
use crate::auth::{Identities, RunnerAuth};
use crate::config::{GithubInstallation, MockConfig};
use crate::prefix::{PrefixLayer, normalize};
use crate::runners::merged_report;
use crate::server::{GithubRpcs, MockService};
use crate::server_v07::MockServiceV07;
use crate::state::{Pushed, Registration, State, TimelineEvent, TimelineRef};
use crate::versions::{Outgoing, Protocol};

/// How long `stop()` lets open connections drain before cutting them.
const GRACEFUL_STOP: Duration = Duration::from_secs(5);

/// A running tonic server plus the way to stop it.
struct Serving {
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<Result<(), tonic::transport::Error>>,
}

/// The error of a send that did not say which of several connected runners
/// it is for.
#[derive(Debug)]
pub(crate) struct SeveralRunners(pub(crate) Vec<String>);

impl std::fmt::Display for SeveralRunners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "several runners are connected ({:?}): send through MockControlPlane::runner(name)",
            self.0
        )
    }
}

impl std::error::Error for SeveralRunners {}

/// A real `AgentRunnerControlService` on a local port. Dropping it stops the
/// server (without waiting); call [`MockControlPlane::stop`] to wait until the
/// port is free.
pub struct MockControlPlane {
    pub(crate) state: Arc<State>,
    addr: SocketAddr,
    prefix: Option<String>,
    /// The runners it tells apart, by secret.
    pub(crate) identities: Arc<Identities>,
    tls: Option<(String, String)>,
    delay_headers: bool,
    github: GithubRpcs,
    protocol: Protocol,
    /// [`MockConfig::stream_window`] (kept for restarts).
    stream_window: Option<u32>,
    serving: Mutex<Option<Serving>>,
}

/// Binds `addr` with `SO_REUSEADDR`, so a restart can take the same port at
/// once even while old connections linger in `TIME_WAIT`.
fn bind(addr: SocketAddr) -> Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .context("creating the listening socket")?;
    socket.set_reuseaddr(true).context("setting SO_REUSEADDR")?;
    socket
        .bind(addr)
        .with_context(|| format!("binding {addr}"))?;
    socket
        .listen(1024)
        .with_context(|| format!("listening on {addr}"))
}

impl MockControlPlane {
    /// Binds (`config.listen`, default `127.0.0.1:0`) and starts serving.
    pub async fn start(config: MockConfig) -> Result<MockControlPlane> {
        let listen = config
            .listen
            .unwrap_or(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0));
        let identities = Identities::new(config.bearer_secret, config.runners)
            .map_err(|why| anyhow::anyhow!("the mock's runners: {why}"))?;
        let listener = bind(listen)?;
        let addr = listener.local_addr().context("reading the bound address")?;
        let plane = MockControlPlane {
            state: Arc::new(State::new(
                config.github_installations,
                identities.names(),
                Sequencing::new(config.ack_mode, config.forget_acks_on_restart),
            )),
            addr,
            prefix: normalize(config.path_prefix.as_deref()),
            identities: Arc::new(identities),
            tls: config.tls,
            delay_headers: config.delay_headers,
            github: GithubRpcs::new(config.github_rpc_names),
            protocol: config.protocol,
            stream_window: config.stream_window,
            serving: Mutex::new(None),
        };
        plane
            .state
            .update(|inner| inner.read_delay = config.read_delay);
        let serving = plane.serve(listener)?;
        *plane.serving.lock().await = Some(serving);
        tracing::info!(url = %plane.url(), "mock control plane listening");
        Ok(plane)
    }

    fn serve(&self, listener: TcpListener) -> Result<Serving> {
        let mut builder = Server::builder()
            .initial_stream_window_size(self.stream_window)
            .initial_connection_window_size(self.stream_window);
        if let Some((cert, key)) = &self.tls {
            builder = builder
                .tls_config(ServerTlsConfig::new().identity(Identity::from_pem(cert, key)))
                .context("loading the TLS certificate and key")?;
        }
        // gRPC's default limits, on purpose: a message from the runner over
        // 4 MiB ends its stream, as it would with any control plane left at
        // its defaults (the runner caps every update under that).
        let service = MockService::new(self.state.clone(), self.delay_headers)
            .with_github(self.github.clone());
        let auth = RunnerAuth::new(self.identities.clone());
        let mut builder = builder.layer(PrefixLayer::new(self.prefix.clone()));
        let incoming = TcpListenerStream::new(listener).map(|accepted| {
            accepted.inspect(|stream| {
                // Small request/reply frames: do not let Nagle hold them back.
                let _ = stream.set_nodelay(true);
            })
        });
        let (shutdown, signal) = oneshot::channel::<()>();
        let signal = async move {
            let _ = signal.await;
        };
        // One service of the mock's version: a runner of the other version
        // meets a control plane that does not understand it, as it would.
        let task = match self.protocol {
            Protocol::V02 => tokio::spawn(
                builder
                    .add_service(AgentRunnerControlServiceServer::with_interceptor(
                        service, auth,
                    ))
                    .serve_with_incoming_shutdown(incoming, signal),
            ),
            Protocol::V07 => tokio::spawn(
                builder
                    .add_service(V07Server::with_interceptor(MockServiceV07(service), auth))
                    .serve_with_incoming_shutdown(incoming, signal),
            ),
        };
        Ok(Serving { shutdown, task })
    }

    /// The bound address (the port stays the same across restarts).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL a runner connects to: `http://127.0.0.1:PORT` (or `https`),
    /// followed by the path prefix if any. An unspecified listen address
    /// (`0.0.0.0`, `::`) is reported as loopback.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let ip = match self.addr.ip() {
            ip if ip.is_unspecified() && ip.is_ipv4() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            ip if ip.is_unspecified() => IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        let host = SocketAddr::new(ip, self.addr.port());
        format!("{scheme}://{host}{}", self.prefix.as_deref().unwrap_or(""))
    }

    /// The normalized path prefix (`"/grpc"`), if any.
    pub fn path_prefix(&self) -> Option<&str> {
        self.prefix.as_deref()
    }

    /// Whether the server is currently serving (false between `stop` and
    /// `restart`).
    pub async fn is_serving(&self) -> bool {
        self.serving.lock().await.is_some()
    }

    /// Shuts the server down gracefully and returns once the port is
    /// released. Every live stream ends with `UNAVAILABLE`. Connections that
    /// do not drain within a few seconds are cut. Stopping twice is a no-op.
    pub async fn stop(&self) -> Result<()> {
        let Some(serving) = self.serving.lock().await.take() else {
            return Ok(());
        };
        self.state
            .kill_stream(None, Status::unavailable("mock control plane stopped"));
        let _ = serving.shutdown.send(());
        let mut task = serving.task;
        let outcome = match tokio::time::timeout(GRACEFUL_STOP, &mut task).await {
            Ok(joined) => joined,
            Err(_elapsed) => {
                tracing::warn!("connections did not drain in {GRACEFUL_STOP:?}; cutting them");
                task.abort();
                task.await
            }
        };
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!(%err, "the server ended with an error"),
            Err(join) if join.is_cancelled() => {}
            Err(join) => tracing::warn!(%join, "the server task failed"),
        }
        tracing::info!(addr = %self.addr, "mock control plane stopped");
        Ok(())
    }

    /// Serves again on the same port, stopping first if still serving. The
    /// message log, registrations and fault settings are kept.
    pub async fn restart(&self) -> Result<()> {
        self.stop().await?;
        self.state.restarted();
        let mut serving = self.serving.lock().await;
        if serving.is_none() {
            let listener = bind(self.addr)?;
            *serving = Some(self.serve(listener)?);
            tracing::info!(url = %self.url(), "mock control plane restarted");
        }
        Ok(())
    }

    // ---- registration ----

    /// Every successful `RegisterRunner` call so far (of every runner; see
    /// [`Registration::runner`]), oldest first.
    pub fn registrations(&self) -> Vec<Registration> {
        self.state.lock().registrations.clone()
    }

    /// Waits until at least `n` registrations were recorded; returns them all.
    pub async fn wait_for_registrations(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<Registration>> {
        self.state
            .wait_until(Some(timeout), |inner| {
                (inner.registrations.len() >= n).then(|| inner.registrations.clone())
            })
            .await
            .ok_or_else(|| {
                self.state
                    .timeout_error(&format!("{n} registration(s)"), timeout)
            })
    }

    // ---- the ControlChannel stream ----

    /// Whether a runner's (any runner's) `ControlChannel` stream is live.
    pub fn is_connected(&self) -> bool {
        self.state.lock().is_connected()
    }

    /// Waits until a runner's `ControlChannel` stream is live.
    pub async fn wait_connected(&self, timeout: Duration) -> Result<()> {
        self.state
            .wait_until(Some(timeout), |inner| inner.is_connected().then_some(()))
            .await
            .ok_or_else(|| {
                self.state
                    .timeout_error("a live ControlChannel stream", timeout)
            })
    }

    /// Waits, without a timeout, until a runner's stream is live.
    pub(crate) async fn wait_connected_forever(&self) {
        self.state
            .wait_until(None, |inner| inner.is_connected().then_some(()))
            .await;
    }

    /// Waits until no `ControlChannel` stream (of any runner) is live.
    pub async fn wait_disconnected(&self, timeout: Duration) -> Result<()> {
        self.state
            .wait_until(Some(timeout), |inner| (!inner.is_connected()).then_some(()))
            .await
            .ok_or_else(|| {
                self.state
                    .timeout_error("the ControlChannel stream to end", timeout)
            })
    }

    /// How many `ControlChannel` streams were accepted so far, over all
    /// runners (reconnects count; rejected ones do not).
    pub fn connection_count(&self) -> u64 {
        self.state.lock().streams_opened
    }

    /// Waits until at least `n` `ControlChannel` streams were accepted and
    /// one is live: after a fault, `connection_count() + 1` waits for the
    /// runner's reconnect.
    pub async fn wait_for_connections(&self, n: u64, timeout: Duration) -> Result<()> {
        self.state
            .wait_until(Some(timeout), |inner| {
                (inner.streams_opened >= n && inner.is_connected()).then_some(())
            })
            .await
            .ok_or_else(|| {
                self.state
                    .timeout_error(&format!("ControlChannel stream #{n}"), timeout)
            })
    }

    /// Pushes `message` into the live stream. Fails when no runner is
    /// connected, when several are (say which: [`crate::RunnerView::send`]),
    /// or when the stream has just closed.
    /// A 0.2 message sent to a 0.7 mock is converted ([`crate::versions::to_v07`]);
    /// one 0.7 does not have is refused.
    pub async fn send(&self, message: impl Into<Outgoing>) -> Result<()> {
        self.send_to(None, message.into()).await
    }

    /// The protocol version this mock serves.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// Pushes `message` into runner `r`'s live stream (`None`: the only
    /// live one), in the mock's version.
    pub(crate) async fn send_to(&self, r: Option<usize>, message: Outgoing) -> Result<()> {
        let message = message
            .into_protocol(self.protocol)
            .map_err(anyhow::Error::msg)?;
        tracing::debug!(?message, runner = ?r, "sending");
        match self.state.push(r, message) {
            Pushed::Done => Ok(()),
            Pushed::NotConnected => bail!("no runner is connected to the ControlChannel"),
            Pushed::Ambiguous(names) => Err(SeveralRunners(names).into()),
            Pushed::Closed => {
                bail!("the ControlChannel stream closed before the message could be sent")
            }
            Pushed::Full(r, tx, message) => {
                let message = *message;
                if tx.send(message.clone()).await.is_err() {
                    bail!("the ControlChannel stream closed before the message could be sent");
                }
                self.state.record_sent(r, &message);
                Ok(())
            }
        }
    }

    /// `send(ServerMessage { request_id, request: Some(request) })`.
    pub async fn send_request(
        &self,
        request_id: impl Into<String>,
        request: server_message::Request,
    ) -> Result<()> {
        self.send(ServerMessage {
            request_id: request_id.into(),
            request: Some(request),
            acked_sequence: 0,
        })
        .await
    }

    /// Every `ServerMessage` handed to a live stream (of any runner) so far.
    pub fn sent(&self) -> Vec<ServerMessage> {
        self.state
            .lock()
            .sent
            .iter()
            .map(|(_, m)| m.clone())
            .collect()
    }

    // ---- received messages ----

    /// Every `ClientMessage` received (and processed) so far, from every
    /// runner; a message's position is its index
    /// ([`MockControlPlane::runner_of`] says who sent it).
    pub fn received(&self) -> Vec<ClientMessage> {
        self.state
            .lock()
            .received
            .iter()
            .map(|r| r.message.clone())
            .collect()
    }

    /// How many `ClientMessage`s were received so far: the index the next one
    /// will get (a cursor for [`MockControlPlane::wait_for_after`]).
    pub fn received_count(&self) -> usize {
        self.state.lock().received.len()
    }

    /// Received messages that broke their `buf.validate` rules, as
    /// `(index, violations)`. A correct runner leaves this empty.
    pub fn invalid_received(&self) -> Vec<(usize, String)> {
        self.state
            .lock()
            .received
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.violations.clone().map(|v| (i, v)))
            .collect()
    }

    /// The first received message (from the start of the log) matching
    /// `pred`, waiting up to `timeout` for it.
    pub async fn wait_for(
        &self,
        pred: impl Fn(&ClientMessage) -> bool,
        timeout: Duration,
    ) -> Result<ClientMessage> {
        self.wait_for_after(0, pred, timeout)
            .await
            .map(|(_, message)| message)
    }

    /// The first message with index `>= index` matching `pred`, with its
    /// index, waiting up to `timeout` for it.
    pub async fn wait_for_after(
        &self,
        index: usize,
        pred: impl Fn(&ClientMessage) -> bool,
        timeout: Duration,
    ) -> Result<(usize, ClientMessage)> {
        let mut next = index;
        self.state
            .wait_until(Some(timeout), |inner| {
                let found = inner
                    .received
                    .iter()
                    .enumerate()
                    .skip(next)
                    .find(|(_, r)| pred(&r.message))
                    .map(|(i, r)| (i, r.message.clone()));
                next = next.max(inner.received.len());
                found
            })
            .await
            .ok_or_else(|| {
                self.state
                    .timeout_error(&format!("a matching message at index >= {index}"), timeout)
            })
    }

    /// Waits until `n` received messages (from the start of the log) match
    /// `pred`; returns the first `n` of them.
    pub async fn wait_for_count(
        &self,
        pred: impl Fn(&ClientMessage) -> bool,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<ClientMessage>> {
        let mut next = 0;
        let mut found = Vec::new();
        self.state
            .wait_until(Some(timeout), |inner| {
                for r in inner.received.iter().skip(next) {
                    if found.len() < n && pred(&r.message) {
                        found.push(r.message.clone());
                    }
                }
                next = next.max(inner.received.len());
                (found.len() >= n).then(|| found.clone())
            })
            .await
            .ok_or_else(|| {
                self.state
                    .timeout_error(&format!("{n} matching message(s)"), timeout)
            })
    }

    /// Everything that happened so far, in order (what `--stdio` prints).
    pub fn timeline(&self) -> Vec<TimelineEvent> {
        self.state.lock().timeline_from(0)
    }

    /// Timeline events from position `from` on, waiting (forever when
    /// `timeout` is `None`) until there is at least one. Empty on timeout.
    pub async fn wait_timeline(
        &self,
        from: usize,
        timeout: Option<Duration>,
    ) -> Vec<TimelineEvent> {
        self.state
            .wait_until(timeout, |inner| {
                (inner.timeline_len() > from).then(|| inner.timeline_from(from))
            })
            .await
            .unwrap_or_default()
    }

    /// Like [`MockControlPlane::wait_timeline`], but each event is shown
    /// to `visit` in place instead of copied out: for a follower of a long
    /// flood (a benchmark's counter) that needs little of each message. It
    /// runs under the mock's lock, which the stream's reader also takes:
    /// keep it short. Returns the position after the last event shown
    /// (`from` on timeout).
    pub async fn visit_timeline(
        &self,
        from: usize,
        timeout: Option<Duration>,
        mut visit: impl FnMut(TimelineRef<'_>),
    ) -> usize {
        self.state
            .wait_until(timeout, |inner| {
                (inner.timeline_len() > from).then(|| inner.visit_from(from, &mut visit))
            })
            .await
            .unwrap_or(from)
    }

    // ---- fault injection ----

    /// Ends the live server→runner stream (every runner's) with
    /// `UNAVAILABLE`, as a broken link would. Returns whether a stream was
    /// live.
    pub fn drop_stream(&self) -> bool {
        self.drop_stream_with(Status::unavailable(
            "stream dropped by the mock control plane",
        ))
    }

    /// Ends the live stream (every runner's) with `status`. Returns whether
    /// a stream was live.
    pub fn drop_stream_with(&self, status: Status) -> bool {
        self.state.kill_stream(None, status)
    }

    /// From now on `RegisterRunner` fails with `status` (`None`: succeeds
    /// again).
    pub fn fail_register_with(&self, status: Option<Status>) {
        self.state.update(|inner| inner.fail_register = status);
    }

    /// From now on new `ControlChannel` calls are rejected with `status`
    /// (`None`: accepted again). The live stream, if any, is left alone.
    pub fn fail_stream_with(&self, status: Option<Status>) {
        self.state.update(|inner| inner.fail_stream = status);
    }

    /// From now on, a `ClientMessage` matching `rejects` is not processed
    /// (neither logged nor acknowledged): its stream ends with
    /// `INVALID_ARGUMENT` and nothing after it on that stream is read, as a
    /// control plane that cannot take an update would.
    pub fn reject_matching(
        &self,
        rejects: impl Fn(&ClientMessage) -> bool + Send + Sync + 'static,
    ) {
        let rejects: crate::state::Rejects = Arc::new(rejects);
        self.state.update(|inner| inner.reject = Some(rejects));
    }

    /// From now on every `ClientMessage` is taken again.
    pub fn accept_all(&self) {
        self.state.update(|inner| inner.reject = None);
    }

    /// How many messages [`MockControlPlane::reject_matching`] rejected.
    pub fn rejected_count(&self) -> usize {
        self.state.lock().rejected
    }

    // ---- acknowledged delivery ----

    /// From now on, treat acknowledged delivery this way (a change of
    /// acceptance applies from the next registration; acknowledging starts
    /// or stops at once).
    pub fn set_ack_mode(&self, mode: AckMode) {
        self.state.update(|inner| {
            for runner in &mut inner.runners {
                runner.sequencing.mode = mode;
            }
        });
        // Wake the acknowledgers so a switch to acknowledging acts now.
        self.state.nudge_acks();
    }

    /// What the sequence check saw so far: the highest processed number,
    /// duplicates dropped, gaps, unnumbered messages, acknowledgements sent.
    /// With several runners, their reports summed (duplicates, unnumbered,
    /// acknowledgements added up, gaps of each, the highest mark of any):
    /// [`crate::RunnerView::sequence_report`] gives one runner's.
    pub fn sequence_report(&self) -> SequenceReport {
        merged_report(&self.state.lock().runners)
    }

    // ---- GitHub ----

    /// Replaces the GitHub installations served from now on.
    pub fn set_github_installations(&self, installations: Vec<GithubInstallation>) {
        self.state.update(|inner| inner.github = installations);
    }

    /// The installation ids of every `GetGithubInstallationAccessTokenForRunner`
    /// call so far (found or not).
    pub fn github_token_requests(&self) -> Vec<i64> {
        self.state.lock().token_requests.clone()
    }

    /// The name of every GitHub RPC called so far, in order, served or
    /// answered `UNIMPLEMENTED` (see [`crate::GithubRpcNames`]).
    pub fn github_rpc_calls(&self) -> Vec<String> {
        self.github.calls()
    }
}

impl Drop for MockControlPlane {
    fn drop(&mut self) {
        if let Some(serving) = self.serving.get_mut().take() {
            self.state
                .kill_stream(None, Status::unavailable("mock control plane dropped"));
            let _ = serving.shutdown.send(());
        }
    }
}

impl std::fmt::Debug for MockControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockControlPlane")
            .field("url", &self.url())
            .field("connected", &self.is_connected())
            .finish_non_exhaustive()
    }
}
