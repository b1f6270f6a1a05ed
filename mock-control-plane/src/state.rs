//! Everything a mock control plane remembers and everything a test waits on:
//! the registrations, the log of received `ClientMessage`s (each tagged
//! with the runner that sent it), each runner's live `ControlChannel` stream
//! ([`crate::runners`]), fault settings, and the wakeups that let waiters
//! sleep until something changes (a `watch` generation counter, no polling).
//!
//! The state outlives the tonic server: `stop()`/`restart()` keep it, so a
//! test sees one continuous log across restarts.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_runner_proto::runner::{ClientMessage, RegisterRunnerRequest, ServerMessage};

use crate::versions::Outgoing;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tonic::Status;

use crate::acks::Sequencing;
use crate::config::GithubInstallation;
use crate::runners::{LiveStream, RunnerState};

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
    /// The runner it registered as (its secret's name, see
    /// [`crate::MockConfig::runners`]; [`crate::DEFAULT_RUNNER`] unless
    /// several are configured).
    pub runner: String,
}

/// A `ClientMessage` the mock received and did not process, and why: never
/// dropped without a word (it is in the timeline and logged).
#[derive(Clone, Debug)]
pub struct DroppedMessage {
    /// The runner that sent it.
    pub runner: String,
    /// Why it was dropped, e.g. `duplicate of sequence 7 (processed up to 9)`.
    pub reason: String,
    /// The message.
    pub message: ClientMessage,
}

/// Everything that happened, in order: what the binary's `--stdio` mode
/// prints.
#[derive(Clone, Debug)]
pub enum TimelineEvent {
    /// A `RegisterRunner` call succeeded.
    Registered(Registration),
    /// A `ControlChannel` stream became its runner's live one (`stream`
    /// counts from 1, over all runners).
    Connected {
        /// Which stream (1 for the first).
        stream: u64,
        /// Whose (see [`Registration::runner`]).
        runner: String,
    },
    /// A live stream ended (runner left, `drop_stream`, `stop`, replaced by
    /// the same runner's newer stream).
    Disconnected {
        /// Which stream.
        stream: u64,
        /// Whose.
        runner: String,
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
    /// A `ServerMessage` was handed to a live stream.
    Sent(ServerMessage),
    /// A `ClientMessage` arrived and was not processed (not in the log).
    Dropped(DroppedMessage),
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

/// One timeline entry as kept (see [`Inner::timeline`]).
enum Logged {
    /// Boxed: the other events are rare, received messages are not.
    Event(Box<TimelineEvent>),
    Received(usize),
}

/// One processed `ClientMessage` in the shared log.
pub(crate) struct Received {
    pub(crate) message: ClientMessage,
    /// Its buf.validate violations, if any.
    pub(crate) violations: Option<String>,
    /// Which runner sent it (a position in [`Inner::runners`]).
    pub(crate) runner: usize,
}

#[derive(Default)]
pub(crate) struct Inner {
    /// Every processed message, of every runner, in arrival order.
    pub(crate) received: Vec<Received>,
    /// Every ServerMessage handed to a stream, with the runner it went to.
    pub(crate) sent: Vec<(usize, ServerMessage)>,
    pub(crate) registrations: Vec<Registration>,
    /// What happened, in order. A received message is kept once, in
    /// `received`, and named here by its index: the log of a long run holds
    /// millions of updates, and a second copy of each was a third of the
    /// mock's cost per message.
    timeline: Vec<Logged>,
    /// One per runner identity, in the order of [`crate::auth::Identities`]
    /// (never empty, never resized: positions are runner indices).
    pub(crate) runners: Vec<RunnerState>,
    /// Streams accepted so far, over all runners.
    pub(crate) streams_opened: u64,
    pub(crate) dropped: Vec<DroppedMessage>,
    pub(crate) fail_register: Option<Status>,
    pub(crate) fail_stream: Option<Status>,
    pub(crate) github: Vec<GithubInstallation>,
    pub(crate) token_requests: Vec<i64>,
    /// Time spent on each received message (a slow control plane).
    pub(crate) read_delay: Duration,
    /// Messages the mock cannot take: one ends its stream unprocessed.
    pub(crate) reject: Option<Rejects>,
    /// Messages rejected so far.
    pub(crate) rejected: usize,
    /// Whether registrations accept `approvals/1` ([`crate::approvals`]).
    pub(crate) approvals: bool,
}

/// Which messages a rejecting mock cannot take
/// ([`crate::MockControlPlane::reject_matching`]).
pub(crate) type Rejects = std::sync::Arc<dyn Fn(&ClientMessage) -> bool + Send + Sync>;

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
                    if let Some(r) = self.received.get(*index) {
                        visit(TimelineRef::Received {
                            index: *index,
                            message: &r.message,
                            violations: r.violations.as_deref(),
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

    /// Whether any runner's stream is live.
    pub(crate) fn is_connected(&self) -> bool {
        self.runners.iter().any(RunnerState::is_connected)
    }

    /// The names of the runners whose stream is live.
    pub(crate) fn live_runners(&self) -> Vec<&str> {
        self.runners
            .iter()
            .filter(|r| r.is_connected())
            .map(|r| r.name.as_str())
            .collect()
    }

    /// Ends runner `r`'s live stream with `status`; false when it had none.
    fn end_stream(&mut self, r: usize, status: Status) -> bool {
        let Some(live) = self.runners[r].live.take() else {
            return false;
        };
        let runner = self.runners[r].name.clone();
        self.log(TimelineEvent::Disconnected {
            stream: live.id,
            runner,
        });
        live.end(status);
        true
    }

    /// Records `message` as sent to runner `r`.
    fn note_sent(&mut self, r: usize, message: &Outgoing) {
        let message = message.view();
        self.runners[r].sent.push(self.sent.len());
        self.sent.push((r, message.clone()));
        self.log(TimelineEvent::Sent(message));
    }
}

/// The outcome of [`State::push`].
pub(crate) enum Pushed {
    Done,
    NotConnected,
    /// Several runners are connected and none was named: these.
    Ambiguous(Vec<String>),
    Closed,
    /// The stream's buffer is full: send through this sender (to runner
    /// `.0`), waiting.
    Full(usize, mpsc::Sender<Outgoing>, Box<Outgoing>),
}

/// What the new live stream's handler needs.
pub(crate) struct OpenedStream {
    pub(crate) id: u64,
    /// Where acknowledgements go (the same queue as what tests send).
    pub(crate) tx: mpsc::Sender<Outgoing>,
    pub(crate) outbound: mpsc::Receiver<Outgoing>,
    pub(crate) kill: oneshot::Receiver<Status>,
    pub(crate) cancel: CancellationToken,
    /// The runner's highest processed sequence number, for its acknowledger.
    pub(crate) processed: watch::Receiver<u64>,
    /// The runner's name.
    pub(crate) runner: String,
}

pub(crate) struct State {
    inner: Mutex<Inner>,
    /// Bumped on every change; waiters re-check their condition on each bump.
    generation: watch::Sender<u64>,
}

impl State {
    /// The state of a mock serving the runners `names` (at least one), each
    /// starting with `sequencing`.
    pub(crate) fn new(
        github: Vec<GithubInstallation>,
        names: &[String],
        sequencing: Sequencing,
    ) -> Self {
        let runners = names
            .iter()
            .map(|name| RunnerState::new(name.clone(), sequencing.clone()))
            .collect();
        State {
            inner: Mutex::new(Inner {
                github,
                runners,
                ..Inner::default()
            }),
            generation: watch::Sender::new(0),
        }
    }

    /// Wakes every acknowledger (the ack mode changed).
    pub(crate) fn nudge_acks(&self) {
        for runner in &self.lock().runners {
            runner.processed.send_modify(|_| {});
        }
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

    /// Records a registration of runner `r` (named in `registration`).
    pub(crate) fn record_registration(&self, r: usize, registration: Registration) {
        self.update(|inner| {
            inner.runners[r].registrations += 1;
            inner.registrations.push(registration.clone());
            inner.log(TimelineEvent::Registered(registration));
        });
    }

    /// Makes a new stream runner `r`'s live one; that runner's previous live
    /// stream is ended with `ABORTED` (other runners' streams are left
    /// alone).
    pub(crate) fn open_stream(&self, r: usize) -> OpenedStream {
        let (tx, outbound) = mpsc::channel(OUTBOUND_BUFFER);
        let (kill_tx, kill) = oneshot::channel();
        let cancel = CancellationToken::new();
        let (id, processed, name) = self.update(|inner| {
            inner.streams_opened += 1;
            let id = inner.streams_opened;
            inner.end_stream(
                r,
                Status::aborted("replaced by a newer ControlChannel stream of the same runner"),
            );
            let runner = &mut inner.runners[r];
            runner.streams_opened += 1;
            runner.live = Some(LiveStream {
                id,
                tx: tx.clone(),
                kill: kill_tx,
                cancel: cancel.clone(),
            });
            let processed = runner.processed.subscribe();
            let name = runner.name.clone();
            inner.log(TimelineEvent::Connected {
                stream: id,
                runner: name.clone(),
            });
            (id, processed, name)
        });
        OpenedStream {
            id,
            tx,
            outbound,
            kill,
            cancel,
            processed,
            runner: name,
        }
    }

    /// Runner `r`'s stream `id` ended on its own (runner closed or went away).
    pub(crate) fn close_stream(&self, r: usize, id: u64) {
        self.update(|inner| {
            let runner = &mut inner.runners[r];
            if runner.live.as_ref().is_some_and(|l| l.id == id)
                && let Some(live) = runner.live.take()
            {
                let runner = runner.name.clone();
                inner.log(TimelineEvent::Disconnected { stream: id, runner });
                // Dropping the sender ends the server→runner half cleanly.
                live.cancel.cancel();
            }
        });
    }

    /// Ends runner `r`'s live stream (every runner's, with `None`) with
    /// `status`; false when there was none.
    pub(crate) fn kill_stream(&self, r: Option<usize>, status: Status) -> bool {
        self.update(|inner| match r {
            Some(r) => inner.end_stream(r, status),
            None => {
                // Every one, not just the first live one.
                let ended: Vec<bool> = (0..inner.runners.len())
                    .map(|r| inner.end_stream(r, status.clone()))
                    .collect();
                ended.contains(&true)
            }
        })
    }

    /// The mock restarted: a forgetful one forgets what it processed, and
    /// its acknowledgers must not go on acknowledging the old high mark
    /// (the copy they watch follows the report).
    pub(crate) fn restarted(&self) {
        self.update(|inner| {
            for runner in &mut inner.runners {
                runner.sequencing.restarted();
                runner
                    .processed
                    .send_replace(runner.sequencing.report.processed);
            }
        });
    }

    /// Logs messages runner `r` sent, in order, unless its sequence check
    /// drops one as a duplicate (recorded as `Dropped` and logged); then its
    /// acknowledgers learn the new high mark. A batch (what the stream had
    /// ready at once) takes the lock and wakes the timeline's followers
    /// once, not once per message.
    /// Which messages the mock cannot take, if any.
    pub(crate) fn rejects(&self) -> Option<Rejects> {
        self.lock().reject.clone()
    }

    /// A message of runner `r` was rejected: counted, its stream ended.
    pub(crate) fn rejected(&self, r: usize) {
        self.update(|inner| inner.rejected += 1);
        self.kill_stream(
            Some(r),
            Status::invalid_argument("the mock control plane rejected an update"),
        );
    }

    pub(crate) fn record_received(
        &self,
        r: usize,
        messages: impl IntoIterator<Item = (ClientMessage, Option<String>)>,
    ) {
        self.update(|inner| {
            for (message, violations) in messages {
                let runner = &mut inner.runners[r];
                let before = runner.sequencing.report.processed;
                if runner.sequencing.arrived(message.sequence) {
                    let index = inner.received.len();
                    inner.runners[r].received.push(index);
                    inner.received.push(Received {
                        message,
                        violations,
                        runner: r,
                    });
                    inner.timeline.push(Logged::Received(index));
                    continue;
                }
                let drop = DroppedMessage {
                    runner: runner.name.clone(),
                    reason: format!(
                        "duplicate of sequence {} (processed up to {before})",
                        message.sequence
                    ),
                    message,
                };
                tracing::info!(
                    runner = %drop.runner,
                    sequence = drop.message.sequence,
                    "dropped a ClientMessage: {}",
                    drop.reason
                );
                inner.dropped.push(drop.clone());
                inner.log(TimelineEvent::Dropped(drop));
            }
            inner.runners[r].publish_processed();
        });
    }

    /// Pushes `message` into runner `r`'s live stream (with `None`: the only
    /// live one) without waiting, recording it as sent under the same lock,
    /// so the timeline never shows a reply before the request it answers.
    pub(crate) fn push(&self, r: Option<usize>, message: Outgoing) -> Pushed {
        self.update(|inner| {
            let r = match r {
                Some(r) => r,
                None => {
                    let live: Vec<usize> = (0..inner.runners.len())
                        .filter(|&i| inner.runners[i].is_connected())
                        .collect();
                    match live[..] {
                        [only] => only,
                        [] => return Pushed::NotConnected,
                        _ => {
                            let names = inner.live_runners();
                            return Pushed::Ambiguous(
                                names.into_iter().map(str::to_owned).collect(),
                            );
                        }
                    }
                }
            };
            let Some(live) = &inner.runners[r].live else {
                return Pushed::NotConnected;
            };
            match live.tx.try_send(message.clone()) {
                Ok(()) => {
                    inner.note_sent(r, &message);
                    Pushed::Done
                }
                Err(mpsc::error::TrySendError::Full(message)) => {
                    Pushed::Full(r, live.tx.clone(), Box::new(message))
                }
                Err(mpsc::error::TrySendError::Closed(_)) => Pushed::Closed,
            }
        })
    }

    /// Records `message` as sent to runner `r` (after a waiting send).
    pub(crate) fn record_sent(&self, r: usize, message: &Outgoing) {
        self.update(|inner| inner.note_sent(r, message));
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
        if inner.runners.len() > 1 {
            let _ = write!(text, "; live runners: {:?}", inner.live_runners());
        }
        if !inner.dropped.is_empty() {
            let _ = write!(text, "; dropped {}", inner.dropped.len());
        }
        if total > 0 {
            let first = total.saturating_sub(RECENT_IN_ERRORS);
            let _ = write!(text, ", the last {}:", total - first);
            let named = inner.runners.len() > 1;
            for (index, r) in inner.received.iter().enumerate().skip(first) {
                let _ = write!(text, "\n  #{index} ");
                if named {
                    let _ = write!(text, "[{}] ", inner.runners[r.runner].name);
                }
                let _ = write!(text, "{:?}", r.message);
            }
        }
        anyhow::anyhow!(text)
    }
}
