//! The outbox: every update on its way to the control plane, in order.
//!
//! Producers (thread and agent tasks) push; the live ControlChannel's sender
//! pops. While disconnected, updates wait here and go out in order after the
//! reconnect. What was handed to a connection but is not yet known to have
//! arrived is kept by the link ([`crate::delivery::in_flight`], `link/sending.rs`), not
//! here.
//!
//! Durable updates (terminal and structural: see [`is_durable`]) are
//! journaled ([`crate::delivery::journal`]) before they are queued, so they survive a
//! crash; each carries its journal id out of the outbox so the link can
//! forget it once delivery is settled.
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
//! is taken out ([`Redactor::generation`]). Scanning it on the way out and
//! again for its transcript was 5 % of the throughput profile.
//!
//! Every update naming a thread (or pushed for one:
//! [`Outbox::push_for_thread`]) is then handed to the transcripts
//! ([`crate::delivery::transcript`]): the update itself, shared (an `Arc` from here
//! on), with a non-blocking push to the writer's bounded queue, which drops
//! (and counts) when full.
//!
//! Making room costs O(1) mostly and O(log n) at worst, never a scan of the
//! queue: a full outbox is exactly when the runner is behind, so that path
//! must stay cheap (a scan of 10,000 entries per update made a full outbox
//! ~6x slower to fill and drain; see bench/). Each queued update has a
//! sequence number, consecutive front to back, so a slot's place is its
//! number's offset from the front's (a binary search once a sweep, below,
//! has left gaps); the intermediate ones are indexed by age and by what
//! supersedes them. A dropped update leaves its slot empty rather than
//! shifting the ones behind it (a shift of thousands of slots per drop was
//! 4 % of the throughput profile); empty slots are skipped as the front is
//! taken, and swept out at once when they outnumber the queued updates, so
//! the slots stay within twice the bound.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use std::sync::atomic::AtomicUsize;

use agent_runner_proto::runner::{ClientMessage, ItemStatus, TurnStatus, client_message::Payload};
use bytes::Bytes;
use prost::Message as _;
use tokio::sync::Notify;

use crate::delivery::journal::Journal;
use crate::delivery::transcript::Transcripts;
use crate::util::redact::Redactor;

/// An update taken out of the outbox, with its journal entry if it has one.
#[derive(Debug, Clone, PartialEq)]
pub struct Taken {
    /// The update, by pointer: a `ClientMessage` is a few hundred bytes,
    /// and moving those was the largest item in the link's profile. Shared
    /// (`Arc`): kept for a re-send, it is also what the wire encodes
    /// (`link::wire`), and its transcript line may not be written yet.
    pub message: Arc<ClientMessage>,
    /// Its journal entry (durable updates of a journaled outbox).
    pub journal: Option<u64>,
    /// The update as the journal encoded it, which the wire writes rather
    /// than encoding it again (see [`Journaled`]).
    pub encoded: Option<Bytes>,
}

/// An update journaled (if durable) and not yet queued: see
/// [`Outbox::journal`].
#[derive(Debug)]
pub struct Journaled {
    /// By pointer from here on: a full outbox takes an update out of its
    /// slot and puts it back while it makes room, and moving the whole
    /// message each time was 6 % of the runner's CPU.
    message: Arc<ClientMessage>,
    journal: Option<u64>,
    /// `message` encoded, as the journal holds it (a durable update of a
    /// journaled outbox): shared with the journal, and written to the wire
    /// as it is (`link::wire`), so a durable update is encoded once, not
    /// once for the disk and again for the wire. `None` once the update is
    /// masked again ([`Outbox::remasked`]): the bytes would be stale.
    encoded: Option<Bytes>,
    /// The redactor's generation `message` was masked at.
    masked: u64,
}

/// A queued update.
struct Slot {
    /// Its place: increasing front to back.
    seq: u64,
    /// Its [`supersede_key`], hashed once as it is queued (`None`: not
    /// intermediate).
    key: Option<u64>,
    /// Its journal entry (durable updates of a journaled outbox).
    journal: Option<u64>,
    /// Its encoding, shared with the journal ([`Journaled::encoded`]).
    encoded: Option<Bytes>,
    /// The redactor's generation it was masked at.
    masked: u64,
    /// By pointer (moving ~300-byte messages around a full outbox was a
    /// third of the runner's CPU). `None`: dropped to make room, the slot
    /// left in place until the front reaches it or a sweep.
    msg: Option<Arc<ClientMessage>>,
}

/// The queued updates and the indexes of the intermediate ones.
struct Queue {
    /// The updates, sequence numbers increasing front to back, with the
    /// empty slots of dropped ones among them.
    items: VecDeque<Slot>,
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
    /// The newest queued intermediate update per [`supersede_key`]. A hash
    /// collision only costs a coalescing opportunity: a match is re-checked
    /// with [`supersedes`] before anything is replaced.
    newest: HashMap<u64, u64, Hashing>,
    /// Hashes [`supersede_key`]s (seeded per process).
    keys: Hashing,
    /// How many of the front entries were queued urgently
    /// ([`Queue::push_front`]): they are taken alone (see
    /// [`Outbox::try_pop_many`]). Urgent replies are never intermediate,
    /// so nothing removes them from the middle; were one removed, the count
    /// would only make one later batch smaller.
    urgent: usize,
}

/// The outbox's hashing: foldhash, seeded per process. SipHash (std's
/// default) was 3 % of the throughput profile for keys that are a short
/// string or a sequence number.
type Hashing = foldhash::fast::RandomState;

impl Queue {
    fn new(capacity: usize) -> Self {
        Self {
            items: VecDeque::with_capacity(capacity.min(1024)),
            empty: 0,
            // Room below for updates queued at the front.
            next: 1 << 62,
            intermediate: VecDeque::new(),
            newest: HashMap::default(),
            keys: Hashing::default(),
            urgent: 0,
        }
    }

    /// Queued updates (empty slots not counted).
    fn len(&self) -> usize {
        self.items.len() - self.empty
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn push_back_journaled(&mut self, entry: Journaled) {
        let seq = self.next;
        self.next += 1;
        let key = self.index(seq, &entry.message);
        self.items.push_back(Slot {
            seq,
            key,
            journal: entry.journal,
            encoded: entry.encoded,
            masked: entry.masked,
            msg: Some(entry.message),
        });
    }

    fn push_front(&mut self, msg: Arc<ClientMessage>, masked: u64) {
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
            encoded: None,
            masked,
            msg: Some(msg),
        });
        self.urgent += 1;
    }

    /// The front update, with the generation it was masked at.
    fn pop_front(&mut self) -> Option<(Taken, u64)> {
        loop {
            let slot = self.items.pop_front()?;
            let Some(message) = slot.msg else {
                self.empty -= 1;
                continue;
            };
            self.urgent = self.urgent.saturating_sub(1);
            self.unindex(slot.seq, slot.key);
            let taken = Taken {
                message,
                journal: slot.journal,
                encoded: slot.encoded,
            };
            return Some((taken, slot.masked));
        }
    }

    /// Indexes `msg`, queued at the back as `seq`, if it is intermediate;
    /// returns its key.
    fn index(&mut self, seq: u64, msg: &ClientMessage) -> Option<u64> {
        let key = supersede_key(&self.keys, msg)?;
        self.intermediate.push_back(seq);
        self.newest.insert(key, seq);
        Some(key)
    }

    /// Forgets the update queued as `seq` (with `key`) in the indexes.
    fn unindex(&mut self, seq: u64, key: Option<u64>) {
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
    fn position(&self, seq: u64) -> Option<usize> {
        let front = self.items.front()?.seq;
        let guess = usize::try_from(seq.checked_sub(front)?).ok()?;
        if self.items.get(guess).is_some_and(|slot| slot.seq == seq) {
            return Some(guess);
        }
        self.items.binary_search_by_key(&seq, |slot| slot.seq).ok()
    }

    /// Where the newest queued update that `msg` supersedes is, if any.
    fn superseded(&self, msg: &ClientMessage) -> Option<usize> {
        let key = supersede_key(&self.keys, msg)?;
        let pos = self.position(*self.newest.get(&key)?)?;
        let queued = self.items[pos].msg.as_deref()?;
        supersedes(msg, queued).then_some(pos)
    }

    /// Drop the oldest queued intermediate update; false if there is none.
    fn drop_oldest_intermediate(&mut self) -> bool {
        let Some(pos) = self
            .intermediate
            .front()
            .and_then(|seq| self.position(*seq))
        else {
            return false;
        };
        let Some(slot) = self.items.get_mut(pos) else {
            return false;
        };
        if slot.msg.take().is_none() {
            return false;
        }
        let (seq, key) = (slot.seq, slot.key);
        self.empty += 1;
        self.unindex(seq, key);
        if self.empty > self.len() {
            self.sweep();
        }
        true
    }

    /// Removes the empty slots: O(n), once they outnumber the queued updates
    /// (so at most once per n drops).
    fn sweep(&mut self) {
        self.items.retain(|slot| slot.msg.is_some());
        self.empty = 0;
    }
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
    hold_taken: std::sync::atomic::AtomicBool,
    /// Where durable updates are journaled (`None`: memory only).
    journal: Option<Journal>,
    /// Masks every update as it enters (see the module doc).
    redactor: Redactor,
    /// Per-thread transcripts (set once by the runner at start).
    transcripts: std::sync::OnceLock<Transcripts>,
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
            hold_taken: std::sync::atomic::AtomicBool::new(false),
            journal: None,
            redactor,
            transcripts: std::sync::OnceLock::new(),
        }
    }

    /// From now on, every update naming a thread is also recorded in that
    /// thread's transcript. Only the first call counts.
    pub fn set_transcripts(&self, transcripts: Transcripts) {
        let _ = self.transcripts.set(transcripts);
    }

    /// What every update goes through as it enters: `msg` masked, shared
    /// from here on, and handed to the transcript of the thread it names
    /// (else `thread`'s), if any (never blocks). Returns it with the
    /// redactor's generation it was masked at.
    fn admit(&self, mut msg: ClientMessage, thread: Option<&str>) -> (Arc<ClientMessage>, u64) {
        let masked = self.mask(&mut msg);
        let msg = Arc::new(msg);
        if let Some(t) = self.transcripts.get()
            && let Some(thread) = crate::delivery::transcript::thread_of(&msg).or(thread)
        {
            t.record(thread, &msg);
        }
        (msg, masked)
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
            // A copy only if its transcript line is still queued (which
            // keeps what it was masked with; the wire gets the new mask).
            crate::delivery::messages::redact(Arc::make_mut(&mut taken.message), &self.redactor);
            // The journal's encoding still holds the old mask.
            taken.encoded = None;
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

    /// Encodes `msg` (masked: [`Outbox::admit`]) for the journal; `None`
    /// when the outbox has no journal or `msg` is not durable.
    fn for_journal(&self, msg: &ClientMessage) -> Option<(&Journal, u64, Bytes)> {
        let journal = self.journal.as_ref()?;
        if !is_durable(msg) {
            return None;
        }
        Some((journal, journal.next_id(), msg.encode_to_vec().into()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue an update, making room or waiting as the module doc says. A
    /// durable update is journaled first: queued on the journal's writer
    /// thread, in order; a turn's end (`TurnUpdate COMPLETED`) waits until
    /// it is written, and with it everything the turn journaled before (the
    /// writer writes in order), so a turn recorded as finished has its
    /// updates journaled. The link never sends a journaled update before
    /// its write is done.
    pub async fn push(&self, msg: ClientMessage) {
        let journaled = self.journal_for(None, msg).await;
        self.queue(journaled).await;
    }

    /// [`Outbox::push`] of an update sent for `thread`: recorded in its
    /// transcript even if the update does not name it (a thread's request
    /// errors).
    pub async fn push_for_thread(&self, thread: &str, msg: ClientMessage) {
        let journaled = self.journal_for(Some(thread), msg).await;
        self.queue(journaled).await;
    }

    /// The first half of [`Outbox::push`]: journals `msg` if it is durable
    /// (a turn's end: written when this returns). Nothing can send (and so
    /// settle and forget) it before [`Outbox::queue`]: whatever must be
    /// recorded before its journal entry may be forgotten goes in between.
    pub async fn journal(&self, msg: ClientMessage) -> Journaled {
        self.journal_for(None, msg).await
    }

    /// [`Outbox::journal`], the transcript falling back to `thread`'s
    /// ([`Outbox::admit`]).
    async fn journal_for(&self, thread: Option<&str>, msg: ClientMessage) -> Journaled {
        let (msg, masked) = self.admit(msg, thread);
        let mut journal_id = None;
        let mut encoded = None;
        if let Some((journal, id, bytes)) = self.for_journal(&msg) {
            let started = std::time::Instant::now();
            encoded = Some(bytes.clone());
            let written = if is_turn_end(&msg) {
                journal.append(id, bytes).await
            } else {
                journal.append_queued(id, bytes).await
            };
            match written {
                Ok(()) => journal_id = Some(id),
                Err(e) => tracing::error!(
                    kind = crate::observe::message_kind::kind(&msg),
                    error = %e,
                    "journaling an update failed; it is kept in memory only"
                ),
            }
            crate::observe::metrics::journal_append(started.elapsed());
        }
        Journaled {
            message: msg,
            journal: journal_id,
            encoded,
            masked,
        }
    }

    /// The second half of [`Outbox::push`]: queues what
    /// [`Outbox::journal`] returned.
    pub async fn queue(&self, journaled: Journaled) {
        let mut slot = Some(journaled);
        // Most of the time there is room (or room is made): no waiter set
        // up for that. Else one is, before trying again, so that room made
        // in between is not missed.
        if self.try_push_entry(&mut slot) {
            return;
        }
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.try_push_entry(&mut slot) {
                return;
            }
            drained.await;
        }
    }

    /// [`Outbox::push`] for updates that were ready together (a thread's
    /// burst of at most [`crate::delivery::journal::BURST`]), in order: all recorded
    /// in their transcript in one push, the durable ones journaled in one
    /// journal job, and as many as fit queued under one lock with one wake
    /// of the link; the rest go one by one, making room or waiting as
    /// [`Outbox::push`] does. A turn's end must be written before it is
    /// queued: a burst holding one is pushed one by one. Into a full
    /// outbox, the burst's own outdated intermediate updates are given up
    /// first ([`Outbox::shed_outdated`]).
    pub async fn push_burst(&self, mut msgs: Vec<ClientMessage>) {
        if msgs.iter().any(is_turn_end) {
            for msg in msgs {
                self.push(msg).await;
            }
            return;
        }
        if !self.has_room(&self.lock()) {
            self.shed_outdated(&mut msgs);
        }
        // The generation before the first mask stands for the whole burst.
        let masked = self.redactor.generation();
        let msgs: Vec<Arc<ClientMessage>> = msgs
            .into_iter()
            .map(|mut msg| {
                self.mask(&mut msg);
                Arc::new(msg)
            })
            .collect();
        if let Some(t) = self.transcripts.get() {
            t.record_all(&msgs);
        }
        let mut entries = Vec::with_capacity(msgs.len());
        let mut appends = Vec::new();
        for message in msgs {
            let (journal, encoded) = match self.for_journal(&message) {
                Some((_, id, bytes)) => {
                    appends.push((id, bytes.clone()));
                    (Some(id), Some(bytes))
                }
                None => (None, None),
            };
            entries.push(Journaled {
                message,
                journal,
                encoded,
                masked,
            });
        }
        if !appends.is_empty()
            && let Some(journal) = &self.journal
        {
            let started = std::time::Instant::now();
            if let Err(e) = journal.append_queued_many(appends).await {
                tracing::error!(
                    updates = entries.len(),
                    error = %e,
                    "journaling updates failed; they are kept in memory only"
                );
                entries.iter_mut().for_each(|e| e.journal = None);
            }
            crate::observe::metrics::journal_append(started.elapsed());
        }
        let mut rest = entries.into_iter();
        let mut queued = false;
        {
            let mut queue = self.lock();
            while self.has_room(&queue) {
                let Some(entry) = rest.next() else { break };
                queue.push_back_journaled(entry);
                queued = true;
            }
        }
        if queued {
            self.filled.notify_one();
        }
        for journaled in rest {
            self.queue(journaled).await;
        }
    }

    /// A full outbox gives up an intermediate update for every update
    /// queued; a burst's own outdated ones go first, before they cost a
    /// mask, a transcript line and a slot: a RUNNING snapshot followed in
    /// the same burst by a later update of its item (the next snapshot, or
    /// the item's COMPLETED), a token-usage update followed by its
    /// thread's next. They carry nothing the later one does not, and they
    /// are never sent, so their transcript lines are not written either.
    /// Counted as coalesced. In the throughput bench, where turns produce
    /// faster than the link sends, about 45 % of what they produce is never
    /// sent; this sheds it before it costs the most.
    fn shed_outdated(&self, msgs: &mut Vec<ClientMessage>) {
        let outdated: Vec<bool> = msgs
            .iter()
            .enumerate()
            .map(|(i, old)| {
                is_intermediate(old) && msgs[i + 1..].iter().any(|new| outdates(new, old))
            })
            .collect();
        let mut flags = outdated.iter();
        msgs.retain(|_| flags.next() != Some(&true));
        for _ in outdated.iter().filter(|&&o| o) {
            self.count(&self.coalesced, "coalesced");
            crate::observe::metrics::outbox_coalesced();
        }
    }

    /// Queue at once, even past the bound (replies from the read loop). A
    /// durable one is journaled without waiting for the disk (queued on
    /// the journal's thread ahead of anything that could send it).
    pub fn push_reply(&self, msg: ClientMessage) {
        let (msg, masked) = self.admit(msg, None);
        let mut journal_id = None;
        let mut encoded = None;
        if let Some((journal, id, bytes)) = self.for_journal(&msg) {
            encoded = Some(bytes.clone());
            if journal.append_detached(id, bytes) {
                journal_id = Some(id);
            } else {
                tracing::warn!(
                    kind = crate::observe::message_kind::kind(&msg),
                    "the journal's queue is full; a reply is kept in memory only"
                );
            }
        }
        self.lock().push_back_journaled(Journaled {
            message: msg,
            journal: journal_id,
            encoded,
            masked,
        });
        self.filled.notify_one();
    }

    /// Queue ahead of everything else (heartbeat answers).
    pub fn push_urgent(&self, msg: ClientMessage) {
        let (msg, masked) = self.admit(msg, None);
        self.lock().push_front(msg, masked);
        self.filled.notify_one();
    }

    /// Queue the message in `slot` (taking it) or make room for it; leaves
    /// it there and returns false when the producer must wait.
    #[cfg(test)]
    fn try_push(&self, slot: &mut Option<ClientMessage>) -> bool {
        let mut entry = slot.take().map(|message| {
            let (message, masked) = self.admit(message, None);
            Journaled {
                masked,
                message,
                journal: None,
                encoded: None,
            }
        });
        let pushed = self.try_push_entry(&mut entry);
        *slot = entry.map(|j| Arc::unwrap_or_clone(j.message));
        pushed
    }

    /// [`Outbox::try_push`] of an update with its journal entry.
    fn try_push_entry(&self, slot: &mut Option<Journaled>) -> bool {
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
        if let Some(pos) = queue.superseded(&entry.message) {
            // Same key, same sequence number: the indexes stay as they are.
            // An intermediate update has no journal entry.
            let slot = &mut queue.items[pos];
            slot.msg = Some(entry.message);
            slot.encoded = entry.encoded;
            slot.masked = entry.masked;
            drop(queue);
            self.count(&self.coalesced, "coalesced");
            crate::observe::metrics::outbox_coalesced();
            return true;
        }
        if queue.drop_oldest_intermediate() {
            queue.push_back_journaled(entry);
            drop(queue);
            self.count(&self.dropped, "dropped");
            crate::observe::metrics::outbox_dropped();
            self.filled.notify_one();
            return true;
        }
        if is_intermediate(&entry.message) {
            drop(queue);
            self.count(&self.dropped, "dropped");
            crate::observe::metrics::outbox_dropped();
            return true;
        }
        *slot = Some(entry);
        false
    }

    /// Whether one more update fits under the bound (queued plus held).
    fn has_room(&self, queue: &Queue) -> bool {
        queue.len() + self.held.load(Ordering::Relaxed) < self.capacity
    }

    fn count(&self, counter: &AtomicU64, what: &str) {
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

    /// Take the oldest update, waiting for one. Cancel-safe: an update is
    /// removed only when this returns it.
    pub async fn pop(&self) -> ClientMessage {
        Arc::unwrap_or_clone(self.pop_entry().await.message)
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

/// An update the control plane can do without: a RUNNING item snapshot (a
/// later snapshot or the COMPLETED update carries the same text) or a token
/// usage report (a later one carries the totals).
fn is_intermediate(msg: &ClientMessage) -> bool {
    match &msg.payload {
        Some(Payload::ItemUpdate(i)) => i.status == ItemStatus::Running as i32,
        Some(Payload::ThreadTokenUsageUpdate(_)) => true,
        _ => false,
    }
}

/// A `TurnUpdate COMPLETED`.
fn is_turn_end(msg: &ClientMessage) -> bool {
    matches!(&msg.payload, Some(Payload::TurnUpdate(t)) if t.status == TurnStatus::Completed as i32)
}

/// An update that must survive a crash and a dead connection: terminal
/// (`TurnUpdate COMPLETED`, a COMPLETED item, a `RequestError`) or
/// structural (thread, agent, skill, SDK and thread-name updates). The rest
/// (RUNNING snapshots, token usage, heartbeat answers, device codes) is
/// superseded by later updates or only meaningful now.
pub fn is_durable(msg: &ClientMessage) -> bool {
    match &msg.payload {
        Some(Payload::TurnUpdate(t)) => t.status == TurnStatus::Completed as i32,
        Some(Payload::ItemUpdate(i)) => i.status == ItemStatus::Completed as i32,
        Some(Payload::ThreadUpdate(_)) => true,
        Some(
            Payload::RequestError(_)
            | Payload::AgentUpdate(_)
            | Payload::SkillMpUpdate(_)
            | Payload::AgentSdkUpdate(_)
            | Payload::ThreadNameUpdate(_),
        ) => true,
        _ => false,
    }
}

/// For an intermediate update, a hash of what makes it redundant (its
/// item, or its thread's token usage); `None` for every other update.
fn supersede_key(keys: &Hashing, msg: &ClientMessage) -> Option<u64> {
    match &msg.payload {
        Some(Payload::ItemUpdate(i)) if i.status == ItemStatus::Running as i32 => {
            Some(keys.hash_one((0u8, &i.sdk_item_id)))
        }
        Some(Payload::ThreadTokenUsageUpdate(u)) => Some(keys.hash_one((1u8, &u.thread_id))),
        _ => None,
    }
}

/// Whether `new` makes the queued `old` redundant.
fn supersedes(new: &ClientMessage, old: &ClientMessage) -> bool {
    match (&new.payload, &old.payload) {
        (Some(Payload::ItemUpdate(n)), Some(Payload::ItemUpdate(o))) => {
            n.status == ItemStatus::Running as i32
                && o.status == ItemStatus::Running as i32
                && n.sdk_item_id == o.sdk_item_id
        }
        (Some(Payload::ThreadTokenUsageUpdate(n)), Some(Payload::ThreadTokenUsageUpdate(o))) => {
            n.thread_id == o.thread_id
        }
        _ => false,
    }
}

/// Whether `new`, a later update of the same thread, makes the
/// intermediate `old` redundant: [`supersedes`], or `old`'s item finished.
fn outdates(new: &ClientMessage, old: &ClientMessage) -> bool {
    let finishes = matches!(
        (&new.payload, &old.payload),
        (Some(Payload::ItemUpdate(n)), Some(Payload::ItemUpdate(o)))
            if n.status == ItemStatus::Completed as i32
                && o.status == ItemStatus::Running as i32
                && n.sdk_item_id == o.sdk_item_id
                && n.thread_id == o.thread_id
    );
    finishes || supersedes(new, old)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::messages;
    use agent_runner_proto::runner::{ThreadStatus, TurnStatus};
    use sdk_adapter::{ItemEvent, ItemKind};
    use std::sync::Arc;
    use std::time::Duration;

    fn item_update(item: &str, text: &str, status: sdk_adapter::ItemStatus) -> ClientMessage {
        messages::item(
            None,
            "t",
            "u",
            ItemEvent {
                item_id: item.into(),
                kind: ItemKind::AgentMessage,
                status,
                text: Some(text.into()),
                command: None,
            },
        )
    }

    fn running(item: &str, text: &str) -> ClientMessage {
        item_update(item, text, sdk_adapter::ItemStatus::Running)
    }

    fn item_done(item: &str, text: &str) -> ClientMessage {
        item_update(item, text, sdk_adapter::ItemStatus::Completed)
    }

    fn completed(turn: &str) -> ClientMessage {
        messages::turn(None, "t", turn, TurnStatus::Completed)
    }

    async fn drain(o: &Outbox) -> Vec<ClientMessage> {
        let mut out = vec![];
        while !o.is_empty() {
            out.push(o.pop().await);
        }
        out
    }

    #[tokio::test]
    async fn order_kept_below_capacity() {
        let o = Outbox::new(16, Redactor::new());
        for i in 0..10 {
            o.push(completed(&i.to_string())).await;
        }
        let got = drain(&o).await;
        assert_eq!(
            got,
            (0..10)
                .map(|i| completed(&i.to_string()))
                .collect::<Vec<_>>()
        );
    }

    #[tokio::test]
    async fn full_outbox_coalesces_then_drops_intermediate_never_terminal() {
        // Process-wide counters: other tests may add to them, never take away.
        let (dropped_before, coalesced_before) = crate::observe::metrics::outbox_totals();
        let o = Outbox::new(16, Redactor::new());
        o.push(running("i1", "a")).await;
        for i in 0..15 {
            o.push(completed(&i.to_string())).await;
        }
        // Same item: coalesced in place.
        o.push(running("i1", "ab")).await;
        assert_eq!(o.stats().coalesced, 1);
        // Another item: the oldest intermediate goes.
        o.push(running("i2", "x")).await;
        assert_eq!(o.stats().dropped, 1);
        // Terminal update with room only from intermediates: i2's snapshot goes.
        o.push(completed("last")).await;
        let got = drain(&o).await;
        assert_eq!(got.len(), 16);
        assert!(got.iter().all(|m| !is_intermediate(m)));
        assert_eq!(got.last(), Some(&completed("last")));
        assert_eq!(o.stats().dropped, 2);
        let (dropped, coalesced) = crate::observe::metrics::outbox_totals();
        assert!(dropped >= dropped_before + 2, "the metric counts drops");
        assert!(coalesced > coalesced_before, "the metric counts coalescing");
    }

    #[tokio::test]
    async fn terminal_updates_wait_for_room_instead_of_dropping() {
        let o = Arc::new(Outbox::new(16, Redactor::new()));
        for i in 0..16 {
            o.push(completed(&i.to_string())).await;
        }
        let o2 = o.clone();
        let pusher = tokio::spawn(async move { o2.push(completed("16")).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !pusher.is_finished(),
            "a terminal update must wait, not drop"
        );
        assert_eq!(o.pop().await, completed("0"));
        pusher.await.unwrap();
        let got = drain(&o).await;
        assert_eq!(got.len(), 16);
        assert_eq!(got.last(), Some(&completed("16")));
        assert_eq!(o.stats().dropped, 0);
    }

    /// The indexed queue against the plain scan it replaced, on random
    /// sequences of pushes (running/completed items, usage, terminal
    /// updates, urgent replies), pops and batches through a small bound.
    #[tokio::test]
    async fn indexed_queue_matches_a_plain_scan() {
        fn reference_push(q: &mut VecDeque<ClientMessage>, cap: usize, msg: ClientMessage) -> bool {
            if q.len() < cap {
                q.push_back(msg);
                return true;
            }
            if let Some(slot) = q.iter_mut().rev().find(|o| supersedes(&msg, o)) {
                *slot = msg;
                return true;
            }
            if let Some(pos) = q.iter().position(is_intermediate) {
                q.remove(pos);
                q.push_back(msg);
                return true;
            }
            is_intermediate(&msg)
        }
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut rand = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for round in 0..200 {
            let cap = 1 + rand(12) as usize;
            let o = Outbox::new(cap, Redactor::new());
            let mut reference = VecDeque::new();
            for step in 0..300 {
                let item = format!("i{}", rand(6));
                let msg = match rand(7) {
                    0 | 1 => running(&item, &format!("{round}-{step}")),
                    2 => item_done(&item, &step.to_string()),
                    3 => messages::token_usage(
                        None,
                        &format!("t{}", rand(2)),
                        "u",
                        sdk_adapter::TokenUsage::default(),
                    ),
                    4 => completed(&step.to_string()),
                    5 => {
                        let hb = messages::heartbeat(Some(step.to_string()));
                        o.push_urgent(hb.clone());
                        reference.push_front(hb);
                        continue;
                    }
                    _ if rand(2) == 0 => {
                        let got = if o.is_empty() {
                            None
                        } else {
                            Some(o.pop().await)
                        };
                        assert_eq!(got, reference.pop_front(), "round {round} step {step}");
                        continue;
                    }
                    _ => {
                        // A batch: the urgent replies at the front alone
                        // (here every heartbeat is one), else up to `max`.
                        let max = 1 + rand(8) as usize;
                        let urgent = reference
                            .iter()
                            .take_while(|m| {
                                matches!(m.payload, Some(Payload::HeartbeatResponse(_)))
                            })
                            .count();
                        let n = match urgent {
                            0 => max.min(reference.len()),
                            urgent => max.min(urgent),
                        };
                        let got: Vec<ClientMessage> = o
                            .try_pop_many(max)
                            .into_iter()
                            .map(|t| Arc::unwrap_or_clone(t.message))
                            .collect();
                        let want: Vec<ClientMessage> = reference.drain(..n).collect();
                        assert_eq!(got, want, "round {round} step {step}");
                        continue;
                    }
                };
                let mut slot = Some(msg.clone());
                let pushed = o.try_push(&mut slot);
                assert_eq!(pushed, reference_push(&mut reference, cap, msg));
                assert_eq!(o.stats().depth, reference.len());
            }
            let rest = drain(&o).await;
            assert_eq!(rest, Vec::from(reference), "round {round}");
        }
    }

    #[tokio::test]
    async fn dropped_updates_leave_slots_that_stay_within_twice_the_bound() {
        // Disconnected: nothing is taken, every new snapshot drops the
        // oldest queued one. The empty slots are swept, not kept forever.
        let cap = 8;
        let o = Outbox::new(cap, Redactor::new());
        for i in 0..1_000 {
            let mut slot = Some(running(&format!("i{i}"), "x"));
            assert!(o.try_push(&mut slot));
            let queue = o.lock();
            assert!(queue.len() <= cap);
            assert!(
                queue.items.len() <= 2 * cap + 1,
                "{} slots",
                queue.items.len()
            );
        }
        let left: Vec<ClientMessage> = drain(&o).await;
        let want: Vec<ClientMessage> = (1_000 - cap..1_000)
            .map(|i| running(&format!("i{i}"), "x"))
            .collect();
        assert_eq!(left, want);
        assert_eq!(o.stats().depth, 0);
    }

    #[tokio::test]
    async fn urgent_goes_first_and_replies_never_wait() {
        let o = Outbox::new(16, Redactor::new());
        for i in 0..16 {
            o.push(completed(&i.to_string())).await;
        }
        o.push_reply(messages::thread(None, "t", ThreadStatus::Ready));
        o.push_urgent(messages::heartbeat(Some("hb".into())));
        assert_eq!(o.pop().await, messages::heartbeat(Some("hb".into())));
        assert_eq!(o.stats().depth, 17);
    }

    #[tokio::test]
    async fn urgent_replies_are_taken_alone() {
        let o = Outbox::new(16, Redactor::new());
        for i in 0..4 {
            o.push(completed(&i.to_string())).await;
        }
        o.push_urgent(messages::heartbeat(Some("a".into())));
        o.push_urgent(messages::heartbeat(Some("b".into())));
        let ids = |taken: Vec<Taken>| -> Vec<String> {
            taken
                .into_iter()
                .map(|t| t.message.request_id.clone().unwrap_or_default())
                .collect()
        };
        assert_eq!(ids(o.try_pop_many(8)), ["b", "a"]);
        assert_eq!(o.try_pop_many(8).len(), 4);
    }

    fn text_of(msg: &ClientMessage) -> String {
        format!("{msg:?}")
    }

    /// An update is masked once, as it enters: what the journal, the
    /// transcript and the link get is the masked update, whichever way it
    /// came in (one push, a burst, a read-loop reply, a thread's request
    /// error recorded for that thread).
    #[tokio::test]
    async fn every_update_is_masked_as_it_enters_for_journal_transcript_and_wire() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, _) = Journal::open(&dir.path().join("journal")).unwrap();
        let redactor = Redactor::new();
        let secret = "ghs_masked_on_entry_1234";
        redactor.add(secret);
        let o = Outbox::journaled(64, journal, redactor);
        let transcripts = dir.path().join("transcripts");
        o.set_transcripts(Transcripts::start(transcripts.clone()).unwrap());
        let says = |n: u32| format!("line {n} quotes {secret}");
        o.push(item_done("a", &says(0))).await;
        o.push_burst(vec![running("b", &says(1)), item_done("b", &says(2))])
            .await;
        o.push_reply(messages::thread_name(None, "t", Some(says(3))));
        o.push_for_thread("t", messages::request_error(Some("r".into()), says(4)))
            .await;
        let taken = o.try_pop_many(16);
        assert_eq!(taken.len(), 5);
        for t in &taken {
            let text = text_of(&t.message);
            assert!(
                !text.contains(secret) && text.contains("quotes ***"),
                "{text}"
            );
        }
        let journaled = taken.iter().filter(|t| t.journal.is_some()).count();
        assert_eq!(journaled, 4, "all but the RUNNING snapshot");
        // A journaled update carries the journal's encoding of itself,
        // which the wire writes as it is.
        for t in &taken {
            match &t.encoded {
                Some(bytes) => assert_eq!(bytes[..], t.message.encode_to_vec()[..]),
                None => assert!(t.journal.is_none(), "{:?}", t.message),
            }
        }
        if let Some(journal) = &o.journal {
            journal.flush().await.unwrap();
        }
        drop(o);
        let (_, recovered) = Journal::open(&dir.path().join("journal")).unwrap();
        assert_eq!(recovered.entries.len(), 4);
        for e in &recovered.entries {
            let msg = ClientMessage::decode(&e.message[..]).unwrap();
            assert!(text_of(&msg).contains("quotes ***"), "{msg:?}");
        }
        let file = crate::delivery::transcript::path(&transcripts, "t").unwrap();
        let mut lines = String::new();
        for _ in 0..200 {
            lines = std::fs::read_to_string(&file).unwrap_or_default();
            if lines.lines().count() == 5 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(lines.lines().count(), 5, "{lines}");
        assert!(!lines.contains(secret), "{lines}");
        assert!(lines.contains("request_error"), "{lines}");
    }

    /// An update that waited while a secret was added is masked again as
    /// it is taken, whichever way it is taken, and its journal encoding
    /// (which still holds the secret) is not what the wire gets.
    #[tokio::test]
    async fn a_secret_added_while_an_update_waits_is_masked_as_it_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, _) = Journal::open(dir.path()).unwrap();
        let redactor = Redactor::new();
        let o = Outbox::journaled(16, journal, redactor.clone());
        let late = "ghs_added_while_queued_5678";
        o.push(running("a", &format!("saw {late}"))).await;
        o.push(item_done("a", &format!("saw {late} again"))).await;
        redactor.add(late);
        o.push(item_done("b", &format!("saw {late} after"))).await;
        let first = o.pop().await;
        let rest = o.try_pop_many(8);
        assert_eq!(rest.len(), 2);
        for text in [&first, &rest[0].message, &rest[1].message].map(text_of) {
            assert!(!text.contains(late) && text.contains("saw ***"), "{text}");
        }
        assert!(rest[0].journal.is_some());
        assert_eq!(rest[0].encoded, None, "masked again: encoded for the wire");
        let after = rest[1].encoded.as_ref().expect("masked as it entered");
        assert_eq!(after[..], rest[1].message.encode_to_vec()[..]);
    }

    #[tokio::test]
    async fn a_burst_is_queued_in_order_its_completed_items_journaled() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, _) = Journal::open(dir.path()).unwrap();
        let o = Outbox::journaled(64, journal, Redactor::new());
        o.push(running("a", "0")).await;
        let burst = vec![
            running("a", "1"),
            item_done("a", "2"),
            running("b", "3"),
            item_done("b", "4"),
        ];
        o.push_burst(burst.clone()).await;
        let taken = o.try_pop_many(16);
        let got: Vec<ClientMessage> = taken.iter().map(|t| (*t.message).clone()).collect();
        let mut want = vec![running("a", "0")];
        want.extend(burst);
        assert_eq!(got, want, "in order, nothing coalesced below the bound");
        let journaled: Vec<bool> = taken.iter().map(|t| t.journal.is_some()).collect();
        assert_eq!(journaled, [false, false, true, false, true]);
        // Both completed items are in the journal, in order, once.
        let want_ids: Vec<u64> = taken.iter().filter_map(|t| t.journal).collect();
        if let Some(journal) = &o.journal {
            journal.flush().await.unwrap();
        }
        drop(o);
        let (_, recovered) = Journal::open(dir.path()).unwrap();
        let ids: Vec<u64> = recovered.entries.iter().map(|e| e.id).collect();
        assert_eq!(ids, want_ids);
    }

    #[tokio::test]
    async fn a_burst_past_the_bound_makes_room_as_single_pushes_do() {
        let o = Outbox::new(3, Redactor::new());
        o.push(running("a", "0")).await;
        o.push(completed("1")).await;
        // Room for one: "b" queued under the lock; then "a" supersedes the
        // queued RUNNING "a", and "c" replaces the oldest RUNNING update.
        o.push_burst(vec![
            running("b", "2"),
            running("a", "3"),
            running("c", "4"),
        ])
        .await;
        let got = drain(&o).await;
        assert_eq!(got, [completed("1"), running("b", "2"), running("c", "4")]);
        assert_eq!(o.coalesced.load(Ordering::Relaxed), 1);
        assert_eq!(o.dropped.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_burst_into_a_full_outbox_sheds_its_own_outdated_snapshots_first() {
        let dir = tempfile::tempdir().unwrap();
        let o = Outbox::new(4, Redactor::new());
        o.set_transcripts(Transcripts::start(dir.path().to_path_buf()).unwrap());
        o.push(completed("0")).await;
        for x in ["x1", "x2", "x3"] {
            o.push(running(x, "queued")).await;
        }
        // Full. "a" 1 and 2 are outdated by "a"'s COMPLETED, "b" by its
        // own; "c" by nothing. Each of the three left makes room by
        // dropping the oldest queued snapshot.
        o.push_burst(vec![
            running("a", "shed 1"),
            running("a", "shed 2"),
            item_done("a", "3"),
            running("b", "shed 4"),
            item_done("b", "5"),
            running("c", "6"),
        ])
        .await;
        let got = drain(&o).await;
        assert_eq!(
            got,
            [
                completed("0"),
                item_done("a", "3"),
                item_done("b", "5"),
                running("c", "6")
            ]
        );
        assert_eq!(
            o.coalesced.load(Ordering::Relaxed),
            3,
            "shed from the burst"
        );
        assert_eq!(o.dropped.load(Ordering::Relaxed), 3, "x1, x2, x3");
        // Never sent, so never recorded: 4 lines before the burst, 3 of it.
        let file = crate::delivery::transcript::path(dir.path(), "t").unwrap();
        let read = || std::fs::read_to_string(&file).unwrap_or_default();
        for _ in 0..200 {
            if read().lines().count() >= 7 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Time for a line too many to show.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let lines = read();
        assert_eq!(lines.lines().count(), 7, "{lines}");
        assert!(!lines.contains("shed"), "{lines}");
    }

    #[tokio::test]
    async fn a_burst_holding_a_turn_end_is_pushed_one_by_one() {
        let o = Outbox::new(8, Redactor::new());
        let burst = vec![running("a", "1"), completed("u"), running("b", "2")];
        o.push_burst(burst.clone()).await;
        assert_eq!(drain(&o).await, burst);
    }
}
