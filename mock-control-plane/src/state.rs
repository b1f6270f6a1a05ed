//! Everything a mock control plane remembers and everything a test waits on:
//! the registrations, the log of received `ClientMessage`s, the one live
//! `ControlChannel` stream, fault settings, and the wakeups that let waiters
//! sleep until something changes (a `watch` generation counter, no polling).
//!
//! The state outlives the tonic server: `stop()`/`restart()` keep it, so a
//! test sees one continuous log across restarts.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_runner_proto::runner::{ClientMessage, RegisterRunnerRequest, ServerMessage};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tonic::Status;

use crate::acks::Sequencing;
use crate::config::GithubInstallation;

/// How many ServerMessages may wait in a live stream before `send` waits.
const OUTBOUND_BUFFER: usize = 1024;
/// How many received messages a timeout error shows.
const RECENT_IN_ERRORS: usize = 20;

/// One `RegisterRunner` call that reached the service.
#[derive(Clone, Debug)]
pub struct Registration {
    /// What the runner registered with.
    pub request: RegisterRunnerRequest,
    /// The call's ASCII metadata (lower-case header name → value; repeated
    /// headers joined with `", "`). Includes `authorization` when sent.
    pub metadata: BTreeMap<String, String>,
    /// `buf.validate` violations of the request, if it broke any rule.
    pub violations: Option<String>,
}

/// Everything that happened, in order: what the binary's `--stdio` mode
/// prints.
#[derive(Clone, Debug)]
pub enum TimelineEvent {
    /// A `RegisterRunner` call succeeded.
    Registered(Registration),
    /// A `ControlChannel` stream became the live one (`stream` counts from 1).
    Connected {
        /// Which stream (1 for the first).
        stream: u64,
    },
    /// The live stream ended (runner left, `drop_stream`, `stop`, replaced).
    Disconnected {
        /// Which stream.
        stream: u64,
    },
    /// A `ClientMessage` arrived; `index` is its position in the log.
    Received {
        /// Its position in the log.
        index: usize,
        /// The message.
        message: ClientMessage,
        /// Its buf.validate violations, if any (a runner bug).
        violations: Option<String>,
    },
    /// A `ServerMessage` was handed to the live stream.
    Sent(ServerMessage),
}

/// A timeline event seen in place ([`crate::MockControlPlane::visit_timeline`]):
/// a received message is lent, not copied.
#[derive(Debug, Clone, Copy)]
pub enum TimelineRef<'a> {
    /// A `ClientMessage` arrived; `index` is its position in the log.
    Received {
        /// Its position in the log.
        index: usize,
        /// The message.
        message: &'a ClientMessage,
        /// Its buf.validate violations, if any (a runner bug).
        violations: Option<&'a str>,
    },
    /// Any other event (registrations, streams, what the mock sent).
    Other(&'a TimelineEvent),
}

impl TimelineRef<'_> {
    /// The event as [`crate::MockControlPlane::wait_timeline`] gives it (a
    /// copy).
    pub fn to_event(self) -> TimelineEvent {
        match self {
            TimelineRef::Received {
                index,
                message,
                violations,
            } => TimelineEvent::Received {
                index,
                message: message.clone(),
                violations: violations.map(str::to_owned),
            },
            TimelineRef::Other(event) => event.clone(),
        }
    }
}

/// The sending half of the live stream, kept so tests can push into it and
/// end it.
struct LiveStream {
    id: u64,
    tx: mpsc::Sender<ServerMessage>,
    /// Ends the server→runner stream with this status.
    kill: oneshot::Sender<Status>,
    /// Stops the task reading the runner→server half.
    cancel: CancellationToken,
}

impl LiveStream {
    fn end(self, status: Status) {
        // The receiver may already be gone (runner left): nothing to end then.
        let _ = self.kill.send(status);
        self.cancel.cancel();
    }
}

/// One timeline entry as kept (see [`Inner::timeline`]).
enum Logged {
    /// Boxed: the other events are rare, received messages are not.
    Event(Box<TimelineEvent>),
    Received(usize),
}

#[derive(Default)]
pub(crate) struct Inner {
    pub(crate) received: Vec<(ClientMessage, Option<String>)>,
    pub(crate) sent: Vec<ServerMessage>,
    pub(crate) registrations: Vec<Registration>,
    /// What happened, in order. A received message is kept once, in
    /// `received`, and named here by its index: the log of a long run holds
    /// millions of updates, and a second copy of each was a third of the
    /// mock's cost per message.
    timeline: Vec<Logged>,
    live: Option<LiveStream>,
    pub(crate) streams_opened: u64,
    pub(crate) fail_register: Option<Status>,
    pub(crate) fail_stream: Option<Status>,
    pub(crate) github: Vec<GithubInstallation>,
    pub(crate) token_requests: Vec<i64>,
    pub(crate) sequencing: Sequencing,
    /// Time spent on each received message (a slow control plane).
    pub(crate) read_delay: Duration,
}

impl Inner {
    fn log(&mut self, event: TimelineEvent) {
        self.timeline.push(Logged::Event(Box::new(event)));
    }

    /// How many timeline events there are.
    pub(crate) fn timeline_len(&self) -> usize {
        self.timeline.len()
    }

    /// Shows the timeline events from position `from` on to `visit`, in
    /// order, without copying them; returns the position after the last.
    pub(crate) fn visit_from(&self, from: usize, mut visit: impl FnMut(TimelineRef<'_>)) -> usize {
        let logged = self.timeline.get(from..).unwrap_or_default();
        for entry in logged {
            match entry {
                Logged::Event(event) => visit(TimelineRef::Other(event)),
                Logged::Received(index) => {
                    if let Some((message, violations)) = self.received.get(*index) {
                        visit(TimelineRef::Received {
                            index: *index,
                            message,
                            violations: violations.as_deref(),
                        });
                    }
                }
            }
        }
        from.max(self.timeline.len())
    }

    /// The timeline events from position `from` on (copies of what
    /// [`Inner::visit_from`] shows).
    pub(crate) fn timeline_from(&self, from: usize) -> Vec<TimelineEvent> {
        let mut events = Vec::new();
        self.visit_from(from, |event| events.push(event.to_event()));
        events
    }
}

impl Inner {
    pub(crate) fn is_connected(&self) -> bool {
        self.live.is_some()
    }
}

/// The outcome of [`State::push`].
pub(crate) enum Pushed {
    Done,
    NotConnected,
    Closed,
    /// The stream's buffer is full: send through this sender, waiting.
    Full(mpsc::Sender<ServerMessage>, Box<ServerMessage>),
}

/// What the new live stream's handler needs.
pub(crate) struct OpenedStream {
    pub(crate) id: u64,
    /// Where acknowledgements go (the same queue as what tests send).
    pub(crate) tx: mpsc::Sender<ServerMessage>,
    pub(crate) outbound: mpsc::Receiver<ServerMessage>,
    pub(crate) kill: oneshot::Receiver<Status>,
    pub(crate) cancel: CancellationToken,
}

pub(crate) struct State {
    inner: Mutex<Inner>,
    /// Bumped on every change; waiters re-check their condition on each bump.
    generation: watch::Sender<u64>,
    /// The highest sequence number processed; acknowledgers watch it.
    processed: watch::Sender<u64>,
}

impl State {
    pub(crate) fn new(github: Vec<GithubInstallation>, sequencing: Sequencing) -> Self {
        State {
            inner: Mutex::new(Inner {
                github,
                sequencing,
                ..Inner::default()
            }),
            generation: watch::Sender::new(0),
            processed: watch::Sender::new(0),
        }
    }

    /// Wakes every acknowledger (the ack mode changed).
    pub(crate) fn nudge_acks(&self) {
        self.processed.send_modify(|_| {});
    }

    /// Watches the highest processed sequence number.
    pub(crate) fn processed(&self) -> watch::Receiver<u64> {
        self.processed.subscribe()
    }

    /// The state's lock; a panic elsewhere while holding it does not poison
    /// the mock for the rest of the test.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes `inner` under the lock, then wakes every waiter.
    pub(crate) fn update<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let out = f(&mut self.lock());
        self.generation.send_modify(|g| *g = g.wrapping_add(1));
        out
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    pub(crate) fn record_registration(&self, registration: Registration) {
        self.update(|inner| {
            inner.registrations.push(registration.clone());
            inner.log(TimelineEvent::Registered(registration));
        });
    }

    /// Makes a new stream the live one; a previous live stream is ended
    /// with `ABORTED`.
    pub(crate) fn open_stream(&self) -> OpenedStream {
        let (tx, outbound) = mpsc::channel(OUTBOUND_BUFFER);
        let (kill_tx, kill) = oneshot::channel();
        let cancel = CancellationToken::new();
        let id = self.update(|inner| {
            inner.streams_opened += 1;
            let id = inner.streams_opened;
            if let Some(old) = inner.live.take() {
                inner.log(TimelineEvent::Disconnected { stream: old.id });
                old.end(Status::aborted("replaced by a newer ControlChannel stream"));
            }
            inner.live = Some(LiveStream {
                id,
                tx: tx.clone(),
                kill: kill_tx,
                cancel: cancel.clone(),
            });
            inner.log(TimelineEvent::Connected { stream: id });
            id
        });
        OpenedStream {
            id,
            tx,
            outbound,
            kill,
            cancel,
        }
    }

    /// The stream `id` ended on its own (runner closed or went away).
    pub(crate) fn close_stream(&self, id: u64) {
        self.update(|inner| {
            if inner.live.as_ref().is_some_and(|l| l.id == id)
                && let Some(live) = inner.live.take()
            {
                inner.log(TimelineEvent::Disconnected { stream: id });
                // Dropping the sender ends the server→runner half cleanly.
                live.cancel.cancel();
            }
        });
    }

    /// Ends the live stream with `status`; false when there was none.
    pub(crate) fn kill_stream(&self, status: Status) -> bool {
        self.update(|inner| match inner.live.take() {
            Some(live) => {
                inner.log(TimelineEvent::Disconnected { stream: live.id });
                live.end(status);
                true
            }
            None => false,
        })
    }

    /// The mock restarted: a forgetful one forgets what it processed, and
    /// its acknowledgers must not go on acknowledging the old high mark
    /// (the copy they watch follows the report).
    pub(crate) fn restarted(&self) {
        let processed = self.update(|inner| {
            inner.sequencing.restarted();
            inner.sequencing.report.processed
        });
        self.processed.send_replace(processed);
    }

    /// Logs messages the runner sent, in order, unless the sequence check
    /// drops one as a duplicate; then acknowledgers learn the new high mark.
    /// A batch (what the stream had ready at once) takes the lock and wakes
    /// the timeline's followers once, not once per message.
    pub(crate) fn record_received(
        &self,
        messages: impl IntoIterator<Item = (ClientMessage, Option<String>)>,
    ) {
        let processed = self.update(|inner| {
            let mut any = false;
            for (message, violations) in messages {
                if !inner.sequencing.arrived(message.sequence) {
                    continue;
                }
                let index = inner.received.len();
                inner.received.push((message, violations));
                inner.timeline.push(Logged::Received(index));
                any = true;
            }
            any.then_some(inner.sequencing.report.processed)
        });
        if let Some(p) = processed {
            self.processed.send_if_modified(|old| {
                let changed = *old != p;
                *old = p;
                changed
            });
        }
    }

    /// Pushes `message` into the live stream without waiting, recording it
    /// as sent under the same lock, so the timeline never shows a reply
    /// before the request it answers.
    pub(crate) fn push(&self, message: ServerMessage) -> Pushed {
        self.update(|inner| {
            let Some(live) = &inner.live else {
                return Pushed::NotConnected;
            };
            match live.tx.try_send(message.clone()) {
                Ok(()) => {
                    inner.sent.push(message.clone());
                    inner.log(TimelineEvent::Sent(message));
                    Pushed::Done
                }
                Err(mpsc::error::TrySendError::Full(message)) => {
                    Pushed::Full(live.tx.clone(), Box::new(message))
                }
                Err(mpsc::error::TrySendError::Closed(_)) => Pushed::Closed,
            }
        })
    }

    pub(crate) fn record_sent(&self, message: ServerMessage) {
        self.update(|inner| {
            inner.sent.push(message.clone());
            inner.log(TimelineEvent::Sent(message));
        });
    }

    /// Waits until `check` returns `Some` (re-checked after every change), or
    /// until `timeout` passes (`None`: wait forever). `check` is called under
    /// the lock: keep it short, never block in it.
    pub(crate) async fn wait_until<T>(
        &self,
        timeout: Option<Duration>,
        mut check: impl FnMut(&Inner) -> Option<T>,
    ) -> Option<T> {
        let deadline = timeout.and_then(|t| tokio::time::Instant::now().checked_add(t));
        // Subscribe before the first check so no change can slip between.
        let mut changes = self.subscribe();
        loop {
            if let Some(found) = check(&self.lock()) {
                return Some(found);
            }
            let changed = match deadline {
                Some(deadline) => {
                    match tokio::time::timeout_at(deadline, changes.changed()).await {
                        Ok(result) => result,
                        Err(_elapsed) => return None,
                    }
                }
                None => changes.changed().await,
            };
            if changed.is_err() {
                // The sender lives in `self`, so this cannot happen; treat it
                // as "nothing more will change".
                return None;
            }
        }
    }

    /// An error saying what timed out, followed by the last messages received
    /// so a failing test shows what the runner did send.
    pub(crate) fn timeout_error(&self, what: &str, timeout: Duration) -> anyhow::Error {
        let inner = self.lock();
        let total = inner.received.len();
        let mut text = format!(
            "timed out after {timeout:?} waiting for {what}; runner connected: {}; \
             registrations: {}; received {total} message(s)",
            inner.is_connected(),
            inner.registrations.len(),
        );
        if total > 0 {
            let first = total.saturating_sub(RECENT_IN_ERRORS);
            let _ = write!(text, ", the last {}:", total - first);
            for (index, (message, _)) in inner.received.iter().enumerate().skip(first) {
                let _ = write!(text, "\n  #{index} {message:?}");
            }
        }
        anyhow::anyhow!(text)
    }
}
