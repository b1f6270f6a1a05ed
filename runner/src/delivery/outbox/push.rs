//! The producers' side: every way an update enters the outbox (one at a
//! time, a thread's burst, a read-loop reply, an urgent answer), masked,
//! encoded, handed to its transcript and journaled if durable on the way
//! in.

use agent_runner_proto::runner::ClientMessage;

use super::{Admitted, Journaled, Outbox, Taken, encode_all};
use crate::delivery::label::{Label, key_of};

impl Outbox {
    /// Queue an update, making room or waiting as the module doc says. A
    /// durable update is journaled first, and this waits until its record
    /// is written (a group commit shared with whatever else was journaled
    /// meanwhile): a producer goes on — an SDK's next step runs — only once
    /// what it produced survives a SIGKILL. A turn's end (`TurnUpdate
    /// COMPLETED`) written means everything the turn journaled before is
    /// (the writer writes in order), so a turn recorded as finished has its
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
    /// (written when this returns). Nothing can send (and so
    /// settle and forget) it before [`Outbox::queue`]: whatever must be
    /// recorded before its journal entry may be forgotten goes in between.
    pub async fn journal(&self, msg: ClientMessage) -> Journaled {
        self.journal_for(None, msg).await
    }

    /// [`Outbox::journal`], the transcript falling back to `thread`'s
    /// ([`Outbox::admit`]).
    async fn journal_for(&self, thread: Option<&str>, msg: ClientMessage) -> Journaled {
        let Admitted {
            label,
            encoded,
            masked,
        } = self.admit(msg, thread);
        let mut journal_id = None;
        if let Some((journal, id)) = self.for_journal(&label) {
            let started = std::time::Instant::now();
            match journal.append(id, encoded.clone()).await {
                Ok(()) => journal_id = Some(id),
                Err(e) => tracing::error!(
                    kind = label.kind(),
                    error = %e,
                    "journaling an update failed; it is kept in memory only"
                ),
            }
            crate::observe::metrics::journal_append(started.elapsed());
        }
        Journaled {
            label,
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
    /// journal job (written when it returns, as [`Outbox::push`]'s), and as
    /// many as fit queued under one lock with one wake of the link; the
    /// rest go one by one, making room or waiting as [`Outbox::push`] does.
    /// A burst holding a turn's end is pushed one by one. Into a full
    /// outbox, the burst's own outdated intermediate updates are given up
    /// first ([`Outbox::shed_outdated`]).
    pub async fn push_burst(&self, mut msgs: Vec<ClientMessage>) {
        // Masking leaves what a label says (ids, statuses) as it is.
        let mut labels: Vec<Label> = msgs.iter().map(Label::of).collect();
        if labels.iter().any(Label::is_turn_end) {
            for msg in msgs {
                self.push(msg).await;
            }
            return;
        }
        if !self.has_room(&self.lock()) {
            self.shed_outdated(&mut msgs, &mut labels);
        }
        // The generation before the first mask stands for the whole burst.
        let masked = self.redactor.generation();
        for msg in &mut msgs {
            self.mask(msg);
        }
        let mut entries = Vec::with_capacity(msgs.len());
        let mut appends = Vec::new();
        for (label, encoded) in labels.into_iter().zip(encode_all(&msgs)) {
            let journal = self.for_journal(&label).map(|(_, id)| {
                appends.push((id, encoded.clone()));
                id
            });
            entries.push(Journaled {
                label,
                journal,
                encoded,
                masked,
            });
        }
        if let Some(t) = self.transcripts.get() {
            t.record_all(&msgs);
        }
        // Freed here, by the producer that made them (see the label's
        // module doc), before the journal is waited for.
        drop(msgs);
        if !appends.is_empty()
            && let Some(journal) = &self.journal
        {
            let started = std::time::Instant::now();
            if let Err(e) = journal.append_many(appends).await {
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
    /// Counted as coalesced. When turns produce faster than the link sends
    /// (the throughput bench), much of what they produce is never sent;
    /// this sheds it before it costs the most.
    fn shed_outdated(&self, msgs: &mut Vec<ClientMessage>, labels: &mut Vec<Label>) {
        // An intermediate update's key is in its label already; only a
        // durable one (what may complete an item) is hashed here.
        let keys: Vec<Option<u64>> = msgs
            .iter()
            .zip(labels.iter())
            .map(|(msg, label)| match label.supersede_key() {
                Some(key) => Some(key),
                None if label.is_durable() => key_of(msg),
                None => None,
            })
            .collect();
        let outdated: Vec<bool> = labels
            .iter()
            .enumerate()
            .map(|(i, old)| {
                let later = labels[i + 1..].iter().zip(&keys[i + 1..]);
                later.into_iter().any(|(new, &key)| new.outdates(key, old))
            })
            .collect();
        let mut flags = outdated.iter();
        msgs.retain(|_| flags.next() != Some(&true));
        let mut flags = outdated.iter();
        labels.retain(|_| flags.next() != Some(&true));
        for _ in outdated.iter().filter(|&&o| o) {
            self.count(&self.coalesced, "coalesced");
            crate::observe::metrics::outbox_coalesced();
        }
    }

    /// Queue at once, even past the bound (replies from the read loop). A
    /// durable one is journaled without waiting for the disk (queued on
    /// the journal's thread ahead of anything that could send it).
    pub fn push_reply(&self, msg: ClientMessage) {
        let entry = self.admit_detached(msg);
        self.lock().push_back_journaled(entry);
        self.filled.notify_one();
    }

    /// What [`Outbox::push_reply`] would queue, for the link to place
    /// itself (the error update that replaces an update set aside goes
    /// where that update was, among the re-sends): masked, recorded in its
    /// transcript, journaled without waiting if durable; not queued.
    pub fn reply_to_place(&self, msg: ClientMessage) -> Taken {
        let entry = self.admit_detached(msg);
        Taken {
            label: entry.label,
            journal: entry.journal,
            encoded: entry.encoded,
        }
    }

    /// [`Outbox::admit`], and the journal's append queued without waiting
    /// (none when the writer's queue is full: said, kept in memory only).
    fn admit_detached(&self, msg: ClientMessage) -> Journaled {
        let Admitted {
            label,
            encoded,
            masked,
        } = self.admit(msg, None);
        let mut journal_id = None;
        if let Some((journal, id)) = self.for_journal(&label) {
            if journal.append_detached(id, encoded.clone()) {
                journal_id = Some(id);
            } else {
                tracing::warn!(
                    kind = label.kind(),
                    "the journal's queue is full; a reply is kept in memory only"
                );
            }
        }
        Journaled {
            label,
            journal: journal_id,
            encoded,
            masked,
        }
    }

    /// Queue ahead of everything else (heartbeat answers).
    pub fn push_urgent(&self, msg: ClientMessage) {
        let entry = self.admit(msg, None);
        self.lock()
            .push_front(entry.label, entry.encoded, entry.masked);
        self.filled.notify_one();
    }
}
