//! A turn's [`TurnControl`]: the steering queue and the interrupt, shared
//! between the runner (which calls `steer`/`interrupt`) and the turn task.
//!
//! The guarantee that matters: `steer` never returns `Ok` for a text that will
//! not run because the turn finished. Both sides decide under one lock — the
//! task takes the queued messages and, when nothing is left to run, marks the
//! turn ended in the same critical section; `steer` refuses once it is ended.
//! An interrupt also marks the turn ended (the turn is stopping), so a steer
//! after `interrupt` is refused; messages accepted before the interrupt and
//! not started yet are dropped with the rest of the turn, as are those queued
//! behind a step that fails the turn.

use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use sdk_adapter::{SteerError, TurnControl};
use tokio_util::sync::CancellationToken;

use crate::plan::{Entry, Plan, Steering};

/// What the turn does at a step boundary.
#[derive(Debug)]
pub(crate) enum Next {
    /// Run this entry.
    Run(Entry),
    /// Nothing is left: the turn completed.
    Completed,
    /// `interrupt` was called.
    Interrupted,
}

#[derive(Debug, Default)]
struct State {
    /// No steering is accepted any more.
    ended: bool,
    /// Accepted, not yet in the plan; oldest first.
    pending: Vec<Steering>,
}

/// The control half of a scripted turn.
#[derive(Debug, Default)]
pub(crate) struct ScriptedControl {
    cancel: CancellationToken,
    state: Mutex<State>,
}

impl ScriptedControl {
    /// Cancelled by `interrupt`.
    pub(crate) fn cancel_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// At a step boundary: move accepted steering into `plan` and take the
    /// next entry. When that finishes the turn, the turn is marked ended
    /// before the lock is released.
    pub(crate) fn next(&self, plan: &mut Plan) -> Next {
        let mut state = self.lock();
        if self.cancel.is_cancelled() {
            state.ended = true;
            return Next::Interrupted;
        }
        plan.insert_steering(std::mem::take(&mut state.pending));
        match plan.pop() {
            None => {
                state.ended = true;
                Next::Completed
            }
            Some(entry) => {
                if entry.ends_turn() {
                    state.ended = true;
                }
                Next::Run(entry)
            }
        }
    }

    /// The turn is over (for whatever reason): refuse further steering.
    pub(crate) fn end(&self) {
        let mut state = self.lock();
        state.ended = true;
        state.pending.clear();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent even if a holder panicked.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl TurnControl for ScriptedControl {
    async fn steer(&self, text: String, tag: u64) -> Result<(), SteerError> {
        let mut state = self.lock();
        if state.ended {
            return Err(SteerError::TurnEnded);
        }
        state.pending.push(Steering { text, tag });
        Ok(())
    }

    fn interrupt(&self) {
        self.lock().ended = true;
        self.cancel.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn steering_is_refused_once_the_plan_runs_out() {
        let control = ScriptedControl::default();
        let mut plan = Plan::from_message("say a");
        assert!(matches!(control.next(&mut plan), Next::Run(_)));
        control.steer("say b".into(), 1).await.unwrap();
        assert!(matches!(
            control.next(&mut plan),
            Next::Run(Entry::Steering(_))
        ));
        assert!(matches!(control.next(&mut plan), Next::Run(_)));
        assert!(matches!(control.next(&mut plan), Next::Completed));
        assert!(matches!(
            control.steer("say c".into(), 2).await,
            Err(SteerError::TurnEnded)
        ));
    }

    #[tokio::test]
    async fn steering_is_refused_before_a_failing_step() {
        let control = ScriptedControl::default();
        let mut plan = Plan::from_message("fail no");
        assert!(matches!(control.next(&mut plan), Next::Run(_)));
        assert!(matches!(
            control.steer("say c".into(), 1).await,
            Err(SteerError::TurnEnded)
        ));
    }

    #[tokio::test]
    async fn interrupt_ends_steering_and_the_plan() {
        let control = ScriptedControl::default();
        let mut plan = Plan::from_message("say a\nsay b");
        control.steer("say c".into(), 1).await.unwrap();
        control.interrupt();
        control.interrupt();
        assert!(control.cancel_token().is_cancelled());
        assert!(matches!(
            control.steer("say d".into(), 2).await,
            Err(SteerError::TurnEnded)
        ));
        assert!(matches!(control.next(&mut plan), Next::Interrupted));
    }
}
