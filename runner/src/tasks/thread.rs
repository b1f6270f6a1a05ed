//! One task per thread: starts, steers, interrupts and deletes its turns, and
//! turns the running turn's events into updates, all in arrival order.
//!
//! The task waits on three things at once: its mailbox, the running turn's
//! event stream and, when `--max-concurrent-turns` turns run, the turn slot
//! its next turn waits for ([`crate::tasks::turn_wait`]), so a steer or an
//! interrupt is handled while the turn runs, and an interrupt, a delete or
//! the drain while it waits. A message waiting for a slot that is
//! interrupted, deleted with its thread or overtaken by the drain is
//! answered with a `RequestError` saying so: it never ran, and the control
//! plane is not left waiting for it.
//!
//! Every update a turn causes carries the request id of the message that
//! started it, or of the steering message once the adapter reports (with
//! `TurnEvent::Steered`) where that message joined the turn.

use std::collections::VecDeque;
use std::sync::Arc;

use agent_runner_proto::runner::{ThreadStatus, TurnStatus};
use sdk_adapter::{
    SdkAdapter, SteerError, ThreadSpec, TurnControl, TurnEvent, TurnInput, TurnOutcome,
};
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio::time::Instant;

use crate::delivery::messages::{self, RequestId};
use crate::host::store::RunningTurnRow;
use crate::tasks::context::{INTERRUPT_GRACE, RunningTurn, Runtime};
use crate::tasks::mail::{ThreadCmd, UserMessage};
use crate::tasks::mailboxes::{Queued, ThreadRx, ThreadTx};
use crate::tasks::turn_wait::{self, Held, Waiting};

mod approving;
#[cfg(test)]
mod tests;

/// The answer to a message the drain found waiting for a turn slot: the
/// answer to one that arrives during the drain.
const DRAINING: &str = "runner is draining";

/// A thread's task yields to the others at every this-many-th command or
/// event it handles. An event's work (the outbox, the journal, the
/// transcript) is a few µs; without this, the task ran until tokio's
/// budget of 128 channel reads was spent, and with 100 threads streaming
/// the ControlChannel's read loop, queued behind them, waited tens of ms
/// to read a heartbeat.
const EVENTS_PER_POLL: usize = 16;

/// Most events a turn's burst takes at once ([`ThreadTask::on_event`]):
/// the journal's bound on one job, and a poll's worth.
const BURST: usize = crate::delivery::journal::BURST;

/// Starts `spec`'s task and registers its mailbox.
pub fn start(rt: &Arc<Runtime>, sdk: String, spec: ThreadSpec, last_turn: Option<String>) {
    let (agent_id, thread_id) = (spec.agent_id.clone(), spec.thread_id.clone());
    let tx = spawn(rt.clone(), sdk, spec, last_turn);
    rt.mailboxes.add_thread(&agent_id, &thread_id, tx);
}

fn spawn(rt: Arc<Runtime>, sdk: String, spec: ThreadSpec, last_turn: Option<String>) -> ThreadTx {
    let (tx, rx) = mpsc::unbounded_channel();
    let adapter = rt.sdks.get(&sdk);
    let tracker = rt.tasks.clone();
    tracker.spawn(
        ThreadTask {
            rt,
            sdk,
            adapter,
            spec,
            last_turn,
            active: None,
            waiting: None,
            approvals: Default::default(),
            rx,
        }
        .run(),
    );
    tx
}

struct ActiveTurn {
    id: String,
    events: mpsc::Receiver<TurnEvent>,
    control: Arc<dyn TurnControl>,
    /// Request id that updates carry now.
    rid: RequestId,
    /// Accepted steers not yet reported by the adapter: (tag, request id).
    steers: VecDeque<(u64, RequestId)>,
    /// Set once interrupted: who gets the COMPLETED, and until when to wait.
    interrupted: Option<(RequestId, Instant)>,
    /// Interrupts that came after the first: each is answered with the
    /// same COMPLETED when the turn ends (interrupt is idempotent).
    interrupted_again: Vec<String>,
    _slot: OwnedSemaphorePermit,
}

struct ThreadTask {
    rt: Arc<Runtime>,
    sdk: String,
    adapter: Option<Arc<dyn SdkAdapter>>,
    spec: ThreadSpec,
    last_turn: Option<String>,
    active: Option<ActiveTurn>,
    /// The next turn, waiting for a slot (never while a turn runs).
    waiting: Option<Waiting>,
    /// The running turn's requests waiting for a decision, and what was
    /// approved for the thread ([`approving`]).
    approvals: crate::tasks::approvals::ThreadApprovals,
    rx: ThreadRx,
}

enum Flow {
    Continue,
    Deleted,
}

enum TurnSignal {
    Event(Option<TurnEvent>),
    /// An interrupted turn did not stop within its grace period.
    GraceOver,
}

/// The running turn's next event; never resolves while no turn runs.
async fn watch_turn(active: &mut Option<ActiveTurn>) -> TurnSignal {
    let Some(turn) = active else {
        return std::future::pending().await;
    };
    match turn.interrupted.as_ref().map(|(_, deadline)| *deadline) {
        Some(deadline) => tokio::select! {
            event = turn.events.recv() => TurnSignal::Event(event),
            () = tokio::time::sleep_until(deadline) => TurnSignal::GraceOver,
        },
        None => TurnSignal::Event(turn.events.recv().await),
    }
}

impl ThreadTask {
    /// The handlers are boxed: this task spends its life waiting in the
    /// `select!`, and inline their futures (adapter calls, the store, the
    /// outbox) would make every thread's task several KiB larger than that
    /// wait needs (10,000 threads: tens of MiB). One allocation per command
    /// or event is the price.
    async fn run(mut self) {
        let mut steer_tag = 0u64;
        let mut handled = 0usize;
        loop {
            if handled >= EVENTS_PER_POLL {
                handled = 0;
                tokio::task::yield_now().await;
            }
            tokio::select! {
                cmd = self.rx.recv() => {
                    handled += 1;
                    let Some((cmd, queued)) = cmd.map(Queued::into_parts) else { break };
                    steer_tag += 1;
                    if let Flow::Deleted = Box::pin(self.handle(cmd, queued, steer_tag)).await {
                        break;
                    }
                }
                id = self.approvals.next_expiry() => {
                    handled += 1;
                    Box::pin(self.approval_expired(id)).await;
                }
                slot = turn_wait::next_slot(&mut self.waiting) => {
                    handled += 1;
                    Box::pin(self.slot_ready(slot)).await;
                }
                signal = watch_turn(&mut self.active) => match signal {
                    TurnSignal::Event(event) => {
                        handled += Box::pin(self.on_event(event)).await;
                    }
                    TurnSignal::GraceOver => {
                        handled += 1;
                        Box::pin(self.abandon_turn()).await;
                    }
                },
            }
        }
        // Boxed like the handlers: inline, this one await (the outbox, the
        // journal) sized the whole task, and every thread's task waits in
        // the loop above all its life.
        Box::pin(self.cancel_waiting("the thread is gone: its message never started a turn")).await;
        // Anything still queued was sent to a thread that no longer exists.
        self.rx.close();
        while let Some(cmd) = self.rx.recv().await.map(Queued::take) {
            crate::tasks::mail::unknown_thread(&self.rt.outbox, &self.spec.thread_id, cmd);
        }
    }

    /// Every update of this thread leaves through here (the outbox masks
    /// secrets, for every message alike, and records it in this thread's
    /// transcript, request errors included).
    async fn send(&self, msg: agent_runner_proto::runner::ClientMessage) {
        self.rt
            .outbox
            .push_for_thread(&self.spec.thread_id, msg)
            .await;
    }

    /// [`ThreadTask::send`] for a turn's updates that were ready together
    /// (they name this thread: the outbox records their transcript).
    async fn send_burst(&self, mut burst: Vec<agent_runner_proto::runner::ClientMessage>) {
        match burst.len() {
            0 => {}
            1 => self.send(burst.remove(0)).await,
            _ => self.rt.outbox.push_burst(burst).await,
        }
    }

    async fn error(&self, rid: RequestId, text: impl Into<String>) {
        let text = text.into();
        // An operator sees every RequestError in the log, not only the
        // control plane (the log line passes the redactor).
        tracing::warn!(request_id = ?rid, thread_id = %self.spec.thread_id, reason = %text, "request error");
        self.send(messages::request_error(rid, text)).await;
    }

    /// `queued`: the command's slot of the request queue, kept by a user
    /// message that waits for a turn slot.
    async fn handle(
        &mut self,
        cmd: ThreadCmd,
        queued: Option<OwnedSemaphorePermit>,
        tag: u64,
    ) -> Flow {
        match cmd {
            ThreadCmd::UserMessage(msg) => match &mut self.waiting {
                // Handled once the waiting turn started, as it would have
                // been had that turn started at once.
                Some(waiting) => waiting.hold(Held {
                    msg: *msg,
                    tag,
                    queued,
                }),
                None => self.user_message(*msg, tag, queued).await,
            },
            ThreadCmd::Interrupt { rid } => {
                // What waits has not started: the interrupt cancels it, and
                // is then answered as on an idle thread.
                let text = format!(
                    "interrupted before its turn started (it was waiting for one of the runner's {} turn slots)",
                    self.rt.max_turns
                );
                self.cancel_waiting(&text).await;
                self.interrupt(rid).await;
            }
            ThreadCmd::Approval { rid, decision } => self.decide(rid, *decision).await,
            ThreadCmd::Drain => {
                self.cancel_waiting(DRAINING).await;
                if let Some(turn) = &self.active {
                    let rid = turn.rid.clone();
                    // Said, as a turn lost in a restart is: the control
                    // plane must not take the cut-short turn for a done one.
                    self.error(
                        rid.clone(),
                        "the runner is shutting down: the turn was interrupted when its drain timeout ran out",
                    )
                    .await;
                    self.interrupt(rid).await;
                }
            }
            ThreadCmd::Delete { rid, done } => {
                let text = format!(
                    "thread {} was deleted before the message's turn started",
                    self.spec.thread_id
                );
                self.cancel_waiting(&text).await;
                self.delete(rid).await;
                if let Some(done) = done {
                    let _ = done.send(());
                }
                return Flow::Deleted;
            }
        }
        Flow::Continue
    }

    async fn user_message(
        &mut self,
        msg: UserMessage,
        tag: u64,
        queued: Option<OwnedSemaphorePermit>,
    ) {
        if let Some(turn) = &self.active {
            if !msg.allow_steer {
                let text = format!(
                    "turn {} is running on thread {}; set allow_steer to steer it",
                    turn.id, self.spec.thread_id
                );
                return self.error(msg.rid, text).await;
            }
            let control = turn.control.clone();
            match control.steer(msg.text.clone(), tag).await {
                Ok(()) => {
                    let Some(turn) = self.active.as_mut() else {
                        return;
                    };
                    turn.steers.push_back((tag, msg.rid.clone()));
                    let update = messages::turn(
                        msg.rid,
                        &self.spec.thread_id,
                        &turn.id,
                        TurnStatus::Running,
                    );
                    return self.send(update).await;
                }
                Err(SteerError::Rejected(text)) => {
                    return self.error(msg.rid, format!("steer rejected: {text}")).await;
                }
                Err(SteerError::TurnEnded) => {
                    // Let the turn finish, then this message starts the next.
                    self.finish_inline().await;
                }
            }
        }
        self.start_turn(msg, queued).await;
    }

    /// Starts `msg`'s turn, or, with every turn slot taken, lets it wait
    /// for one (keeping `queued`, its slot of the request queue).
    async fn start_turn(&mut self, msg: UserMessage, queued: Option<OwnedSemaphorePermit>) {
        let rid = msg.rid.clone();
        let Some(input) = self.turn_input(msg).await else {
            return;
        };
        match self.rt.turn_slots.clone().try_acquire_owned() {
            Ok(slot) => self.launch(rid, input, slot).await,
            Err(_) => {
                tracing::debug!(thread_id = %self.spec.thread_id, "every turn slot is taken; the turn waits for one");
                let waiting = Waiting::start(&self.rt, &self.spec, &self.sdk, rid, input, queued);
                self.waiting = Some(waiting);
            }
        }
    }

    /// The waiting turn's slot came (`None`: the drain began): the turn
    /// starts, then the messages that arrived behind it are handled in
    /// order, as they would have been had it started at once.
    async fn slot_ready(&mut self, slot: Option<OwnedSemaphorePermit>) {
        let slot = match slot {
            Some(slot) if !self.rt.is_draining() => slot,
            _ => return self.cancel_waiting(DRAINING).await,
        };
        let Some(waiting) = self.waiting.take() else {
            return;
        };
        let started = waiting.started();
        self.launch(started.rid, started.input, slot).await;
        drop(started.registration);
        let mut behind = started.behind;
        while let Some(held) = behind.pop_front() {
            match &mut self.waiting {
                // The turn ended at once and a message behind it started
                // the next, which waits: the rest wait behind that one.
                Some(waiting) => waiting.hold(held),
                None => self.user_message(held.msg, held.tag, held.queued).await,
            }
        }
    }

    /// Answers every message waiting for a turn slot with a `RequestError`
    /// (`text`) and ends the wait; they leave the runtime's registry (which
    /// the drain watches) only after their answers are queued.
    async fn cancel_waiting(&mut self, text: &str) {
        let Some(waiting) = self.waiting.take() else {
            return;
        };
        for rid in waiting.rids() {
            self.error(rid, text).await;
        }
        drop(waiting);
    }

    /// The turn `msg` asks for, its model and level resolved; `None` when
    /// refused (the refusal is answered).
    async fn turn_input(&self, msg: UserMessage) -> Option<TurnInput> {
        let rt = &self.rt;
        if rt.is_draining() {
            self.error(msg.rid, DRAINING).await;
            return None;
        }
        if self.adapter.is_none() {
            let text = format!("SDK {:?} is not enabled on this runner", self.sdk);
            self.error(msg.rid, text).await;
            return None;
        }
        // The one place a turn's model and level are decided: an override
        // model runs at the override level or its default; the thread's own
        // level goes with the thread's own model only.
        let overridden = msg.model.is_some() || msg.reasoning_level.is_some();
        let level = match (&msg.reasoning_level, &msg.model) {
            (Some(level), _) => Some(level.clone()),
            (None, None) => self.spec.reasoning_level.clone(),
            (None, Some(_)) => None,
        };
        let model = msg.model.unwrap_or_else(|| self.spec.model.clone());
        if overridden && let Err(e) = rt.sdks.check_model(&self.sdk, &model, level.as_deref()) {
            let text = format!("create_user_message_request: {e}");
            self.error(msg.rid, text).await;
            return None;
        }
        // No sandbox, no turn (mode enforce on a host without Landlock, or
        // a policy error): the reason goes back as the RequestError.
        if let Some(why) = self.spec.sandbox.refusal() {
            let text = format!("agent sandbox: {why}");
            self.error(msg.rid, text).await;
            return None;
        }
        Some(TurnInput {
            text: msg.text,
            model,
            reasoning_level: level,
        })
    }

    /// Starts the turn of `input` for request `rid` in `slot`.
    async fn launch(&mut self, rid: RequestId, input: TurnInput, slot: OwnedSemaphorePermit) {
        let rt = self.rt.clone();
        let Some(adapter) = self.adapter.clone() else {
            let text = format!("SDK {:?} is not enabled on this runner", self.sdk);
            return self.error(rid, text).await;
        };
        let turn = match adapter.start_turn(&self.spec, input).await {
            Ok(turn) => turn,
            Err(e) => {
                crate::observe::metrics::adapter_error(&self.sdk, "start_turn");
                return self.error(rid, e.to_string()).await;
            }
        };
        let row = RunningTurnRow {
            thread_id: self.spec.thread_id.clone(),
            sdk_turn_id: turn.sdk_turn_id.clone(),
            request_id: rid.clone(),
        };
        // Committed before the turn's RUNNING goes out: a turn the control
        // plane sees started is one a restart knows to report as ended.
        if let Err(e) = rt.store.record_turn_start(row).await {
            tracing::error!(thread_id = %self.spec.thread_id, error = %e, "recording the running turn failed");
        }
        rt.turn_started(RunningTurn {
            agent_id: self.spec.agent_id.clone(),
            thread_id: self.spec.thread_id.clone(),
            sdk: self.sdk.clone(),
            turn_id: turn.sdk_turn_id.clone(),
            started: std::time::Instant::now(),
        });
        tracing::debug!(thread_id = %self.spec.thread_id, turn_id = %turn.sdk_turn_id, "turn started");
        self.send(messages::turn(
            rid.clone(),
            &self.spec.thread_id,
            &turn.sdk_turn_id,
            TurnStatus::Running,
        ))
        .await;
        self.active = Some(ActiveTurn {
            id: turn.sdk_turn_id,
            events: turn.events,
            control: turn.control,
            rid,
            steers: VecDeque::new(),
            interrupted: None,
            interrupted_again: Vec::new(),
            _slot: slot,
        });
    }

    async fn interrupt(&mut self, rid: RequestId) {
        match &mut self.active {
            Some(turn) => match &turn.interrupted {
                None => {
                    turn.interrupted = Some((rid, Instant::now() + INTERRUPT_GRACE));
                    turn.control.interrupt();
                    // What the turn waits for is over with it.
                    self.turn_ended_approvals().await;
                }
                Some((first, _)) => {
                    if let Some(rid) = rid
                        && first.as_ref() != Some(&rid)
                        && !turn.interrupted_again.contains(&rid)
                    {
                        turn.interrupted_again.push(rid);
                    }
                }
            },
            None => {
                let update = match &self.last_turn {
                    Some(last) => {
                        messages::turn(rid, &self.spec.thread_id, last, TurnStatus::Completed)
                    }
                    None => messages::thread(rid, &self.spec.thread_id, ThreadStatus::Ready),
                };
                self.send(update).await;
            }
        }
    }

    /// Handles the turn's `event` and returns how many events it handled:
    /// an update, with the ones already waiting behind it (up to
    /// [`BURST`]), is pushed as one burst (one journal job, one outbox
    /// lock); the event that ends a burst (the turn's end, a steer) is
    /// handled after it, in order.
    async fn on_event(&mut self, event: Option<TurnEvent>) -> usize {
        let Some(turn) = self.active.as_mut() else {
            return 1;
        };
        let thread_id = &self.spec.thread_id;
        // Room for a whole burst at once: grown from empty, it was
        // reallocated (and its updates copied) twice per burst.
        let mut burst = Vec::with_capacity(BURST);
        let mut next = event;
        let after = loop {
            match next {
                Some(TurnEvent::Item(item)) => {
                    burst.push(messages::item(turn.rid.clone(), thread_id, &turn.id, *item));
                }
                Some(TurnEvent::Usage(usage)) => burst.push(messages::token_usage(
                    turn.rid.clone(),
                    thread_id,
                    &turn.id,
                    *usage,
                )),
                Some(TurnEvent::ThreadNamed(name)) => {
                    burst.push(messages::thread_name(turn.rid.clone(), thread_id, name));
                }
                Some(TurnEvent::Steered { tag }) if burst.is_empty() => {
                    while let Some((t, rid)) = turn.steers.pop_front() {
                        if t == tag {
                            turn.rid = rid;
                            break;
                        }
                    }
                    return 1;
                }
                other => break Some(other),
            }
            if burst.len() == BURST {
                break None;
            }
            next = match turn.events.try_recv() {
                Ok(event) => Some(event),
                Err(mpsc::error::TryRecvError::Empty) => break None,
                Err(mpsc::error::TryRecvError::Disconnected) => None,
            };
        };
        let handled = burst.len();
        self.send_burst(burst).await;
        match after {
            None => handled,
            Some(None) => {
                let text = "the agent stopped without finishing the turn".to_owned();
                self.end_turn(TurnOutcome::Failed(text)).await;
                handled + 1
            }
            Some(Some(TurnEvent::Finished(outcome))) => {
                self.end_turn(outcome).await;
                handled + 1
            }
            Some(Some(TurnEvent::Approval(asked))) => {
                Box::pin(self.ask(*asked)).await;
                handled + 1
            }
            // A steer after updates: handled on its own, after them.
            Some(event) => handled + Box::pin(self.on_event(event)).await,
        }
    }

    async fn end_turn(&mut self, outcome: TurnOutcome) {
        let Some(turn) = self.active.take() else {
            return;
        };
        // Whatever still waits is over with the turn (before its end goes out).
        self.turn_ended_approvals().await;
        let thread_id = self.spec.thread_id.clone();
        if let TurnOutcome::Failed(text) = &outcome {
            crate::observe::metrics::adapter_error(&self.sdk, "turn");
            self.error(turn.rid.clone(), text.clone()).await;
        }
        if turn.interrupted.is_some() {
            // An interrupt stops everything the turn started, also what left
            // its process group (`setsid`), before the turn is reported
            // over; the adapter restarts its CLI for the next turn if it was
            // among them.
            self.rt.sandboxes.kill_thread(&thread_id).await;
        }
        let rid = match turn.interrupted {
            Some((rid, _)) => rid,
            None => turn.rid,
        };
        // Journaled, then the turn recorded as finished, then queued: once
        // queued it may be sent, acknowledged and forgotten, and a crash
        // before the store knew the turn ended would report it again.
        // In this order a crash between the steps finds either the journaled
        // COMPLETED (restore then does not report the turn) or a finished
        // turn with its COMPLETED still journaled.
        let completed = self
            .rt
            .outbox
            .journal(messages::turn(
                rid,
                &thread_id,
                &turn.id,
                TurnStatus::Completed,
            ))
            .await;
        if let Err(e) = self
            .rt
            .store
            .record_turn_end(thread_id.clone(), turn.id.clone())
            .await
        {
            tracing::error!(%thread_id, error = %e, "recording the turn's end failed");
        }
        self.rt.outbox.queue(completed).await;
        for rid in turn.interrupted_again {
            let again = messages::turn(Some(rid), &thread_id, &turn.id, TurnStatus::Completed);
            self.send(again).await;
        }
        tracing::debug!(%thread_id, turn_id = %turn.id, ?outcome, "turn ended");
        self.last_turn = Some(turn.id);
        self.rt.turn_finished(&thread_id, &outcome);
    }

    /// The adapter did not stop an interrupted turn in time: end it here;
    /// dropping its event stream tells the adapter to give up.
    async fn abandon_turn(&mut self) {
        tracing::warn!(thread_id = %self.spec.thread_id, "interrupted turn did not stop in time; abandoning it");
        self.end_turn(TurnOutcome::Interrupted).await;
    }

    /// Process the running turn's events until it ends, without taking new
    /// requests; a turn that does not end within [`INTERRUPT_GRACE`] is
    /// abandoned.
    async fn finish_inline(&mut self) {
        let deadline = Instant::now() + INTERRUPT_GRACE;
        while let Some(turn) = &mut self.active {
            match tokio::time::timeout_at(deadline, turn.events.recv()).await {
                Ok(event) => {
                    self.on_event(event).await;
                }
                Err(_) => self.abandon_turn().await,
            }
        }
    }

    async fn delete(&mut self, rid: RequestId) {
        if let Some(turn) = &mut self.active {
            if turn.interrupted.is_none() {
                turn.interrupted = Some((rid.clone(), Instant::now() + INTERRUPT_GRACE));
            }
            turn.control.interrupt();
        }
        if self.active.is_some() {
            self.turn_ended_approvals().await;
            self.finish_inline().await;
        }
        let rt = &self.rt;
        if let Some(adapter) = &self.adapter
            && let Err(e) = adapter.delete_thread(&self.spec).await
        {
            crate::observe::metrics::adapter_error(&self.sdk, "delete_thread");
            tracing::warn!(thread_id = %self.spec.thread_id, error = %e, "SDK failed to delete thread");
        }
        // Every process of the thread goes, whatever group it is in, and
        // so do its directories and credential.
        rt.discard_thread(&self.spec.agent_id, &self.spec.thread_id)
            .await;
        if let Err(e) = rt.store.delete_thread(&self.spec.thread_id) {
            tracing::error!(thread_id = %self.spec.thread_id, error = %e, "deleting thread state failed");
        }
        rt.mailboxes.forget_thread(&self.spec.thread_id);
        self.send(messages::thread(
            rid,
            &self.spec.thread_id,
            ThreadStatus::Deleted,
        ))
        .await;
    }
}
