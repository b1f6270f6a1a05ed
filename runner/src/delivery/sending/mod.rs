//! Delivery on the wire: which update goes out next (re-sends first), the
//! sequence number it carries, and what is kept until its delivery is
//! settled — across connections and across restarts of the runner.
//!
//! The outbox holds updates never sent; this holds the ones sent (or
//! recovered from the journal) whose delivery is not settled, in a
//! [`crate::delivery::in_flight::InFlight`], plus a re-send queue. Every session:
//!
//! 1. registration decides the mode ([`Sending::registered`]): with
//!    `acked-delivery/1` accepted, the registration's `acked_sequence`
//!    settles what the control plane already processed;
//! 2. the outbound half takes batches from [`Sending::next_batch`]: first
//!    everything waiting for a re-send, in order, then the outbox. In acked
//!    mode each update gets its sequence number (re-sends keep theirs) and
//!    a journaled update's number is recorded in the journal before it goes
//!    on the wire, so a re-send after a crash carries the same number and
//!    the control plane drops it as already processed;
//! 3. acknowledgements ([`Sending::ack`]) settle updates and forget their
//!    journal entries; in legacy mode terminal updates settle once they
//!    were sent longer ago than the re-send window;
//! 4. when the connection ends ([`Sending::connection_ended`]), everything
//!    unsettled goes to the front of the re-send queue (in legacy mode a
//!    clean close settles everything instead); in acked mode an update
//!    that was the first unacknowledged at [`set_aside::STRIKES`]
//!    connection ends in a row is set aside instead, an error update in
//!    its place ([`set_aside`]).
//!
//! Bounds. Acked mode: the unacknowledged updates count against the
//! outbox's capacity ([`Outbox::set_unsettled`]), so a control plane that
//! stops acknowledging fills it: intermediate updates not yet sent are
//! coalesced or dropped, producers of terminal updates wait, nothing kept is
//! dropped; a warning and `agent_runner_delivery_unacked_full_total` say
//! so. Legacy mode: what a dead connection can take unseen is what was
//! sent within the re-send window (2 × (keepalive interval + timeout), at
//! least 10 s: how long a dead connection can go unnoticed); of that, at
//! most `capacity` terminal updates are kept for a re-send (the oldest are
//! released early beyond that: `agent_runner_delivery_legacy_released_early_total`
//! and a warning), and they do not hold producers back. The transport
//! itself is not bounded further: HTTP/2 flow control bounds what the peer
//! lets the runner send, and the window the runner advertises bounds only
//! what it receives.
//!
//! Where the link cannot wait (the read loop), the journal is only asked,
//! never awaited: a forget that does not land costs a repeat after a crash,
//! never a loss.

//!
//! This file holds what is kept and how it is settled (registration,
//! acknowledgements, a connection's end); [`batch`] takes the next batch
//! for the wire and numbers it; [`set_aside`] gives up an update the
//! control plane keeps rejecting.

mod batch;
mod set_aside;

pub use batch::Batch;

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use agent_runner_proto::runner::{ClientMessage, client_message::Payload};
use prost::Message as _;

use crate::delivery::in_flight::{InFlight, Mode, Sent, Settled};
use crate::delivery::journal::{Journal, Recovered, Sequencer};
use crate::delivery::label::Label;
use crate::delivery::outbox::Outbox;
use crate::delivery::outgoing::decode;

pub use agent_runner_proto::ACKED_DELIVERY;

/// At most this many updates are taken per batch: one journal commit (the
/// sequence marks, or a flush) per batch before it goes on the wire, so the
/// batch must be large enough for that round trip not to throttle the link.
pub(crate) const BATCH: usize = 512;

/// Delivery state shared by the outbound half, the read loop and shutdown.
pub struct Sending {
    outbox: Arc<Outbox>,
    journal: Option<Journal>,
    legacy_settle: Duration,
    inner: Mutex<Inner>,
}

/// What [`Sending`] guards: the sent updates, the re-send queue, the
/// numbers, and the connection's epoch.
struct Inner {
    inflight: InFlight,
    /// Updates to send again, oldest first, before anything from the outbox.
    resend: VecDeque<Sent>,
    sequencer: Sequencer,
    /// The "not acknowledging" warning was given since acks last progressed.
    full_warned: bool,
    /// Acknowledgements ignored so far (logged at 1, 2, 4, 8…).
    bad_acks: u64,
    /// Legacy mode: sent terminal updates released from the re-send set
    /// early by its count bound (logged at 1, 2, 4, 8…).
    released_early: u64,
    /// Bumped when a connection ends: a batch taken for an earlier
    /// connection (its outbound half still polled by the transport after
    /// the session ended) takes nothing.
    epoch: u64,
    /// The update first unacknowledged at the last connection ends.
    strikes: set_aside::Strikes,
}

impl Sending {
    /// Delivery for `outbox`, starting with what the journal recovered
    /// (sent first, in order, before anything new). `legacy_settle`: how
    /// long a control plane without acknowledgements may take before a sent
    /// terminal update counts as delivered (cover keepalive's detection of
    /// a dead connection).
    pub fn new(
        outbox: Arc<Outbox>,
        journal: Option<Journal>,
        recovered: Recovered,
        legacy_settle: Duration,
    ) -> Self {
        let now = Instant::now();
        let mut resend = VecDeque::new();
        let mut unreadable = Vec::new();
        for entry in resend_order(recovered.entries) {
            match ClientMessage::decode(&entry.message[..]) {
                Ok(message) => resend.push_back(Sent {
                    sequence: entry.sequence,
                    journal: Some(entry.id),
                    label: Label::of(&message),
                    encoded: entry.message,
                    at: now,
                }),
                Err(e) => {
                    tracing::error!(entry = entry.id, error = %e, "unreadable journal entry dropped");
                    unreadable.push(entry.id);
                }
            }
        }
        if !resend.is_empty() {
            tracing::info!(
                updates = resend.len(),
                "updates journaled before the restart are sent first"
            );
        }
        let mut inflight = InFlight::new(Mode::Legacy {
            settle: legacy_settle,
        });
        inflight.note_sent_through(recovered.sequence_floor);
        let sending = Self {
            outbox,
            journal,
            legacy_settle,
            inner: Mutex::new(Inner {
                inflight,
                resend,
                sequencer: Sequencer::new(recovered.sequence_floor),
                full_warned: false,
                bad_acks: 0,
                released_early: 0,
                epoch: 0,
                strikes: set_aside::Strikes::default(),
            }),
        };
        sending.forget(unreadable);
        sending.publish(&sending.lock());
        sending
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `(thread_id, sdk_turn_id)` of every turn whose `TurnUpdate COMPLETED`
    /// waits for a re-send: start-up must not report those turns again.
    pub fn pending_turn_ends(&self) -> HashSet<(String, String)> {
        let inner = self.lock();
        inner
            .resend
            .iter()
            .filter(|s| s.label.is_turn_end())
            .filter_map(|s| match decode(&s.encoded).payload {
                Some(Payload::TurnUpdate(t)) => Some((t.thread_id, t.sdk_turn_id)),
                _ => None,
            })
            .collect()
    }

    /// A registration succeeded: `accepted` says whether the control plane
    /// accepted acked delivery, `acked_sequence` what it already processed.
    pub fn registered(&self, accepted: bool, acked_sequence: u64) -> Mode {
        let mut inner = self.lock();
        let mode = if accepted {
            Mode::Acked
        } else {
            Mode::Legacy {
                settle: self.legacy_settle,
            }
        };
        inner.inflight.set_mode(mode);
        if accepted {
            let highest = inner.inflight.highest_sequence();
            if acked_sequence > highest {
                self.bad_ack(
                    &mut inner,
                    &format!(
                        "registration acknowledged sequence {acked_sequence} but only {highest} was ever sent"
                    ),
                );
            } else {
                let mut settled = inner.inflight.rebase(acked_sequence);
                settle_resends(&mut inner.resend, acked_sequence, &mut settled);
                self.forget(settled.journal);
                if let Some(j) = &self.journal {
                    j.forget_through(acked_sequence);
                }
            }
            tracing::info!(
                acked_sequence,
                resending = inner.resend.len(),
                "acknowledged delivery accepted"
            );
        } else {
            if acked_sequence != 0 {
                self.bad_ack(
                    &mut inner,
                    "registration carries acked_sequence without accepting acked delivery",
                );
            }
            tracing::info!(
                resending = inner.resend.len(),
                "the control plane does not acknowledge: terminal updates are re-sent after a dropped connection"
            );
        }
        self.publish(&inner);
        mode
    }

    /// The connection ended; `clean` when shutdown closed it after the
    /// outbox drained.
    pub fn connection_ended(&self, clean: bool) {
        let mut inner = self.lock();
        inner.epoch += 1;
        let (mut again, settled) = inner.inflight.connection_ended(clean);
        self.forget(settled.journal);
        if !clean && inner.inflight.mode() == Mode::Acked {
            self.strike(&mut inner, &mut again);
        }
        // Sent before anything still waiting for a re-send: in front.
        for sent in again.into_iter().rev() {
            inner.resend.push_front(sent);
        }
        self.publish(&inner);
    }

    /// `ServerMessage.acked_sequence`: the control plane processed every
    /// update numbered up to `through`.
    pub fn ack(&self, through: u64) {
        let mut inner = self.lock();
        if inner.inflight.mode() != Mode::Acked {
            self.bad_ack(
                &mut inner,
                "acked_sequence from a control plane that did not accept acked delivery",
            );
            return;
        }
        match inner.inflight.ack(through) {
            Ok(mut settled) => {
                settle_resends(&mut inner.resend, through, &mut settled);
                if settled.updates > 0 {
                    inner.full_warned = false;
                    // One statement for all of them: every journaled update
                    // was marked with its number before it was sent (and
                    // the store thread writes in order).
                    if let Some(j) = &self.journal {
                        j.forget_through(through);
                    }
                }
            }
            Err(bad) => self.bad_ack(&mut inner, &bad.to_string()),
        }
        self.publish(&inner);
    }

    /// Legacy mode: settle what was sent longer ago than the window.
    pub fn settle_expired(&self) {
        let mut inner = self.lock();
        let settled = inner.inflight.settle(Instant::now());
        if settled.updates > 0 {
            self.forget(settled.journal);
            self.publish(&inner);
        }
    }

    /// Nothing waits to be sent (neither a re-send nor the outbox).
    pub fn idle(&self) -> bool {
        self.lock().resend.is_empty() && self.outbox.is_empty()
    }

    /// Shutdown may close: nothing waits to be sent and, in acked mode,
    /// everything sent was acknowledged (in legacy mode the clean close
    /// that follows settles what is kept).
    pub fn flushed(&self) -> bool {
        let inner = self.lock();
        inner.resend.is_empty()
            && self.outbox.is_empty()
            && (inner.inflight.mode() != Mode::Acked || inner.inflight.is_empty())
    }

    /// How many sent updates are unsettled (kept for a re-send).
    pub fn unsettled(&self) -> usize {
        let inner = self.lock();
        inner.inflight.len() + inner.resend.len()
    }

    /// The current connection's epoch: pass it to [`Sending::take_batch`].
    pub fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// The highest sequence number handed out so far (0: none).
    pub fn last_sequence(&self) -> u64 {
        self.lock().sequencer.last()
    }

    /// Acked mode: warns (once until acks progress) when the unacknowledged
    /// updates fill the outbox's capacity.
    fn check_full(&self, inner: &mut Inner) {
        if inner.inflight.mode() != Mode::Acked || inner.full_warned {
            return;
        }
        let unacked = inner.inflight.len() + inner.resend.len();
        if unacked >= self.outbox.capacity() {
            inner.full_warned = true;
            crate::observe::metrics::delivery_unacked_full();
            tracing::warn!(
                unacknowledged = unacked,
                capacity = self.outbox.capacity(),
                acked_sequence = inner.inflight.acked(),
                "the control plane is not acknowledging: the outbox is full of unacknowledged updates; intermediate updates are coalesced or dropped and terminal ones wait (none is dropped)"
            );
        }
    }

    /// Counts and logs (at 1, 2, 4, 8…) an acknowledgement that makes no sense.
    fn bad_ack(&self, inner: &mut Inner, what: &str) {
        crate::observe::metrics::delivery_ack_ignored();
        inner.bad_acks += 1;
        if inner.bad_acks.is_power_of_two() {
            tracing::warn!(
                total = inner.bad_acks,
                "ignoring an acknowledgement that makes no sense ({what}); nothing is dropped"
            );
        }
    }

    /// Asks the journal to forget settled entries, without waiting.
    fn forget(&self, ids: Vec<u64>) {
        if let Some(j) = &self.journal
            && !ids.is_empty()
            && !j.forget(ids)
        {
            tracing::debug!(
                "journal queue full; settled entries are forgotten later or re-sent after a crash"
            );
        }
    }

    /// Tells the outbox how many sent updates hold room (acked mode only:
    /// legacy retention does not hold producers back).
    fn publish(&self, inner: &Inner) {
        let held = match inner.inflight.mode() {
            Mode::Acked => inner.inflight.len() + inner.resend.len(),
            Mode::Legacy { .. } => 0,
        };
        self.outbox.set_unsettled(
            held,
            inner.inflight.len() + inner.resend.len(),
            inner.inflight.mode() == Mode::Acked,
        );
    }
}

/// The order recovered journal entries go out in: the ones already sent
/// (marked with a sequence number) first, by that number — the order the
/// control plane must see them in, or it drops a lower number arriving
/// after a higher one as already processed — then the never-sent ones, in
/// append order. Append order alone is not send order: a turn's
/// `TurnUpdate COMPLETED` is journaled before the store records the turn's
/// end and queued only after (`thread.rs` `end_turn`), so updates of other
/// threads appended meanwhile can be sent, and numbered, before it.
fn resend_order(
    mut entries: Vec<crate::delivery::journal::JournalEntry>,
) -> Vec<crate::delivery::journal::JournalEntry> {
    entries.sort_by_key(|e| (e.sequence.is_none(), e.sequence, e.id));
    entries
}

/// Drops from `resend` what an acknowledgement of `through` covers.
fn settle_resends(resend: &mut VecDeque<Sent>, through: u64, settled: &mut Settled) {
    resend.retain(|s| {
        let covered = s.sequence.is_some_and(|q| q <= through);
        if covered {
            settled.updates += 1;
            settled.journal.extend(s.journal);
        }
        !covered
    });
}

/// The metric label of `mode`.
fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Acked => "acked",
        Mode::Legacy { .. } => "legacy",
    }
}

#[cfg(test)]
mod tests {
    use crate::delivery::messages;
    use std::sync::Arc;
    use std::time::Duration;

    use agent_runner_proto::runner::TurnStatus;

    use super::*;
    use crate::delivery::journal::JournalEntry;
    use crate::delivery::outgoing::Outgoing;
    use crate::util::redact::Redactor;

    fn entry(id: u64, sequence: Option<u64>, turn: &str) -> JournalEntry {
        JournalEntry {
            id,
            sequence,
            message: messages::turn(None, "t", turn, TurnStatus::Completed)
                .encode_to_vec()
                .into(),
        }
    }

    /// A turn's COMPLETED journaled (entry 1) before another update that was
    /// sent first (entry 2, sequence 7), then a crash: after the restart the
    /// sent one goes first with its number, the never-sent one after it
    /// with a new, higher number. In append order the new number went first
    /// and the control plane dropped 7 as already processed.
    #[tokio::test]
    async fn recovered_entries_go_out_in_sequence_order_before_unsent_ones() {
        let recovered = Recovered {
            entries: vec![
                entry(1, None, "journaled-first-sent-never"),
                entry(2, Some(7), "sent-with-7"),
                entry(3, Some(6), "sent-with-6"),
            ],
            sequence_floor: 7,
        };
        let sending = Sending::new(
            Arc::new(Outbox::new(16, Redactor::new())),
            None,
            recovered,
            Duration::from_secs(10),
        );
        assert_eq!(sending.registered(true, 5), Mode::Acked);
        let sent = sending.next_batch(sending.epoch()).await;
        let got: Vec<(u64, String)> = sent
            .iter()
            .map(|m| match &m.decode().payload {
                Some(Payload::TurnUpdate(t)) => (m.sequence, t.sdk_turn_id.clone()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (6, "sent-with-6".to_owned()),
                (7, "sent-with-7".to_owned()),
                (8, "journaled-first-sent-never".to_owned()),
            ]
        );
    }

    fn turn_ids(sent: &[Outgoing]) -> Vec<(u64, String)> {
        sent.iter()
            .map(|m| match &m.decode().payload {
                Some(Payload::TurnUpdate(t)) => (m.sequence, t.sdk_turn_id.clone()),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// A taker of a connection that ended (the transport still polled its
    /// outbound half) must not take an update and put it back ahead of
    /// what that connection had sent: numbered first, it went out before
    /// them and the control plane dropped their lower numbers.
    #[tokio::test]
    async fn a_finished_connections_taker_takes_nothing_and_order_holds() {
        let outbox = Arc::new(Outbox::new(16, Redactor::new()));
        let sending = Arc::new(Sending::new(
            outbox.clone(),
            None,
            Recovered::default(),
            Duration::from_secs(10),
        ));
        let update =
            |turn: &str| messages::turn(Some("r".into()), "t", turn, TurnStatus::Completed);
        sending.registered(true, 0);
        let old = sending.epoch();
        outbox.push(update("a")).await;
        assert_eq!(
            turn_ids(&sending.next_batch(old).await),
            vec![(1, "a".to_owned())]
        );
        // The old connection's half waits for the next update...
        let taker = {
            let sending = sending.clone();
            tokio::spawn(async move { sending.next_batch(old).await })
        };
        // (A current-thread runtime: yielding lets it run until it waits.)
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        assert!(!taker.is_finished(), "it waits for an update");
        // ...the connection ends ("a" unacknowledged), "b" is produced.
        sending.connection_ended(false);
        outbox.push(update("b")).await;
        assert!(
            taker.await.unwrap().is_empty(),
            "nothing for an ended connection"
        );
        sending.registered(true, 0);
        let epoch = sending.epoch();
        // Re-sends make a batch of their own; what is new follows.
        let mut got = Vec::new();
        while got.len() < 2 {
            got.extend(turn_ids(&sending.next_batch(epoch).await));
        }
        assert_eq!(got, vec![(1, "a".to_owned()), (2, "b".to_owned())]);
    }
}
