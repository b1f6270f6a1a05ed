//! Steering against the end of a turn, decided under one lock.
//!
//! An SDK may accept a steer and end its turn before the answer to the steer
//! reaches the adapter. So a turn task does not finish while a steer is in
//! flight ([`SteerGate::try_end`] says no; it waits for the steer to settle),
//! and a steer that comes once the task decided to finish, or after an
//! interrupt, is refused with [`SteerError::TurnEnded`] (the runner starts a
//! new turn with the text). Adapters whose SDK answers steers on its own
//! schedule (codex, code-agent) share this; what a steer sends stays theirs.

use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio_util::sync::CancellationToken;

use crate::SteerError;

#[derive(Debug, Default)]
struct State {
    /// The turn task decided to finish: no steering any more.
    ended: bool,
    /// Steers sent and not yet answered.
    inflight: u32,
}

/// One turn's steering state, shared by its control and its turn task.
#[derive(Debug, Default)]
pub struct SteerGate {
    state: Mutex<State>,
    interrupted: CancellationToken,
}

impl SteerGate {
    /// A gate with nothing in flight.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The turn task wants to finish: true (and steering closes) unless a
    /// steer is in flight.
    pub fn try_end(&self) -> bool {
        let mut state = self.lock();
        if state.inflight > 0 {
            return false;
        }
        state.ended = true;
        true
    }

    /// The turn is over, whatever happens to steers still in flight.
    pub fn end(&self) {
        self.lock().ended = true;
    }

    /// A steer starts: refused once the turn ended or was interrupted;
    /// otherwise it counts as in flight until [`SteerGate::settle`].
    pub fn begin_steer(&self) -> Result<(), SteerError> {
        let mut state = self.lock();
        if state.ended || self.interrupted.is_cancelled() {
            return Err(SteerError::TurnEnded);
        }
        state.inflight += 1;
        Ok(())
    }

    /// A steer begun with [`SteerGate::begin_steer`] finished, one way or
    /// the other.
    pub fn settle(&self) {
        let mut state = self.lock();
        state.inflight = state.inflight.saturating_sub(1);
    }

    /// Marks the turn interrupted: true the first time only.
    pub fn interrupt(&self) -> bool {
        let _state = self.lock();
        if self.interrupted.is_cancelled() {
            return false;
        }
        self.interrupted.cancel();
        true
    }

    /// Cancelled once [`SteerGate::interrupt`] was called.
    pub fn interrupted(&self) -> &CancellationToken {
        &self.interrupted
    }

    /// Whether [`SteerGate::interrupt`] was called.
    pub fn is_interrupted(&self) -> bool {
        self.interrupted.is_cancelled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steer_in_flight_holds_the_end_off() {
        let gate = SteerGate::new();
        assert!(gate.begin_steer().is_ok());
        assert!(!gate.try_end());
        // Still open: another steer may join.
        assert!(gate.begin_steer().is_ok());
        gate.settle();
        gate.settle();
        assert!(gate.try_end());
        assert!(matches!(gate.begin_steer(), Err(SteerError::TurnEnded)));
    }

    #[test]
    fn end_closes_steering_even_with_steers_in_flight() {
        let gate = SteerGate::new();
        assert!(gate.begin_steer().is_ok());
        gate.end();
        assert!(matches!(gate.begin_steer(), Err(SteerError::TurnEnded)));
    }

    #[test]
    fn interrupt_counts_once_and_refuses_steers() {
        let gate = SteerGate::new();
        assert!(!gate.is_interrupted());
        assert!(gate.interrupt());
        assert!(!gate.interrupt());
        assert!(gate.is_interrupted());
        assert!(gate.interrupted().is_cancelled());
        assert!(matches!(gate.begin_steer(), Err(SteerError::TurnEnded)));
        // Interrupting does not end the turn: the task still decides that.
        assert!(gate.try_end());
    }
}
