//! The link's side: taking updates out, one or a batch, waiting for one,
//! each masked again if a secret was added while it waited.

use std::sync::atomic::Ordering;

use agent_runner_proto::runner::ClientMessage;

use super::{Outbox, Taken};

impl Outbox {
    /// Take the oldest update, waiting for one, decoded (for tests and
    /// tools; the link takes bytes). Cancel-safe: an update is removed only
    /// when this returns it.
    pub async fn pop(&self) -> ClientMessage {
        super::decode(&self.pop_entry().await.encoded)
    }

    /// [`Outbox::pop`] with the update's journal entry.
    pub async fn pop_entry(&self) -> Taken {
        loop {
            let filled = self.filled.notified();
            tokio::pin!(filled);
            filled.as_mut().enable();
            let next = {
                let mut queue = self.lock();
                let next = queue.pop_front();
                if next.is_some() && self.hold_taken.load(Ordering::Relaxed) {
                    self.held.fetch_add(1, Ordering::Relaxed);
                }
                next
            };
            if let Some((taken, masked)) = next {
                self.drained.notify_waiters();
                // Let another waiting consumer see what is left.
                self.filled.notify_one();
                return self.remasked(taken, masked, self.redactor.generation());
            }
            filled.await;
        }
    }

    /// Waits until an update is queued, taking nothing (the caller takes it
    /// with [`Outbox::try_pop_many`] under its own lock, so that what it
    /// takes and what it records of it cannot be told apart by anyone).
    /// Cancel-safe.
    pub async fn wait_nonempty(&self) {
        loop {
            let filled = self.filled.notified();
            tokio::pin!(filled);
            filled.as_mut().enable();
            if !self.is_empty() {
                // Pass the wake-up on: another waiting consumer may take
                // what this one does not.
                self.filled.notify_one();
                return;
            }
            filled.await;
        }
    }

    /// Takes up to `max` more updates without waiting (a batch to send).
    pub fn try_pop_many(&self, max: usize) -> Vec<Taken> {
        let mut queue = self.lock();
        // Urgent replies are taken alone: a batch with a journaled update
        // goes on the wire only after a journal commit, which an answer
        // to a heartbeat has no reason to wait for.
        let max = match queue.urgent {
            0 => max,
            urgent => max.min(urgent),
        };
        let mut out = Vec::new();
        while out.len() < max {
            match queue.pop_front() {
                Some(t) => out.push(t),
                None => break,
            }
        }
        if self.hold_taken.load(Ordering::Relaxed) {
            self.held.fetch_add(out.len(), Ordering::Relaxed);
        }
        drop(queue);
        if !out.is_empty() {
            self.drained.notify_waiters();
        }
        let now = self.redactor.generation();
        out.into_iter()
            .map(|(taken, masked)| self.remasked(taken, masked, now))
            .collect()
    }
}
