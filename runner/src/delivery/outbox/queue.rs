//! The queued updates and the indexes of the intermediate ones, which
//! keep making room O(1) mostly and O(log n) at worst (see the outbox's
//! module doc): the data structure, apart from the policy that uses it.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;

use super::{Journaled, Taken};
use crate::delivery::label::Label;

/// A queued update.
pub(super) struct Slot {
    /// Its place: increasing front to back.
    seq: u64,
    /// Its [`Label::supersede_key`] (`None`: not intermediate).
    key: Option<u64>,
    /// Its journal entry (durable updates of a journaled outbox).
    pub(super) journal: Option<u64>,
    /// Its encoding, shared with the journal ([`Journaled::encoded`]).
    pub(super) encoded: Bytes,
    /// The redactor's generation it was masked at.
    pub(super) masked: u64,
    /// What it is. `None`: dropped to make room, the slot left in place
    /// until the front reaches it or a sweep.
    pub(super) label: Option<Label>,
}

/// The queued updates and the indexes of the intermediate ones.
pub(super) struct Queue {
    /// The updates, sequence numbers increasing front to back, with the
    /// empty slots of dropped ones among them.
    pub(super) items: VecDeque<Slot>,
    /// How many of `items` are empty.
    empty: usize,
    /// The sequence number of the next update queued at the back.
    next: u64,
    /// Sequence numbers of the queued intermediate updates, oldest first.
    /// Only ever removed oldest first: updates leave from the front, and
    /// room is made by dropping the oldest intermediate one (urgent
    /// replies, queued at the front, are never intermediate). So a deque,
    /// not an ordered set.
    intermediate: VecDeque<u64>,
    /// The newest queued intermediate update per [`Label::supersede_key`]
    /// (a match is re-checked with [`Label::supersedes`] before anything
    /// is replaced).
    newest: HashMap<u64, u64, Hashing>,
    /// How many of the front entries were queued urgently
    /// ([`Queue::push_front`]): they are taken alone (see
    /// [`Outbox::try_pop_many`]). Urgent replies are never intermediate,
    /// so nothing removes them from the middle; were one removed, the count
    /// would only make one later batch smaller.
    pub(super) urgent: usize,
}

/// The outbox's hashing: foldhash, seeded per process. SipHash (std's
/// default) is needlessly slow for keys that are a hash already.
pub(super) type Hashing = foldhash::fast::RandomState;

impl Queue {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            items: VecDeque::with_capacity(capacity.min(1024)),
            empty: 0,
            // Room below for updates queued at the front.
            next: 1 << 62,
            intermediate: VecDeque::new(),
            newest: HashMap::default(),
            urgent: 0,
        }
    }

    /// Queued updates (empty slots not counted).
    pub(super) fn len(&self) -> usize {
        self.items.len() - self.empty
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(super) fn push_back_journaled(&mut self, entry: Journaled) {
        let seq = self.next;
        self.next += 1;
        let key = self.index(seq, &entry.label);
        self.items.push_back(Slot {
            seq,
            key,
            journal: entry.journal,
            encoded: entry.encoded,
            masked: entry.masked,
            label: Some(entry.label),
        });
    }

    pub(super) fn push_front(&mut self, label: Label, encoded: Bytes, masked: u64) {
        let seq = match self.items.front() {
            Some(front) => front.seq - 1,
            None => {
                self.next += 1;
                self.next - 1
            }
        };
        // Not indexed: an urgent update (a heartbeat answer, never
        // intermediate) is neither coalesced nor dropped.
        self.items.push_front(Slot {
            seq,
            key: None,
            journal: None,
            encoded,
            masked,
            label: Some(label),
        });
        self.urgent += 1;
    }

    /// The front update, with the generation it was masked at.
    pub(super) fn pop_front(&mut self) -> Option<(Taken, u64)> {
        loop {
            let slot = self.items.pop_front()?;
            let Some(label) = slot.label else {
                self.empty -= 1;
                continue;
            };
            self.urgent = self.urgent.saturating_sub(1);
            self.unindex(slot.seq, slot.key);
            let taken = Taken {
                label,
                journal: slot.journal,
                encoded: slot.encoded,
            };
            return Some((taken, slot.masked));
        }
    }

    /// Indexes the update labelled `label`, queued at the back as `seq`,
    /// if it is intermediate; returns its key.
    pub(super) fn index(&mut self, seq: u64, label: &Label) -> Option<u64> {
        let key = label.supersede_key()?;
        self.intermediate.push_back(seq);
        self.newest.insert(key, seq);
        Some(key)
    }

    /// Forgets the update queued as `seq` (with `key`) in the indexes.
    pub(super) fn unindex(&mut self, seq: u64, key: Option<u64>) {
        let Some(key) = key else { return };
        // The oldest, always (see `intermediate`); searched for if not.
        if self.intermediate.front() == Some(&seq) {
            self.intermediate.pop_front();
        } else if let Ok(pos) = self.intermediate.binary_search(&seq) {
            self.intermediate.remove(pos);
        }
        if self.newest.get(&key) == Some(&seq) {
            self.newest.remove(&key);
        }
    }

    /// Where the slot numbered `seq` is. Numbers are consecutive front to
    /// back (queued at either end, taken from the front, emptied in
    /// place) until a sweep removes empty slots, so the offset from the
    /// front is tried first; a search after a sweep.
    pub(super) fn position(&self, seq: u64) -> Option<usize> {
        let front = self.items.front()?.seq;
        let guess = usize::try_from(seq.checked_sub(front)?).ok()?;
        if self.items.get(guess).is_some_and(|slot| slot.seq == seq) {
            return Some(guess);
        }
        self.items.binary_search_by_key(&seq, |slot| slot.seq).ok()
    }

    /// Where the newest queued update that the one labelled `label`
    /// supersedes is, if any.
    pub(super) fn superseded(&self, label: &Label) -> Option<usize> {
        let key = label.supersede_key()?;
        let pos = self.position(*self.newest.get(&key)?)?;
        let queued = self.items[pos].label.as_ref()?;
        label.supersedes(queued).then_some(pos)
    }

    /// Drop the oldest queued intermediate update: `None` if there is
    /// none, else its journal entry, if it has one (a token-usage update).
    pub(super) fn drop_oldest_intermediate(&mut self) -> Option<Option<u64>> {
        let pos = self
            .intermediate
            .front()
            .and_then(|seq| self.position(*seq))?;
        let slot = self.items.get_mut(pos)?;
        slot.label.take()?;
        // Its bytes go with it (the slot may stay until a sweep).
        slot.encoded = Bytes::new();
        let (seq, key, journal) = (slot.seq, slot.key, slot.journal.take());
        self.empty += 1;
        self.unindex(seq, key);
        if self.empty > self.len() {
            self.sweep();
        }
        Some(journal)
    }

    /// Removes the empty slots: O(n), once they outnumber the queued updates
    /// (so at most once per n drops).
    pub(super) fn sweep(&mut self) {
        self.items.retain(|slot| slot.label.is_some());
        self.empty = 0;
    }
}
