//! One generation per session at a time. A session's [`GenerationSlot`]
//! holds the running generation's cancel token and, for agent-loop turns,
//! its steering queue; the [`Lease`] a generation holds frees the slot when
//! it ends. Steering messages are handed over under the slot's lock, so a
//! message is either picked up by the running loop or refused — never lost
//! between "the loop decided to stop" and "the slot was freed".

use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::session::message::StoredMessage;

/// Steering batches buffered per generation.
const STEER_QUEUE: usize = 16;

struct Running {
    id: u64,
    kind: &'static str,
    cancel: CancellationToken,
    steer: Option<mpsc::Sender<Vec<StoredMessage>>>,
}

/// The slot of a session's running generation.
#[derive(Clone, Default)]
pub struct GenerationSlot {
    inner: Arc<Mutex<SlotState>>,
}

#[derive(Default)]
struct SlotState {
    next_id: u64,
    running: Option<Running>,
}

impl std::fmt::Debug for GenerationSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GenerationSlot")
            .field("busy", &self.busy())
            .finish()
    }
}

/// Why steering did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SteerRefused {
    /// Nothing runs: start a generation instead.
    Idle,
    /// What runs (compaction, structured output) takes no steering.
    NotSteerable(&'static str),
    /// The steering queue is full.
    Full,
}

impl GenerationSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether something runs.
    pub fn busy(&self) -> bool {
        self.lock().running.is_some()
    }

    /// Claims the slot; `Err(kind)` names what already runs.
    pub fn begin(
        &self,
        kind: &'static str,
        steerable: bool,
        parent: &CancellationToken,
    ) -> Result<Lease, &'static str> {
        let mut state = self.lock();
        if let Some(running) = &state.running {
            return Err(running.kind);
        }
        state.next_id += 1;
        let id = state.next_id;
        let cancel = parent.child_token();
        let (tx, rx) = if steerable {
            let (tx, rx) = mpsc::channel(STEER_QUEUE);
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        state.running = Some(Running {
            id,
            kind,
            cancel: cancel.clone(),
            steer: tx,
        });
        Ok(Lease {
            slot: self.clone(),
            id,
            cancel,
            steer: rx,
            released: false,
        })
    }

    /// Hands messages to the running loop.
    pub fn steer(&self, messages: Vec<StoredMessage>) -> Result<(), SteerRefused> {
        let state = self.lock();
        let Some(running) = &state.running else {
            return Err(SteerRefused::Idle);
        };
        let Some(tx) = &running.steer else {
            return Err(SteerRefused::NotSteerable(running.kind));
        };
        tx.try_send(messages).map_err(|_| SteerRefused::Full)
    }

    /// Cancels what runs; true when something did.
    pub fn cancel(&self) -> bool {
        match &self.lock().running {
            Some(running) => {
                running.cancel.cancel();
                true
            }
            None => false,
        }
    }
}

/// A running generation's hold on its session's slot.
pub struct Lease {
    slot: GenerationSlot,
    id: u64,
    pub cancel: CancellationToken,
    steer: Option<mpsc::Receiver<Vec<StoredMessage>>>,
    released: bool,
}

impl Lease {
    /// Steering messages that arrived since the last call.
    pub fn take_steered(&mut self) -> Vec<StoredMessage> {
        let mut out = Vec::new();
        if let Some(rx) = &mut self.steer {
            while let Ok(batch) = rx.try_recv() {
                out.extend(batch);
            }
        }
        out
    }

    /// Called when the loop would stop: returns steering messages that
    /// arrived meanwhile (the loop goes on), or frees the slot (`None`).
    pub fn finish_or_steered(&mut self) -> Option<Vec<StoredMessage>> {
        let slot = self.slot.clone();
        let mut state = slot.lock();
        let late = self.take_steered();
        if !late.is_empty() {
            return Some(late);
        }
        if state.running.as_ref().is_some_and(|r| r.id == self.id) {
            state.running = None;
        }
        self.released = true;
        None
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let mut state = self.slot.lock();
        if state.running.as_ref().is_some_and(|r| r.id == self.id) {
            state.running = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::message::MessageRole;

    #[test]
    fn one_generation_at_a_time_and_steering_is_never_lost() {
        let slot = GenerationSlot::default();
        let root = CancellationToken::new();
        assert_eq!(slot.steer(vec![]), Err(SteerRefused::Idle));
        let mut lease = slot.begin("generate", true, &root).unwrap();
        assert_eq!(slot.begin("generate", true, &root).err(), Some("generate"));
        slot.steer(vec![StoredMessage::text(MessageRole::User, "more")])
            .unwrap();
        let late = lease.finish_or_steered().expect("steered text picked up");
        assert_eq!(late[0].content, "more");
        assert!(lease.finish_or_steered().is_none());
        assert!(!slot.busy());
        let compact = slot.begin("compact", false, &root).unwrap();
        assert_eq!(
            slot.steer(vec![]),
            Err(SteerRefused::NotSteerable("compact"))
        );
        assert!(slot.cancel());
        assert!(compact.cancel.is_cancelled());
        drop(compact);
        assert!(!slot.busy());
    }
}
