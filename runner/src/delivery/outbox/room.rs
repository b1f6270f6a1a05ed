//! Making room when the bound is reached: coalesce, else drop the oldest
//! intermediate update, else drop the new one if it is intermediate, else
//! make the producer wait (the rules of the outbox's module doc).

use std::sync::atomic::{AtomicU64, Ordering};

use super::queue::Queue;
use super::{Journaled, Outbox};

impl Outbox {
    /// Queue the message in `slot` (taking it) or make room for it; leaves
    /// it there and returns false when the producer must wait.
    #[cfg(test)]
    pub(super) fn try_push(
        &self,
        slot: &mut Option<agent_runner_proto::runner::ClientMessage>,
    ) -> bool {
        let mut entry = slot.take().map(|message| {
            let admitted = self.admit(message, None);
            Journaled {
                masked: admitted.masked,
                label: admitted.label,
                journal: None,
                encoded: admitted.encoded,
            }
        });
        let pushed = self.try_push_entry(&mut entry);
        *slot = entry.map(|j| super::decode(&j.encoded));
        pushed
    }

    /// [`Outbox::try_push`] of an update with its journal entry.
    pub(super) fn try_push_entry(&self, slot: &mut Option<Journaled>) -> bool {
        let Some(entry) = slot.take() else {
            return true;
        };
        let mut queue = self.lock();
        if self.has_room(&queue) {
            queue.push_back_journaled(entry);
            drop(queue);
            self.filled.notify_one();
            return true;
        }
        if let Some(pos) = queue.superseded(&entry.label) {
            // Same key, same sequence number: the indexes stay as they are.
            // A token-usage update is journaled: the one it replaces is
            // forgotten (a crash before that lands re-sends both, in order).
            let slot = &mut queue.items[pos];
            slot.label = Some(entry.label);
            slot.encoded = entry.encoded;
            slot.masked = entry.masked;
            let replaced = std::mem::replace(&mut slot.journal, entry.journal);
            drop(queue);
            self.forget(replaced);
            self.count(&self.coalesced, "coalesced");
            crate::observe::metrics::outbox_coalesced();
            return true;
        }
        if let Some(dropped) = queue.drop_oldest_intermediate() {
            queue.push_back_journaled(entry);
            drop(queue);
            self.forget(dropped);
            self.count(&self.dropped, "dropped");
            crate::observe::metrics::outbox_dropped();
            self.filled.notify_one();
            return true;
        }
        if entry.label.is_intermediate() {
            drop(queue);
            self.forget(entry.journal);
            self.count(&self.dropped, "dropped");
            crate::observe::metrics::outbox_dropped();
            return true;
        }
        *slot = Some(entry);
        false
    }

    /// Whether one more update fits under the bound (queued plus held).
    pub(super) fn has_room(&self, queue: &Queue) -> bool {
        queue.len() + self.held.load(Ordering::Relaxed) < self.capacity
    }

    /// Forgets the journal entry of an update given up to make room (a
    /// token-usage update), without waiting: a crash before it lands only
    /// sends it again, before the update that replaced it.
    fn forget(&self, journal: Option<u64>) {
        if let (Some(j), Some(id)) = (&self.journal, journal) {
            j.forget(vec![id]);
        }
    }

    pub(super) fn count(&self, counter: &AtomicU64, what: &str) {
        let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
        // Log at 1, 2, 4, 8… so a long disconnect cannot flood the log.
        if n.is_power_of_two() {
            tracing::warn!(
                total = n,
                capacity = self.capacity,
                "outbox full: {what} intermediate updates"
            );
        }
    }
}
