//! Taking the next batch for the wire: re-sends first, then the outbox;
//! each update numbered (acked mode) and recorded as sent in one critical
//! section, and the batch's journal commit started.

use std::time::{Duration, Instant};

use super::{BATCH, Inner, Sending, mode_name};
use crate::delivery::in_flight::{Mode, Sent};
use crate::delivery::outgoing::Outgoing;

impl Sending {
    /// The next updates to send, waiting for at least one: re-sends first,
    /// then the outbox (see [`Sending::take_batch`]); returns once the
    /// batch's journal commit is done.
    pub async fn next_batch(&self, epoch: u64) -> Vec<Outgoing> {
        let batch = self.take_batch(epoch).await;
        batch.committed().await
    }

    /// The next updates to send, waiting for at least one: re-sends first,
    /// then the outbox (each masked and encoded by the outbox already).
    /// Each is numbered in acked mode and recorded as sent before this
    /// returns, so a
    /// session that ends before it goes out still sends it again.
    /// Cancel-safe: nothing is taken before the last await. The batch may
    /// go on the wire once [`Batch::committed`] says its journal write
    /// (sequence marks, or the appends it depends on) is on disk; the
    /// writes of later batches queue behind it, so a link may prepare the
    /// next batches meanwhile.
    ///
    /// `epoch` is the connection's ([`Sending::epoch`] when its outbound
    /// half was made): once that connection has ended, this takes nothing
    /// and returns an empty batch (whatever it had taken goes back, first).
    pub async fn take_batch(&self, epoch: u64) -> Batch {
        loop {
            if self.lock().epoch != epoch {
                return Batch::default();
            }
            self.reserve_numbers().await;
            if self.lock().resend.is_empty() {
                // Takes nothing: what is taken is taken below, under the
                // same lock as the epoch check and the recording.
                self.outbox.wait_nonempty().await;
            }
            let (out, marks, forget, journaled) = {
                let mut inner = self.lock();
                if inner.epoch != epoch {
                    // The connection ended while this waited; nothing taken.
                    return Batch::default();
                }
                // Re-sends and fresh updates are taken, numbered and
                // recorded in one critical section. Taken in one and
                // recorded in another, a connection's end in between put
                // them back ahead of what that connection had sent before
                // them; numbered after it, they went out first and the
                // control plane dropped the earlier numbers as already
                // processed: updates were lost across a drop.
                let settled = inner.inflight.settle(Instant::now());
                self.forget(settled.journal);
                let n = inner.resend.len().min(BATCH);
                let resends: Vec<Sent> = inner.resend.drain(..n).collect();
                let fresh = if resends.is_empty() {
                    self.outbox.try_pop_many(BATCH)
                } else {
                    Vec::new()
                };
                if resends.is_empty() && fresh.is_empty() {
                    // Another consumer took it first.
                    continue;
                }
                let mut taking = Taking {
                    mode: inner.inflight.mode(),
                    now: Instant::now(),
                    out: Vec::with_capacity(resends.len() + fresh.len()),
                    marks: Vec::new(),
                    forget: Vec::new(),
                    unnumbered: Vec::new(),
                };
                let resent = resends.len();
                let journaled = resends.iter().any(|s| s.journal.is_some())
                    || fresh.iter().any(|t| t.journal.is_some());
                for sent in resends {
                    self.take(&mut inner, &mut taking, sent);
                }
                for taken in fresh {
                    // Masked and encoded by the outbox (as it entered, and
                    // again as it was taken if a secret came in meanwhile);
                    // valid as its builder made it (`delivery::messages`
                    // and its tests; the tests' control planes check every
                    // update they receive), not checked again here.
                    debug_assert!(
                        agent_runner_proto::Validate::validate(&taken.decode()).is_ok(),
                        "a builder made an invalid update: {}",
                        taken.label.kind()
                    );
                    let sent = Sent {
                        sequence: None,
                        journal: taken.journal,
                        label: taken.label,
                        encoded: taken.encoded,
                        at: taking.now,
                    };
                    self.take(&mut inner, &mut taking, sent);
                }
                let Taking {
                    mode,
                    out,
                    marks,
                    mut forget,
                    unnumbered,
                    ..
                } = taking;
                if let Mode::Legacy { .. } = mode {
                    self.release_early(&mut inner, &mut forget);
                }
                // Not numbered (the reservation ran out): first next time.
                for sent in unnumbered.into_iter().rev() {
                    inner.resend.push_front(sent);
                }
                if resent > 0 {
                    crate::observe::metrics::delivery_resent(mode_name(mode), resent);
                }
                self.check_full(&mut inner);
                self.publish(&inner);
                (out, marks, forget, journaled)
            };
            self.forget(forget);
            if out.is_empty() {
                continue;
            }
            // Nothing journaled goes on the wire before its entry (and, in
            // acked mode, its sequence number) is on disk: one commit per
            // batch, on a task of its own (the outbound half must stay
            // `Sync`, which the store thread's queue is not).
            let commit = match (journaled, self.journal.clone()) {
                (true, Some(j)) => Some(tokio::spawn(async move {
                    if marks.is_empty() {
                        j.flush().await
                    } else {
                        j.mark_sent(marks).await
                    }
                })),
                _ => None,
            };
            return Batch { out, commit };
        }
    }

    /// One update on its way out: numbered (acked mode), recorded, added
    /// to the batch. An update the control plane already acknowledged is
    /// settled instead.
    fn take(&self, inner: &mut Inner, taking: &mut Taking, mut sent: Sent) {
        if !taking.unnumbered.is_empty() {
            taking.unnumbered.push(sent);
            return;
        }
        let sequence = match taking.mode {
            Mode::Acked => match sent.sequence {
                Some(seq) if seq <= inner.inflight.acked() => {
                    taking.forget.extend(sent.journal);
                    return;
                }
                Some(seq) => Some(seq),
                None => match inner.sequencer.take() {
                    Some(seq) => {
                        inner.inflight.note_sent_through(seq);
                        Some(seq)
                    }
                    None => {
                        taking.unnumbered.push(sent);
                        return;
                    }
                },
            },
            Mode::Legacy { .. } => None,
        };
        // The number goes on the wire after the update's bytes, which are
        // shared (the re-send store, the journal) and stay as they are.
        let number = sequence.unwrap_or(0);
        sent.sequence = sequence.or(sent.sequence);
        sent.at = taking.now;
        if let (Some(id), Some(seq)) = (sent.journal, sequence) {
            taking.marks.push((id, seq));
        }
        // Kept for a re-send: the wire shares it. Not kept (legacy mode,
        // an intermediate update): the update itself goes out.
        if inner.inflight.keeps(&sent) {
            taking.out.push(Outgoing {
                label: sent.label.clone(),
                encoded: sent.encoded.clone(),
                sequence: number,
            });
            inner.inflight.record(sent);
        } else {
            inner.inflight.record_unkept(&sent);
            taking.out.push(Outgoing {
                label: sent.label,
                encoded: sent.encoded,
                sequence: number,
            });
        }
    }

    /// Legacy mode: retention is bounded by count too; the oldest settle
    /// early rather than hold producers back. Once per batch, under the
    /// lock that recorded it (nobody sees the set above its bound), not
    /// once per update: one pass, one list of journal entries to forget.
    fn release_early(&self, inner: &mut Inner, forget: &mut Vec<u64>) {
        let settled = inner.inflight.settle_beyond(self.outbox.capacity());
        if settled.updates == 0 {
            return;
        }
        forget.extend(settled.journal);
        crate::observe::metrics::delivery_legacy_released_early(settled.updates);
        let before = inner.released_early;
        inner.released_early += settled.updates as u64;
        // Logged as the total passes 1, 2, 4, 8…
        if inner.released_early.checked_ilog2() > before.checked_ilog2() {
            tracing::warn!(
                total = inner.released_early,
                kept = self.outbox.capacity(),
                "legacy control plane: more terminal updates sent within the re-send window than the outbox capacity; the oldest are no longer kept for a re-send"
            );
        }
    }

    /// Acked mode: make sure a batch's worth of numbers is reserved on
    /// disk before anything is taken (the only await that could lose
    /// something is thus before the taking).
    async fn reserve_numbers(&self) {
        loop {
            let need = {
                let inner = self.lock();
                match inner.inflight.mode() {
                    Mode::Acked => inner.sequencer.needs_reservation(BATCH as u64),
                    Mode::Legacy { .. } => None,
                }
            };
            let Some(through) = need else { return };
            match self.journal.clone() {
                None => {}
                Some(j) => {
                    // A task of its own, as in `next_batch`.
                    let reserved = tokio::spawn(async move { j.reserve_through(through).await })
                        .await
                        .map_err(|e| e.to_string())
                        .and_then(|r| r.map_err(|e| e.to_string()));
                    if let Err(e) = reserved {
                        tracing::error!(error = %e, "reserving sequence numbers failed; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                }
            }
            self.lock().sequencer.reserved(through);
            return;
        }
    }
}

/// A batch being taken (under [`Sending`]'s lock): how it is delivered,
/// what goes out, and what the journal is told.
struct Taking {
    mode: Mode,
    /// When it is sent.
    now: Instant,
    out: Vec<Outgoing>,
    /// `(journal entry, sequence number)` of each journaled update numbered.
    marks: Vec<(u64, u64)>,
    /// Journal entries settled while taking.
    forget: Vec<u64>,
    /// Taken but not numbered (the reservation ran out), in order: put back
    /// first.
    unnumbered: Vec<Sent>,
}

/// Updates taken for the wire, and the journal write they wait for.
#[derive(Default)]
pub struct Batch {
    out: Vec<Outgoing>,
    commit: Option<tokio::task::JoinHandle<Result<(), crate::delivery::journal::JournalError>>>,
}

impl Batch {
    /// Waits for the batch's journal write; then its updates may be sent.
    /// A failed write is logged (the updates go anyway: after a crash they
    /// may be lost or sent again with new numbers).
    pub async fn committed(self) -> Vec<Outgoing> {
        if let Some(commit) = self.commit {
            let done = commit
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()));
            if let Err(e) = done {
                tracing::error!(
                    error = %e,
                    "journal write failed; after a crash these updates may be lost or sent again with new numbers"
                );
            }
        }
        self.out
    }
}
