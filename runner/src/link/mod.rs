//! The control-plane link: register, open the ControlChannel, serve it, and
//! start over whenever it drops, for the runner's whole life.
//!
//! One session = `RegisterRunner` (with fresh SDK descriptions) → open
//! `ControlChannel` → read requests (each handed to [`crate::dispatch`],
//! which never waits) while the outbox feeds the outbound half. On any loss
//! the runner waits a jittered, doubling delay (`backon`; reset once a
//! channel stayed up for [`HEALTHY_AFTER`]) and starts a new session.
//! `UNAUTHENTICATED` and `PERMISSION_DENIED` are terminal.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use agent_runner_proto::runner::{AgentSdk, ClientMessage, RegisterRunnerRequest};
use agent_runner_proto::{Validate, violations};
use backon::{BackoffBuilder, ExponentialBuilder};
use futures::Stream;
use sdk_adapter::SdkDescription;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use crate::client::Client;
use crate::config::RunConfig;
use crate::outbox::Outbox;
use crate::redact::Redactor;
use crate::runtime::Runtime;
use crate::updates;

/// A channel that stayed open this long resets the reconnect backoff.
pub const HEALTHY_AFTER: Duration = Duration::from_secs(10);

pub use crate::link_state::LinkState;

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
    client: Client,
    min_delay: Duration,
    max_delay: Duration,
    state: watch::Sender<LinkState>,
}

impl Link {
    /// A link over `client` (its channel connects lazily, on first use).
    pub fn new(rt: Arc<Runtime>, client: Client, config: &RunConfig) -> Self {
        Self {
            rt,
            client,
            min_delay: config.reconnect_min_delay,
            max_delay: config.reconnect_max_delay,
            state: watch::Sender::new(LinkState::Connecting),
        }
    }

    /// What the link is doing, as it changes.
    pub fn state(&self) -> watch::Receiver<LinkState> {
        self.state.subscribe()
    }

    fn set_state(&self, state: LinkState) {
        self.state.send_replace(state);
        crate::metrics::link_state(state);
    }

    /// The ControlChannel counts as open from now.
    fn channel_open(&self) -> Instant {
        self.set_state(LinkState::Connected);
        tracing::info!("control channel open");
        Instant::now()
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
            match self.session(&close).await {
                SessionEnd::Closed => break,
                SessionEnd::Refused(r) => {
                    self.set_state(LinkState::Closed);
                    return Err(r);
                }
                SessionEnd::Lost { healthy } => {
                    if healthy {
                        backoff = self.backoff();
                    }
                    crate::metrics::reconnect();
                    let delay = next_delay(&mut backoff, self.max_delay);
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

    async fn session(&self, close: &CancellationToken) -> SessionEnd {
        let mut client = self.client.clone();
        let descriptions = self.rt.sdks.describe_all().await;
        let request = RegisterRunnerRequest {
            agent_sdks: descriptions.into_iter().map(agent_sdk).collect(),
            features: Vec::new(),
        };
        let registered = tokio::select! {
            r = client.register_runner(request) => r,
            () = close.cancelled() => return SessionEnd::Closed,
        };
        if let Err(status) = registered {
            crate::metrics::register_failed(status.code());
            return lost_or_refused("RegisterRunner", status);
        }
        self.set_state(LinkState::Registered);
        tracing::info!("registered with the control plane");

        // The outbound half pulls from the outbox until this session ends.
        let session_over = CancellationToken::new();
        let outbound = outbound(
            self.rt.outbox.clone(),
            self.rt.redactor.clone(),
            session_over.clone(),
            close.clone(),
        );
        let _stop_outbound = session_over.clone().drop_guard();
        // The channel is open once the transport accepted the call, which
        // is when it first asks the outbound half for a message. Response
        // headers are no signal: grpc-go and grpcio servers send them only
        // with their first message, which an idle control plane may never
        // send.
        let (accepted_tx, mut accepted) = oneshot::channel();
        let opening = client.control_channel(Announced {
            inner: Box::pin(outbound),
            first_poll: Some(accepted_tx),
        });
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
            Err(status) => return lost_or_refused("ControlChannel", status),
        };
        let opened = opened.unwrap_or_else(|| self.channel_open());
        let healthy = || opened.elapsed() >= HEALTHY_AFTER;
        loop {
            let next = tokio::select! {
                next = inbound.message() => next,
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
                Ok(Some(msg)) => crate::dispatch::dispatch(&self.rt, msg),
                Ok(None) => {
                    tracing::warn!("control plane closed the channel");
                    return SessionEnd::Lost { healthy: healthy() };
                }
                Err(status) => {
                    return match lost_or_refused("ControlChannel", status) {
                        SessionEnd::Lost { .. } => SessionEnd::Lost { healthy: healthy() },
                        other => other,
                    };
                }
            }
        }
    }
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

fn lost_or_refused(rpc: &str, status: tonic::Status) -> SessionEnd {
    match status.code() {
        Code::Unauthenticated | Code::PermissionDenied => SessionEnd::Refused(Refused {
            code: status.code(),
            message: status.message().to_owned(),
        }),
        code => {
            tracing::warn!(
                rpc,
                ?code,
                grpc_message = status.message(),
                "control plane link lost"
            );
            SessionEnd::Lost { healthy: false }
        }
    }
}

/// The runner → control plane half of one session: outbox updates, each
/// with every known secret masked (the one place outbound text is redacted,
/// whoever produced it) and checked against its `buf.validate` rules (a
/// violation is a runner bug: it is logged and not sent). Ends when the
/// session ends, or when shutdown asked to close and the outbox is empty (a
/// clean half-close).
fn outbound(
    outbox: Arc<Outbox>,
    redactor: Redactor,
    session_over: CancellationToken,
    close: CancellationToken,
) -> impl Stream<Item = ClientMessage> + Send + Sync + 'static {
    let state = Outbound {
        outbox,
        redactor,
        session_over,
        close,
    };
    // Boxing each step as `dyn Future + Send` sidesteps a compiler
    // limitation in proving the unboxed future Send (rust-lang/rust#102211).
    futures::stream::unfold(state, |s| Box::pin(next_outbound(s)) as NextOutbound)
}

type NextOutbound =
    Pin<Box<dyn std::future::Future<Output = Option<(ClientMessage, Outbound)>> + Send + Sync>>;

struct Outbound {
    outbox: Arc<Outbox>,
    redactor: Redactor,
    session_over: CancellationToken,
    close: CancellationToken,
}

async fn next_outbound(s: Outbound) -> Option<(ClientMessage, Outbound)> {
    loop {
        let mut msg = tokio::select! {
            biased;
            () = s.session_over.cancelled() => return None,
            msg = s.outbox.pop() => msg,
            () = s.close.cancelled(), if s.outbox.is_empty() => {
                s.session_over.cancel();
                return None;
            }
        };
        updates::redact(&mut msg, &s.redactor);
        match msg.validate() {
            Ok(()) => {
                tracing::trace!(kind = updates::kind(&msg), "update sent");
                crate::metrics::update_sent(&msg);
                return Some((msg, s));
            }
            Err(err) => {
                crate::metrics::invalid_update(&msg);
                tracing::error!(
                    kind = updates::kind(&msg),
                    violations = %violations(&err),
                    "bug: invalid update not sent"
                );
            }
        }
    }
}

/// What registration says about one SDK.
pub fn agent_sdk(d: SdkDescription) -> AgentSdk {
    updates::agent_sdk(d)
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
        let outbox = Arc::new(Outbox::new(16));
        let redactor = Redactor::new();
        let token = "ghs_outbound_boundary_test_token";
        redactor.add(token);
        // An agent-level error (not a thread's update) quoting the token.
        outbox.push_reply(updates::request_error(
            Some("r1".into()),
            format!("skill install failed: https://x-access-token:{token}@github.com/o/r"),
        ));
        let stream = outbound(
            outbox,
            redactor,
            CancellationToken::new(),
            CancellationToken::new(),
        );
        tokio::pin!(stream);
        let msg = stream.next().await.expect("one message");
        let text = format!("{msg:?}");
        assert!(!text.contains(token), "{text}");
        assert!(text.contains("x-access-token:***@"), "{text}");
    }
}
