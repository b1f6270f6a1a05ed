//! The waiting side of a turn task that drives a child process (codex,
//! Claude Code): the next message the child's router has for the turn
//! ([`TurnSink`]), or the end of the turn — nobody reads its events any
//! more, the router went away, the child exited, or it did not stop within
//! the grace period after an interrupt (then it is killed).

use std::sync::Arc;
use std::time::Duration;

use sdk_adapter::{Gone, TurnEvent, TurnOutcome, sleep_until};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::{ChildHandle, TurnSink};

/// What [`TurnInbox::next`] found.
#[derive(Debug)]
pub enum Next<M> {
    /// A message for the turn.
    Message(M),
    /// The tick the caller asked for is due.
    Tick,
    /// The turn is over.
    Ended(TurnOutcome),
}

/// One turn's listening post on its child.
#[derive(Debug)]
pub struct TurnInbox<M> {
    turn_id: String,
    /// The child as messages name it ("claude", "codex app-server").
    name: &'static str,
    child: ChildHandle,
    sink: Arc<TurnSink<M>>,
    sink_id: u64,
    msgs: mpsc::UnboundedReceiver<M>,
    grace: Duration,
    deadline: Option<Instant>,
}

impl<M> TurnInbox<M> {
    /// Listens to what `sink` installation `sink_id` delivers to `msgs`.
    /// `grace` is how long the child gets to stop after an interrupt.
    pub fn new(
        turn_id: String,
        name: &'static str,
        child: ChildHandle,
        (sink, sink_id, msgs): (Arc<TurnSink<M>>, u64, mpsc::UnboundedReceiver<M>),
        grace: Duration,
    ) -> Self {
        Self {
            turn_id,
            name,
            child,
            sink,
            sink_id,
            msgs,
            grace,
            deadline: None,
        }
    }

    /// Waits for the next message, `tick`, or the end of the turn. Gone
    /// when the receiver of `events` was dropped. In that order when more
    /// than one is ready.
    pub async fn next(
        &mut self,
        events: &mpsc::Sender<TurnEvent>,
        tick: Option<Instant>,
    ) -> Result<Next<M>, Gone> {
        tokio::select! {
            biased;
            () = events.closed() => Err(Gone),
            msg = self.msgs.recv() => Ok(match msg {
                Some(msg) => Next::Message(msg),
                None => Next::Ended(TurnOutcome::Failed(format!("{} connection closed", self.name))),
            }),
            () = sleep_until(tick), if tick.is_some() => Ok(Next::Tick),
            () = sleep_until(self.deadline), if self.deadline.is_some() => {
                tracing::warn!(turn_id = %self.turn_id, "{} did not stop the turn in time; killing it", self.name);
                self.child.kill();
                Ok(Next::Ended(TurnOutcome::Interrupted))
            }
        }
    }

    /// An interrupt was asked: the grace period starts (the first time).
    pub fn interrupting(&mut self) {
        let grace = self.grace;
        self.deadline.get_or_insert_with(|| Instant::now() + grace);
    }

    /// How the turn ends when the child exited for `reason`.
    pub fn exited(&self, interrupted: bool, reason: &str) -> TurnOutcome {
        if interrupted {
            TurnOutcome::Interrupted
        } else {
            TurnOutcome::Failed(format!("{} exited during the turn: {reason}", self.name))
        }
    }

    /// The turn is over: the child's messages no longer come here.
    pub fn stop_listening(&self) {
        self.sink.clear(self.sink_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ChildSpec, JsonChild};

    fn child() -> JsonChild {
        let spec = ChildSpec::new("inbox test", "sh")
            .arg("-c")
            .arg("sleep 600");
        JsonChild::spawn(
            spec,
            &sdk_adapter::testing::shared_sandbox(),
            Arc::new(|_: &serde_json::Value| None),
        )
        .unwrap()
        .0
    }

    fn inbox(child: &JsonChild, grace: Duration) -> (TurnInbox<u32>, Arc<TurnSink<u32>>) {
        let sink = Arc::new(TurnSink::default());
        let (id, _tx, rx) = sink.install();
        let inbox = TurnInbox::new(
            "turn-1".into(),
            "fake cli",
            child.handle().clone(),
            (sink.clone(), id, rx),
            grace,
        );
        (inbox, sink)
    }

    #[tokio::test]
    async fn messages_then_the_router_going_away() {
        let child = child();
        let (mut inbox, sink) = inbox(&child, Duration::from_secs(600));
        let (events, _receiver) = mpsc::channel(1);
        assert!(sink.send(7));
        assert!(matches!(
            inbox.next(&events, None).await,
            Ok(Next::Message(7))
        ));
        let tick = Some(Instant::now());
        assert!(matches!(inbox.next(&events, tick).await, Ok(Next::Tick)));
        inbox.stop_listening();
        assert!(!sink.send(8));
        match inbox.next(&events, None).await {
            Ok(Next::Ended(TurnOutcome::Failed(text))) => {
                assert_eq!(text, "fake cli connection closed")
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn nobody_listening_is_gone() {
        let child = child();
        let (mut inbox, sink) = inbox(&child, Duration::from_secs(600));
        let (events, receiver) = mpsc::channel(1);
        drop(receiver);
        assert!(sink.send(7));
        assert!(matches!(inbox.next(&events, None).await, Err(Gone)));
    }

    #[tokio::test]
    async fn the_child_is_killed_when_the_grace_is_over() {
        let child = child();
        let (mut inbox, _sink) = inbox(&child, Duration::ZERO);
        let (events, _receiver) = mpsc::channel(1);
        inbox.interrupting();
        assert!(matches!(
            inbox.next(&events, None).await,
            Ok(Next::Ended(TurnOutcome::Interrupted))
        ));
        assert!(child.handle().is_gone());
    }

    #[tokio::test]
    async fn an_exit_fails_the_turn_unless_interrupted() {
        let child = child();
        let (inbox, _sink) = inbox(&child, Duration::ZERO);
        assert_eq!(inbox.exited(true, "exit 1"), TurnOutcome::Interrupted);
        assert_eq!(
            inbox.exited(false, "exit 1"),
            TurnOutcome::Failed("fake cli exited during the turn: exit 1".into())
        );
    }
}
