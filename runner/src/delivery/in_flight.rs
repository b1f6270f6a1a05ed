//! What was handed to a connection but is not yet known to have arrived.
//!
//! HTTP/2 takes an update long before the control plane has it: when the
//! connection dies, whatever sat in its buffers dies too. This module keeps
//! sent updates until delivery is known, so the link can send them again on
//! the next connection, before anything newer.
//!
//! - **Acknowledged delivery** (`acked-delivery/1` accepted): every sent
//!   update is kept with its sequence number until a cumulative
//!   acknowledgement covers it. After a reconnect, the registration's
//!   `acked_sequence` settles what arrived; the rest is re-sent in order with
//!   the same sequence numbers, so the control plane drops what it already
//!   processed: exactly once.
//! - **Legacy** (no acknowledgements): only terminal and structural updates
//!   are kept (intermediate ones are superseded by later ones anyway), for a
//!   settling window after they were sent — long enough for keepalive to
//!   notice a dead connection. When a connection dies (not a clean close),
//!   everything still kept is re-sent: at least once.
//!
//! Acknowledgements that make no sense (beyond what was sent, or going
//! backwards) are refused ([`BadAck`]; the link logs them): nothing is
//! dropped on their word.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::delivery::label::Label;

/// How delivery is confirmed on the current connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The control plane acknowledges sequence numbers.
    Acked,
    /// No acknowledgements: terminal updates are re-sent after a dirty drop.
    Legacy {
        /// How long a sent terminal update is kept.
        settle: Duration,
    },
}

/// One update handed to a connection.
#[derive(Debug, Clone)]
pub struct Sent {
    /// Its sequence number (acked delivery only).
    pub sequence: Option<u64>,
    /// Its journal entry, if it is journaled (terminal and structural
    /// updates): forgotten once delivery is settled.
    pub journal: Option<u64>,
    /// What the update is ([`Label`]).
    pub label: Label,
    /// The update encoded, as the outbox encoded it when it entered (the
    /// journal's record, if it is journaled): what the wire writes (see
    /// `link::wire`), shared with it while kept for a re-send, never
    /// changed to number it: its number is `sequence`, written after it
    /// on the wire.
    pub encoded: Bytes,
    /// When it was handed to the connection.
    pub at: Instant,
}

/// Updates sent and not yet settled, oldest first.
#[derive(Debug)]
pub struct InFlight {
    mode: Mode,
    sent: VecDeque<Sent>,
    /// Highest sequence number ever recorded.
    highest: u64,
    /// Highest sequence number acknowledged.
    acked: u64,
}

/// An acknowledgement that makes no sense: ignored, nothing settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadAck {
    /// It covers sequence numbers never sent.
    #[error("acknowledged sequence {acked} but only {highest} was ever sent")]
    Beyond {
        /// What was acknowledged.
        acked: u64,
        /// The highest sequence number sent.
        highest: u64,
    },
    /// It is below an earlier acknowledgement.
    #[error("acknowledged sequence {acked} after already acknowledging {earlier}")]
    Backwards {
        /// What was acknowledged.
        acked: u64,
        /// The earlier, higher acknowledgement.
        earlier: u64,
    },
}

/// What an acknowledgement did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// Journal entries that may be forgotten.
    pub journal: Vec<u64>,
    /// Updates settled (journaled or not).
    pub updates: usize,
}

impl InFlight {
    /// Nothing in flight, in `mode`; `acked` is the control plane's last
    /// acknowledgement, if known.
    pub fn new(mode: Mode) -> Self {
        Self {
            mode,
            sent: VecDeque::new(),
            highest: 0,
            acked: 0,
        }
    }

    /// The mode of the current connection.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Switches mode for a new connection (the control plane may accept
    /// acknowledgements on one registration and not on the next). Updates
    /// kept under the old mode stay and are re-sent.
    pub fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
    }

    /// How many updates are kept.
    pub fn len(&self) -> usize {
        self.sent.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.sent.is_empty()
    }

    /// Whether [`InFlight::record`] keeps `sent`: in acked mode every
    /// numbered update, in legacy mode only journaled or durable ones.
    pub fn keeps(&self, sent: &Sent) -> bool {
        match self.mode {
            Mode::Acked => sent.sequence.is_some(),
            Mode::Legacy { .. } => sent.journal.is_some() || sent.label.is_durable(),
        }
    }

    /// Records an update handed to the connection. In legacy mode an
    /// update that is not journaled is not kept (returns false).
    pub fn record(&mut self, sent: Sent) -> bool {
        let keep = self.keeps(&sent);
        self.record_unkept(&sent);
        if keep {
            self.sent.push_back(sent);
        }
        keep
    }

    /// Records what an update not kept ([`InFlight::keeps`] said no) tells:
    /// its sequence number, if any.
    pub fn record_unkept(&mut self, sent: &Sent) {
        if let Some(seq) = sent.sequence {
            self.highest = self.highest.max(seq);
        }
    }

    /// A cumulative acknowledgement: everything with a sequence number at
    /// or below `through` arrived. Repeating the last one settles nothing;
    /// one beyond what was sent or going backwards is refused (the caller
    /// logs it) and changes nothing.
    pub fn ack(&mut self, through: u64) -> Result<Settled, BadAck> {
        if through > self.highest {
            return Err(BadAck::Beyond {
                acked: through,
                highest: self.highest,
            });
        }
        if through < self.acked {
            return Err(BadAck::Backwards {
                acked: through,
                earlier: self.acked,
            });
        }
        if through == self.acked {
            return Ok(Settled::default());
        }
        self.acked = through;
        let mut settled = Settled::default();
        while self
            .sent
            .front()
            .is_some_and(|s| s.sequence.is_some_and(|seq| seq <= through))
        {
            if let Some(s) = self.sent.pop_front() {
                settled.updates += 1;
                settled.journal.extend(s.journal);
            }
        }
        Ok(settled)
    }

    /// The highest sequence number acknowledged so far.
    pub fn acked(&self) -> u64 {
        self.acked
    }

    /// Sequence numbers up to `floor` may have been sent (by an earlier
    /// run of the runner): a control plane acknowledging them is not
    /// acknowledging something never sent.
    pub fn note_sent_through(&mut self, floor: u64) {
        self.highest = self.highest.max(floor);
    }

    /// The control plane's registration says it processed everything up
    /// to `through`, which may be below an earlier acknowledgement (a
    /// control plane that lost its state): settle what it covers and take
    /// it as the new baseline.
    pub fn rebase(&mut self, through: u64) -> Settled {
        self.acked = self.acked.min(through);
        self.ack(through).unwrap_or_default()
    }

    /// Settles the oldest updates kept, whatever their age, until at most
    /// `keep` are left (legacy mode's count bound): all at once, one
    /// [`Settled`] for them, not one allocation per update.
    pub fn settle_beyond(&mut self, keep: usize) -> Settled {
        let excess = self.sent.len().saturating_sub(keep);
        let mut settled = Settled {
            journal: Vec::new(),
            updates: excess,
        };
        for s in self.sent.drain(..excess) {
            settled.journal.extend(s.journal);
        }
        settled
    }

    /// Legacy mode: settles the updates kept longer than the window.
    pub fn settle(&mut self, now: Instant) -> Settled {
        let Mode::Legacy { settle } = self.mode else {
            return Settled::default();
        };
        let mut settled = Settled::default();
        while self
            .sent
            .front()
            .is_some_and(|s| now.saturating_duration_since(s.at) >= settle)
        {
            if let Some(s) = self.sent.pop_front() {
                settled.updates += 1;
                settled.journal.extend(s.journal);
            }
        }
        settled
    }

    /// The connection ended. After a clean close in legacy mode everything
    /// handed over arrived (settled, returned in the second value); else
    /// every kept update is returned, oldest first, to be sent again before
    /// anything newer.
    pub fn connection_ended(&mut self, clean: bool) -> (Vec<Sent>, Settled) {
        let all: Vec<Sent> = self.sent.drain(..).collect();
        match (self.mode, clean) {
            (Mode::Legacy { .. }, true) => {
                let settled = Settled {
                    updates: all.len(),
                    journal: all.iter().filter_map(|s| s.journal).collect(),
                };
                (Vec::new(), settled)
            }
            _ => (all, Settled::default()),
        }
    }

    /// The highest sequence number recorded so far.
    pub fn highest_sequence(&self) -> u64 {
        self.highest
    }
}

#[cfg(test)]
mod tests {
    use agent_runner_proto::runner::{ClientMessage, HeartbeatResponse, client_message::Payload};

    use super::*;

    fn sent(seq: Option<u64>, journal: Option<u64>, at: Instant) -> Sent {
        let message = ClientMessage {
            request_id: Some(format!("r{}", seq.unwrap_or(0))),
            payload: Some(Payload::HeartbeatResponse(HeartbeatResponse {})),
            sequence: 0,
        };
        Sent {
            sequence: seq,
            journal,
            label: crate::delivery::label::Label::of(&message),
            encoded: prost::Message::encode_to_vec(&message).into(),
            at,
        }
    }

    #[test]
    fn acked_keeps_everything_until_covered_and_resends_the_rest_in_order() {
        let now = Instant::now();
        let mut f = InFlight::new(Mode::Acked);
        for seq in 1..=5 {
            let journal = (seq % 2 == 0).then_some(seq * 10);
            assert!(f.record(sent(Some(seq), journal, now)));
        }
        let s = f.ack(3).unwrap();
        assert_eq!(
            s,
            Settled {
                journal: vec![20],
                updates: 3
            }
        );
        // A repeat settles nothing; stale and impossible ones are refused.
        assert_eq!(f.ack(3), Ok(Settled::default()));
        assert_eq!(
            f.ack(2),
            Err(BadAck::Backwards {
                acked: 2,
                earlier: 3
            })
        );
        assert_eq!(
            f.ack(99),
            Err(BadAck::Beyond {
                acked: 99,
                highest: 5
            })
        );
        assert_eq!(f.len(), 2);
        let (again, settled) = f.connection_ended(false);
        assert_eq!(settled, Settled::default());
        let seqs: Vec<_> = again.iter().map(|s| s.sequence).collect();
        assert_eq!(seqs, vec![Some(4), Some(5)]);
    }

    #[test]
    fn legacy_keeps_only_journaled_updates_for_the_settling_window() {
        let t0 = Instant::now();
        let window = Duration::from_secs(30);
        let mut f = InFlight::new(Mode::Legacy { settle: window });
        assert!(!f.record(sent(None, None, t0)), "intermediate: not kept");
        assert!(f.record(sent(None, Some(1), t0)));
        assert!(f.record(sent(None, Some(2), t0 + Duration::from_secs(20))));
        let s = f.settle(t0 + Duration::from_secs(31));
        assert_eq!(
            s,
            Settled {
                journal: vec![1],
                updates: 1
            }
        );
        // A dirty drop: the one still in its window goes again.
        let (again, _) = f.connection_ended(false);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].journal, Some(2));
    }

    #[test]
    fn legacy_clean_close_settles_everything() {
        let t0 = Instant::now();
        let mut f = InFlight::new(Mode::Legacy {
            settle: Duration::from_secs(30),
        });
        f.record(sent(None, Some(7), t0));
        let (again, settled) = f.connection_ended(true);
        assert!(again.is_empty());
        assert_eq!(
            settled,
            Settled {
                journal: vec![7],
                updates: 1
            }
        );
    }
}
