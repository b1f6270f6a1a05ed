//! The control-plane link: register, open the ControlChannel, serve it, and
//! start over whenever it drops, for the runner's whole life.
//!
//! One session = `RegisterRunner` (with fresh SDK descriptions) → open
//! `ControlChannel` → read requests (each handed to [`crate::tasks::dispatch`],
//! which never waits) while the outbox feeds the outbound half. On any loss
//! the runner waits a jittered, doubling delay (`backon`; reset once a
//! channel stayed up for [`HEALTHY_AFTER`]) and starts a new session.
//! `UNAUTHENTICATED` and `PERMISSION_DENIED` are terminal.
//!
//! Every registration offers acknowledged delivery (`acked-delivery/1`)
//! and approvals (`approvals/1`, [`crate::tasks::approvals`]);
//! what is sent, re-sent, numbered and kept until delivery is settled is
//! [`crate::delivery::sending`]'s business: the link asks it for the next
//! batch, hands it `acked_sequence` and tells it when a connection ends,
//! and answers nothing to a message that carries only an acknowledgement.

mod outbound;
pub(crate) mod problem;
pub mod v07;
pub(crate) mod wire;

// The outbound path is the delivery module's (`crate::delivery::sending`);
// named here too for the library's users (the fuzz harness).
pub use crate::delivery::outgoing::Outgoing;
pub use crate::delivery::sending::{ACKED_DELIVERY, Batch, Sending};

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use agent_runner_proto::APPROVALS;
use agent_runner_proto::runner::RegisterRunnerRequest;
use backon::{BackoffBuilder, ExponentialBuilder};
use futures::Stream;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use crate::config::{Protocol, RunConfig};
use crate::delivery::in_flight::Mode;
use crate::host::client::Service;
use crate::tasks::context::Runtime;

use self::outbound::outbound;

/// A channel that stayed open this long resets the reconnect backoff.
pub const HEALTHY_AFTER: Duration = Duration::from_secs(10);

pub use crate::observe::link_state::{LinkProblem, LinkReport, LinkState};

/// A reason to stop for good.
#[derive(Debug, thiserror::Error)]
#[error("control plane refused the runner ({code:?}): {message}")]
pub struct Refused {
    /// The gRPC code (`UNAUTHENTICATED` or `PERMISSION_DENIED`).
    pub code: Code,
    /// The control plane's message.
    pub message: String,
}

enum SessionEnd {
    /// The link dropped; `healthy` if the channel had been up a while.
    Lost {
        healthy: bool,
    },
    Refused(Refused),
    /// Shutdown asked for it and the channel was closed cleanly.
    Closed,
}

/// The control-plane link (see the module doc).
pub struct Link {
    rt: Arc<Runtime>,
    service: Service,
    min_delay: Duration,
    max_delay: Duration,
    state: watch::Sender<LinkState>,
    sending: Arc<Sending>,
    /// Where it dials, the last failure, the next attempt.
    report: Arc<LinkReport>,
    /// Registered at least once: failures after that are a lost link, not
    /// an unreachable control plane.
    ever_registered: std::sync::atomic::AtomicBool,
    /// The protocol version spoken (`--protocol`).
    protocol: Protocol,
}

/// What a registration answered: the features accepted, the sequence
/// acknowledged.
struct Registered {
    features: Vec<String>,
    acked_sequence: u64,
}

/// A `ServerMessage` of either protocol version: how the read loop hands
/// it on.
trait Inbound: prost::Message + Default + Send + 'static {
    fn received(self, rt: &Arc<Runtime>, sending: &Sending, mode: Mode);
}

impl Inbound for agent_runner_proto::runner::ServerMessage {
    fn received(self, rt: &Arc<Runtime>, sending: &Sending, mode: Mode) {
        on_server_message(rt, sending, mode, self);
    }
}

impl Inbound for agent_runner_proto::runner_v07::ServerMessage {
    fn received(self, rt: &Arc<Runtime>, sending: &Sending, _mode: Mode) {
        v07::on_server_message(rt, sending, self);
    }
}

impl Link {
    /// A link over `service` (its channel connects lazily, on first use),
    /// sending through `sending` (which reads `rt`'s outbox).
    pub fn new(
        rt: Arc<Runtime>,
        service: Service,
        config: &RunConfig,
        sending: Arc<Sending>,
    ) -> Self {
        Self {
            rt,
            service,
            min_delay: config.reconnect_min_delay,
            max_delay: config.reconnect_max_delay,
            state: watch::Sender::new(LinkState::Connecting),
            sending,
            report: Arc::new(LinkReport::new(format!(
                "{}{}",
                config.control_plane.origin, config.control_plane.path_prefix
            ))),
            ever_registered: std::sync::atomic::AtomicBool::new(false),
            protocol: config.protocol,
        }
    }

    /// What the link is doing, as it changes.
    pub fn state(&self) -> watch::Receiver<LinkState> {
        self.state.subscribe()
    }

    fn set_state(&self, state: LinkState) {
        self.state.send_replace(state);
        crate::observe::metrics::link_state(state);
    }

    /// The ControlChannel counts as open from now.
    fn channel_open(&self) -> Instant {
        self.set_state(LinkState::Connected);
        tracing::info!("control channel open");
        Instant::now()
    }

    /// Where it dials, the last failure and the next attempt (for `/status`).
    pub fn report(&self) -> Arc<LinkReport> {
        self.report.clone()
    }

    /// A failed RPC: a `Refused` ends the link; anything else is said
    /// (where, why, the likely fix), recorded for `/status`, and retried.
    fn lost_or_refused(&self, rpc: &str, status: tonic::Status) -> SessionEnd {
        match status.code() {
            Code::Unauthenticated | Code::PermissionDenied => SessionEnd::Refused(Refused {
                code: status.code(),
                message: status.message().to_owned(),
            }),
            code => {
                let ever = self
                    .ever_registered
                    .load(std::sync::atomic::Ordering::Relaxed);
                let text = problem::describe(&self.report.snapshot().url, rpc, &status, ever);
                tracing::warn!(rpc, ?code, "{text}");
                self.report.failed(text);
                SessionEnd::Lost { healthy: false }
            }
        }
    }

    fn backoff(&self) -> backon::ExponentialBackoff {
        reconnect_backoff(self.min_delay, self.max_delay)
    }

    /// Run sessions until `close` is cancelled (then close the channel
    /// cleanly once the outbox is flushed) or the control plane refuses us.
    pub async fn run(&self, close: CancellationToken) -> Result<(), Refused> {
        let mut backoff = self.backoff();
        loop {
            self.set_state(LinkState::Connecting);
            self.report.attempting();
            let end = self.session(&close).await;
            // Whatever was sent and is not settled goes again, first, on the
            // next connection (a legacy clean close settles it instead).
            self.sending
                .connection_ended(matches!(end, SessionEnd::Closed));
            match end {
                SessionEnd::Closed => break,
                SessionEnd::Refused(r) => {
                    self.set_state(LinkState::Closed);
                    return Err(r);
                }
                SessionEnd::Lost { healthy } => {
                    if healthy {
                        backoff = self.backoff();
                    }
                    crate::observe::metrics::reconnect();
                    let delay = next_delay(&mut backoff, self.max_delay);
                    self.report.retry_in(delay);
                    tracing::info!(
                        delay_ms = delay.as_millis() as u64,
                        "reconnecting to the control plane"
                    );
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = close.cancelled() => break,
                    }
                }
            }
        }
        self.set_state(LinkState::Closed);
        Ok(())
    }

    /// `RegisterRunner` in the protocol version spoken.
    async fn register(&self) -> Result<Registered, tonic::Status> {
        let features = vec![ACKED_DELIVERY.to_owned(), APPROVALS.to_owned()];
        if let (Protocol::V07, Some(thread_only)) = (self.protocol, self.rt.thread_only()) {
            let request = v07::registration(&self.rt, thread_only, features);
            let mut client = agent_runner_proto::runner_v07::agent_runner_control_service_client::AgentRunnerControlServiceClient::new(self.service.clone())
                .max_decoding_message_size(crate::host::client::MAX_DECODING_MESSAGE_SIZE);
            let r = client.register_runner(request).await?.into_inner();
            return Ok(Registered {
                features: r.features,
                acked_sequence: r.acked_sequence,
            });
        }
        let mut client = crate::host::client::rpc(self.service.clone());
        // What is known now; slow probes answer later (`agent_sdk_update`).
        let descriptions = crate::tasks::sdk_probe::for_registration(&self.rt);
        let request = RegisterRunnerRequest {
            agent_sdks: descriptions
                .into_iter()
                .map(|d| {
                    let mut sdk = crate::delivery::messages::agent_sdk(d);
                    crate::delivery::messages::redact_sdk(&mut sdk, &self.rt.redactor);
                    sdk
                })
                .collect(),
            features,
        };
        let r = client.register_runner(request).await?.into_inner();
        Ok(Registered {
            features: r.features,
            acked_sequence: r.acked_sequence,
        })
    }

    async fn session(&self, close: &CancellationToken) -> SessionEnd {
        match self.protocol {
            Protocol::V02 => {
                self.session_of::<agent_runner_proto::runner::ServerMessage>(close)
                    .await
            }
            Protocol::V07 => {
                self.session_of::<agent_runner_proto::runner_v07::ServerMessage>(close)
                    .await
            }
        }
    }

    async fn session_of<M: Inbound>(&self, close: &CancellationToken) -> SessionEnd {
        let registered = tokio::select! {
            r = self.register() => r,
            () = close.cancelled() => return SessionEnd::Closed,
        };
        let registered = match registered {
            Ok(registered) => registered,
            Err(status) => {
                crate::observe::metrics::register_failed(status.code());
                return self.lost_or_refused("RegisterRunner", status);
            }
        };
        self.set_state(LinkState::Registered);
        self.ever_registered
            .store(true, std::sync::atomic::Ordering::Relaxed);
        crate::tasks::sdk_probe::probe_pending(&self.rt);
        let accepted = registered.features.iter().any(|f| f == ACKED_DELIVERY);
        let mode = self.sending.registered(accepted, registered.acked_sequence);
        let approvals = registered.features.iter().any(|f| f == APPROVALS);
        crate::tasks::approvals::registered(&self.rt, approvals, accepted);
        tracing::info!(
            acked_delivery = accepted,
            approvals,
            "registered with the control plane"
        );

        // The outbound half pulls from the outbox until this session ends.
        let session_over = CancellationToken::new();
        let outbound = outbound(self.sending.clone(), session_over.clone(), close.clone());
        let _stop_outbound = session_over.clone().drop_guard();
        // The channel is open once the transport accepted the call, which
        // is when it first asks the outbound half for a message. Response
        // headers are no signal: grpc-go and grpcio servers send them only
        // with their first message, which an idle control plane may never
        // send.
        let (accepted_tx, mut accepted) = oneshot::channel();
        let opening = wire::control_channel::<M>(
            self.service.clone(),
            Announced {
                inner: Box::pin(outbound),
                first_poll: Some(accepted_tx),
            },
        );
        tokio::pin!(opening);
        let mut opened = None;
        let response = loop {
            tokio::select! {
                r = &mut opening => break r,
                Ok(()) = &mut accepted, if opened.is_none() => {
                    opened = Some(self.channel_open());
                }
                () = close.cancelled() => return SessionEnd::Closed,
            }
        };
        let mut inbound = match response {
            Ok(response) => response.into_inner(),
            Err(status) => return self.lost_or_refused("ControlChannel", status),
        };
        let opened = opened.unwrap_or_else(|| self.channel_open());
        let healthy = || opened.elapsed() >= HEALTHY_AFTER;
        // Legacy mode: sent terminal updates settle once past their window.
        // Acknowledged ones settle on their acknowledgement: no timer, so an
        // idle runner in acked mode is not woken every second for nothing.
        let legacy = matches!(mode, Mode::Legacy { .. });
        let mut settle = tokio::time::interval(Duration::from_secs(1));
        settle.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let next = tokio::select! {
                next = inbound.message() => next,
                _ = settle.tick(), if legacy => {
                    self.sending.settle_expired();
                    continue;
                }
                () = session_over.cancelled() => {
                    // The outbound half finished: shutdown flushed the outbox
                    // and half-closed; give the server a moment to close too.
                    let _ = tokio::time::timeout(Duration::from_secs(2), async {
                        while let Ok(Some(_)) = inbound.message().await {}
                    }).await;
                    return SessionEnd::Closed;
                }
            };
            match next {
                Ok(Some(msg)) => msg.received(&self.rt, &self.sending, mode),
                Ok(None) => {
                    tracing::warn!("control plane closed the channel");
                    return SessionEnd::Lost { healthy: healthy() };
                }
                Err(status) => {
                    return match self.lost_or_refused("ControlChannel", status) {
                        SessionEnd::Lost { .. } => SessionEnd::Lost { healthy: healthy() },
                        other => other,
                    };
                }
            }
        }
    }
}

/// What the read loop does with one `ServerMessage` (public for the fuzz
/// harness): its acknowledgement goes to `sending` (which ignores one that
/// makes no sense, or one in legacy mode, with a log line); in acked mode a
/// message carrying nothing but an acknowledgement gets no answer; the rest
/// is dispatched. Never waits.
pub fn on_server_message(
    rt: &Arc<Runtime>,
    sending: &Sending,
    mode: Mode,
    msg: agent_runner_proto::runner::ServerMessage,
) {
    if msg.acked_sequence != 0 {
        sending.ack(msg.acked_sequence);
        if mode == Mode::Acked && msg.request.is_none() && msg.request_id.is_empty() {
            return;
        }
    }
    crate::tasks::dispatch::dispatch(rt, msg);
}

/// Jittered delays doubling from `min` (see [`next_delay`] for the cap).
fn reconnect_backoff(min: Duration, max: Duration) -> backon::ExponentialBackoff {
    ExponentialBuilder::default()
        .with_min_delay(min)
        .with_max_delay(max)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .build()
}

/// The next reconnect delay. backon applies its jitter after the cap (up to
/// twice the maximum was seen); the maximum is a maximum, so clamp here.
fn next_delay(backoff: &mut backon::ExponentialBackoff, max: Duration) -> Duration {
    backoff.next().unwrap_or(max).min(max)
}

/// The outbound half, telling `first_poll` when the transport first asks
/// it for a message (the call was accepted).
struct Announced<S> {
    inner: Pin<Box<S>>,
    first_poll: Option<oneshot::Sender<()>>,
}

impl<S: Stream> Stream for Announced<S> {
    type Item = S::Item;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<S::Item>> {
        if let Some(tx) = self.first_poll.take() {
            let _ = tx.send(());
        }
        self.inner.as_mut().poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    #[test]
    fn reconnect_delays_never_exceed_the_maximum() {
        let (min, max) = (Duration::from_millis(10), Duration::from_millis(80));
        let mut backoff = reconnect_backoff(min, max);
        let delays: Vec<Duration> = (0..200).map(|_| next_delay(&mut backoff, max)).collect();
        assert!(delays.iter().all(|d| *d <= max), "{delays:?}");
        assert!(delays.contains(&max), "the cap is reached");
        // What the clamp is for: the raw sequence overshoots.
        let mut raw = reconnect_backoff(min, max);
        assert!(
            (0..200).filter_map(|_| raw.next()).any(|d| d > max),
            "backon no longer overshoots its maximum; the clamp may go"
        );
    }

    #[tokio::test]
    async fn every_outbound_message_is_redacted_whoever_made_it() {
        let redactor = crate::util::redact::Redactor::new();
        let outbox = Arc::new(crate::delivery::outbox::Outbox::new(16, redactor.clone()));
        let token = "ghs_outbound_boundary_test_token";
        redactor.add(token);
        // An agent-level error (not a thread's update) quoting the token.
        outbox.push_reply(crate::delivery::messages::request_error(
            Some("r1".into()),
            format!("skill install failed: https://x-access-token:{token}@github.com/o/r"),
        ));
        // A thread title an agent made from what it read.
        outbox.push_reply(crate::delivery::messages::thread_name(
            None,
            "thr-1",
            Some(format!("Rotate {token}")),
        ));
        let sending = Arc::new(Sending::new(
            outbox,
            None,
            crate::delivery::journal::Recovered::default(),
            Duration::from_secs(30),
        ));
        let stream = outbound(sending, CancellationToken::new(), CancellationToken::new());
        tokio::pin!(stream);
        let msg = stream.next().await.expect("one message");
        let text = format!("{msg:?}");
        assert!(!text.contains(token), "{text}");
        assert!(text.contains("x-access-token:***@"), "{text}");
        let named = stream.next().await.expect("the thread name");
        let text = format!("{named:?}");
        assert!(!text.contains(token), "{text}");
        assert!(text.contains("Rotate ***"), "{text}");
    }
}
