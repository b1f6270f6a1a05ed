//! The outbox: every update on its way to the control plane, in order.
//!
//! Producers (thread and agent tasks) push; [`crate::delivery::sending`]
//! takes from it for the live ControlChannel. While disconnected, updates
//! wait here and go out in order after the reconnect. What was handed to a
//! connection but is not yet known to have arrived is kept by
//! [`crate::delivery::sending`] ([`crate::delivery::in_flight`]), not here.
//!
//! Durable updates (terminal, structural and token usage: see
//! [`is_durable`](crate::delivery::label::is_durable)) are journaled ([`crate::delivery::journal`]) before they
//! are queued — the producer waits for the write — so they survive a
//! crash; each carries its journal id out of the outbox so the link can
//! forget it once delivery is settled (or the outbox, when it gives up a
//! token-usage update to make room).
//!
//! Bounded by `capacity`, which counts the queued updates plus the ones the
//! link still holds unsettled ([`Outbox::set_unsettled`]): a control plane
//! that stops acknowledging fills the bound and producers feel it. When
//! full, room is made by giving up intermediate updates (queued, never yet
//! sent), never terminal ones:
//! 1. a RUNNING item update replaces the queued RUNNING update of the same
//!    item (its text is newer; coalesced), a token-usage update replaces the
//!    queued one of the same thread;
//! 2. else the oldest queued RUNNING item update or token-usage update is
//!    dropped;
//! 3. else, if the new update is itself intermediate, it is dropped;
//! 4. else (only terminal/structural updates queued) the producer waits for
//!    room: backpressure reaches the turn, which pauses; nothing is lost.
//!
//! A thread's burst pushed into a full outbox first gives up its own
//! intermediate updates that a later one of the same burst makes redundant
//! (a RUNNING snapshot followed by its item's next snapshot or COMPLETED),
//! before they are masked, recorded or queued ([`Outbox::push_burst`]).
//!
//! Replies produced by the read loop itself (validation errors, heartbeats)
//! use [`Outbox::push_reply`], which never waits: they may exceed the bound by
//! at most what the control plane sends while connected.
//! Coalesced and dropped updates are counted and logged.
//!
//! Every update is masked as it enters, whichever way it came (thread
//! task, command reply, read-loop reply): its free text scanned once for
//! the secrets of the runner's redactor ([`crate::delivery::messages::redact`]). The
//! journal, the transcripts and the wire all get that masked update; only
//! one that waited here while a secret was added is scanned again, as it
//! is taken out ([`Redactor::generation`]), not once more on the way out
//! and again for its transcript.
//!
//! Every update is also encoded as it enters, once, right after its mask:
//! those bytes are the journal's record of a durable update and what the
//! wire writes (its sequence number appended there), so no update is
//! encoded again on its way out (only one masked again is). Validity is
//! the builders' ([`crate::delivery::messages`] and their tests), not
//! checked again per update.
//!
//! Every update naming a thread (or pushed for one:
//! [`Outbox::push_for_thread`]) is then recorded in its transcript
//! ([`crate::delivery::transcript`]): its line formatted here and handed
//! to the writer's bounded queue with a non-blocking push, which drops
//! (and counts) when full.
//!
//! From then on the update is its bytes and its
//! [`Label`](crate::delivery::label::Label): the update itself is freed
//! here, by the producer that made it (see the label's module doc).
//!
//! Making room costs O(1) mostly and O(log n) at worst, never a scan of the
//! queue: a full outbox is exactly when the runner is behind, so that path
//! must stay cheap (a scan of 10,000 entries per update made a full outbox
//! ~6x slower to fill and drain; see bench/). Each queued update has a
//! sequence number, consecutive front to back, so a slot's place is its
//! number's offset from the front's (a binary search once a sweep, below,
//! has left gaps); the intermediate ones are indexed by age and by what
//! supersedes them. A dropped update leaves its slot empty rather than
//! shifting the ones behind it (thousands of slots per drop); empty slots
//! are skipped as the front is taken, and swept out at once when they
//! outnumber the queued updates, so the slots stay within twice the bound.
//!
//! The parts: [`queue`] holds the updates and the indexes that make room
//! cheap, by each update's [`Label`](crate::delivery::label::Label)
//! (which says which updates are durable, intermediate or redundant);
//! [`push`] is the producers' side (masking, journaling,
//! transcripts, bursts); [`room`] applies the rules above when the bound is
//! reached; [`take`] is the link's side.

mod push;
mod queue;
mod room;
mod take;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use agent_runner_proto::runner::ClientMessage;
use bytes::Bytes;
use prost::Message;
use tokio::sync::Notify;

use crate::delivery::journal::Journal;
use crate::delivery::label::Label;
use crate::delivery::outgoing::decode;
use crate::delivery::transcript::Transcripts;
use crate::util::redact::Redactor;

use queue::Queue;

/// An update taken out of the outbox, with its journal entry if it has one.
#[derive(Debug, Clone, PartialEq)]
pub struct Taken {
    /// What the update is.
    pub label: Label,
    /// Its journal entry (durable updates of a journaled outbox).
    pub journal: Option<u64>,
    /// The update encoded, once, as it entered (see [`Journaled`]): what
    /// the journal holds and what the wire writes.
    pub encoded: Bytes,
}

impl Taken {
    /// The update, decoded from its bytes (tests and tools; the link
    /// sends the bytes).
    pub fn decode(&self) -> ClientMessage {
        decode(&self.encoded)
    }
}

/// An update journaled (if durable) and not yet queued: see
/// [`Outbox::journal`].
#[derive(Debug)]
pub struct Journaled {
    label: Label,
    journal: Option<u64>,
    /// The update encoded, once, as it entered (masked): the journal's
    /// record of a durable update is these bytes (shared, not copied), and
    /// the wire writes them as they are (`link::wire`), its sequence
    /// number after them. Encoded again only when the update is masked
    /// again ([`Outbox::remasked`]).
    encoded: Bytes,
    /// The redactor's generation the update was masked at.
    masked: u64,
}

/// An update as [`Outbox::admit`] leaves it: masked, encoded, labelled.
struct Admitted {
    label: Label,
    encoded: Bytes,
    /// The redactor's generation the update was masked at.
    masked: u64,
}

/// `msg` encoded: the bytes the journal stores and the wire writes.
fn encode(msg: &ClientMessage) -> Bytes {
    msg.encode_to_vec().into()
}

/// `msgs` encoded, as [`encode`] would, into one allocation they share
/// (each a slice of it): a burst's updates cost one allocation, and one
/// free when the last of them is settled, instead of one each (their
/// bytes are freed by the link, on another thread than made them, which
/// was the largest cross-thread cost left: bench/HISTORY.md, round Z8).
/// The allocation lives as long as any of them is kept: at most a burst
/// ([`crate::delivery::journal::BURST`] updates) held for its longest-kept
/// update.
fn encode_all(msgs: &[ClientMessage]) -> Vec<Bytes> {
    // Into a `Vec` (prost writes into one much faster than into a
    // `BytesMut`), sized once; then one slice of it per update.
    let total = msgs.iter().map(Message::encoded_len).sum();
    let mut buf = Vec::with_capacity(total);
    let ends: Vec<usize> = msgs
        .iter()
        .map(|msg| {
            msg.encode_raw(&mut buf);
            buf.len()
        })
        .collect();
    let all = Bytes::from(buf);
    let mut start = 0;
    ends.into_iter()
        .map(|end| {
            let one = all.slice(start..end);
            start = end;
            one
        })
        .collect()
}

/// The outbox (see the module doc).
pub struct Outbox {
    queue: Mutex<Queue>,
    capacity: usize,
    /// Woken when an update is queued.
    filled: Notify,
    /// Woken when room is made.
    drained: Notify,
    coalesced: AtomicU64,
    dropped: AtomicU64,
    /// Updates handed to the control plane and not yet acknowledged (kept
    /// by the link for a re-send); they count against `capacity`.
    held: AtomicUsize,
    /// Every update the link keeps for a re-send (for status).
    unsettled: AtomicUsize,
    /// Whether updates taken out count as held from the moment they are
    /// taken (acked mode): the bound then never sees a batch between the
    /// queue and the link's records.
    hold_taken: AtomicBool,
    /// Where durable updates are journaled (`None`: memory only).
    journal: Option<Journal>,
    /// Masks every update as it enters (see the module doc).
    redactor: Redactor,
    /// Per-thread transcripts (set once by the runner at start).
    transcripts: OnceLock<Transcripts>,
}

/// Counters for status and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxStats {
    /// Updates waiting.
    pub depth: usize,
    /// Intermediate updates coalesced so far.
    pub coalesced: u64,
    /// Intermediate updates dropped so far.
    pub dropped: u64,
    /// Updates sent and not yet settled (acknowledged, or past the legacy
    /// re-send window).
    pub unsettled: usize,
}

impl Outbox {
    /// An outbox holding `capacity` updates, in memory only, masking
    /// `redactor`'s secrets.
    pub fn new(capacity: usize, redactor: Redactor) -> Self {
        Self {
            queue: Mutex::new(Queue::new(capacity)),
            capacity,
            filled: Notify::new(),
            drained: Notify::new(),
            coalesced: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            held: AtomicUsize::new(0),
            unsettled: AtomicUsize::new(0),
            hold_taken: AtomicBool::new(false),
            journal: None,
            redactor,
            transcripts: OnceLock::new(),
        }
    }

    /// From now on, every update naming a thread is also recorded in that
    /// thread's transcript. Only the first call counts.
    pub fn set_transcripts(&self, transcripts: Transcripts) {
        let _ = self.transcripts.set(transcripts);
    }

    /// What every update goes through as it enters: `msg` masked,
    /// encoded (the only time, unless it is masked again), labelled,
    /// recorded in the transcript of the thread it names (else `thread`'s),
    /// if any (never blocks), and freed.
    fn admit(&self, mut msg: ClientMessage, thread: Option<&str>) -> Admitted {
        let masked = self.mask(&mut msg);
        let encoded = encode(&msg);
        if let Some(t) = self.transcripts.get()
            && let Some(thread) = crate::delivery::transcript::thread_of(&msg).or(thread)
        {
            t.record(thread, &msg);
        }
        Admitted {
            label: Label::of(&msg),
            encoded,
            masked,
        }
    }

    /// Masks `msg`; returns the redactor's generation it was masked at.
    fn mask(&self, msg: &mut ClientMessage) -> u64 {
        let masked = self.redactor.generation();
        crate::delivery::messages::redact(msg, &self.redactor);
        masked
    }

    /// `taken`, masked again if a secret was added since it was masked
    /// (at generation `masked`; the redactor is at `now`).
    fn remasked(&self, mut taken: Taken, masked: u64, now: u64) -> Taken {
        if masked != now {
            // Its transcript line keeps what it was masked with; the wire
            // gets the new mask. The bytes (and the journal's record) still
            // hold the old mask: decoded, masked, encoded again.
            let mut message = decode(&taken.encoded);
            crate::delivery::messages::redact(&mut message, &self.redactor);
            taken.encoded = encode(&message);
        }
        taken
    }

    /// An outbox that journals durable updates before queueing them, each
    /// with `redactor`'s secrets masked first.
    pub fn journaled(capacity: usize, journal: Journal, redactor: Redactor) -> Self {
        Self {
            journal: Some(journal),
            ..Self::new(capacity, redactor)
        }
    }

    /// The link reports how many sent updates it keeps unsettled (`total`)
    /// and how many of them count against the bound (`held`: the
    /// unacknowledged ones), and whether updates taken from now on count as
    /// held at once (`hold_taken`: acked mode). Room made wakes waiting
    /// producers.
    pub fn set_unsettled(&self, held: usize, total: usize, hold_taken: bool) {
        self.unsettled.store(total, Ordering::Relaxed);
        // Under the queue's lock, so a producer checking the bound sees
        // either the taken updates still queued or already held.
        let queue = self.lock();
        self.hold_taken.store(hold_taken, Ordering::Relaxed);
        let before = self.held.swap(held, Ordering::Relaxed);
        drop(queue);
        if held < before {
            self.drained.notify_waiters();
        }
    }

    /// The journal and the entry id for the update labelled `label`
    /// ([`Outbox::admit`]); `None` when the outbox has no journal or the
    /// update is not durable.
    fn for_journal(&self, label: &Label) -> Option<(&Journal, u64)> {
        let journal = self.journal.as_ref()?;
        if !label.is_durable() {
            return None;
        }
        Some((journal, journal.next_id()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Depth and counters.
    pub fn stats(&self) -> OutboxStats {
        OutboxStats {
            depth: self.lock().len(),
            coalesced: self.coalesced.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            unsettled: self.unsettled.load(Ordering::Relaxed),
        }
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// How many updates it holds before making room.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests;
