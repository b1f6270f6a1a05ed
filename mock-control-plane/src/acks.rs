//! The mock's side of acknowledged delivery (`acked-delivery/1`, contract
//! §1): whether it accepts the feature, what it acknowledges and when, and
//! the sequence check that lets tests assert exactly-once and in-order.
//!
//! On a session that accepted the feature, every `ClientMessage` must carry
//! a sequence number. The mock processes (logs) a message whose number is
//! above everything processed so far and drops one at or below it as a
//! duplicate; a number that skips ahead is processed and the skipped range
//! is recorded as a gap. [`SequenceReport`] says what it saw. A mock serving
//! several runners keeps one such check per runner.

use std::str::FromStr;
use std::time::Duration;

pub use agent_runner_proto::ACKED_DELIVERY;

/// How the mock treats acknowledged delivery.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AckMode {
    /// Accept the feature and acknowledge as messages are processed
    /// (cumulatively; a burst gets few acknowledgements).
    #[default]
    Immediate,
    /// Accept the feature and acknowledge this long after processing.
    Late(Duration),
    /// Accept the feature and never acknowledge (registrations report 0).
    Never,
    /// Do not accept the feature: a legacy control plane.
    Refuse,
}

impl AckMode {
    /// Whether the feature is accepted.
    pub fn accepts(self) -> bool {
        self != AckMode::Refuse
    }
}

impl FromStr for AckMode {
    type Err = String;

    /// `on` (or `immediate`), `off` (or `refuse`), `never`, `late:MS`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "on" | "immediate" => Ok(AckMode::Immediate),
            "off" | "refuse" => Ok(AckMode::Refuse),
            "never" => Ok(AckMode::Never),
            other => match other.strip_prefix("late:").map(str::parse::<u64>) {
                Some(Ok(ms)) => Ok(AckMode::Late(Duration::from_millis(ms))),
                _ => Err(format!(
                    "acked delivery mode: expected on, off, never or late:MS, got {other:?}"
                )),
            },
        }
    }
}

/// What the sequence check saw, over the mock's whole life.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SequenceReport {
    /// The highest sequence number processed (what the mock acknowledges).
    pub processed: u64,
    /// Messages dropped because their number was already processed.
    pub duplicates: u64,
    /// Ranges `(first, last)` of numbers never seen before a higher one
    /// was processed.
    pub gaps: Vec<(u64, u64)>,
    /// Messages without a sequence number on a session that accepted the
    /// feature (a runner bug; they are processed).
    pub unnumbered: u64,
    /// Acknowledgement-only `ServerMessage`s sent.
    pub acks_sent: u64,
}

/// One runner's acknowledged-delivery state (each runner numbers its own
/// messages: two runners' sequences never meet).
#[derive(Clone, Debug, Default)]
pub(crate) struct Sequencing {
    pub(crate) mode: AckMode,
    pub(crate) forget_on_restart: bool,
    pub(crate) report: SequenceReport,
    /// The latest registration accepted the feature.
    pub(crate) session_acked: bool,
    /// After forgetting: the next number is taken as it comes.
    baseline_unknown: bool,
}

impl Sequencing {
    pub(crate) fn new(mode: AckMode, forget_on_restart: bool) -> Self {
        Self {
            mode,
            forget_on_restart,
            ..Self::default()
        }
    }

    /// A registration offering `offered`: the features to accept and the
    /// `acked_sequence` to answer with.
    pub(crate) fn registration(&mut self, offered: &[String]) -> (Vec<String>, u64) {
        self.session_acked = self.mode.accepts() && offered.iter().any(|f| f == ACKED_DELIVERY);
        if !self.session_acked {
            return (Vec::new(), 0);
        }
        let acked = match self.mode {
            AckMode::Never => 0,
            _ => self.report.processed,
        };
        (vec![ACKED_DELIVERY.to_owned()], acked)
    }

    /// A message numbered `sequence` arrived: whether to process it.
    pub(crate) fn arrived(&mut self, sequence: u64) -> bool {
        if !self.session_acked {
            return true;
        }
        if sequence == 0 {
            self.report.unnumbered += 1;
            return true;
        }
        let r = &mut self.report;
        if self.baseline_unknown {
            self.baseline_unknown = false;
        } else if sequence <= r.processed {
            r.duplicates += 1;
            return false;
        } else if sequence > r.processed + 1 {
            r.gaps.push((r.processed + 1, sequence - 1));
        }
        r.processed = sequence;
        true
    }

    /// The mock restarts: with `forget_on_restart`, it forgets what it
    /// processed (as a control plane without durable state would).
    pub(crate) fn restarted(&mut self) {
        if self.forget_on_restart {
            self.report.processed = 0;
            self.baseline_unknown = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered() -> Vec<String> {
        vec![ACKED_DELIVERY.to_owned()]
    }

    #[test]
    fn duplicates_are_dropped_and_gaps_recorded() {
        let mut s = Sequencing::new(AckMode::Immediate, false);
        assert_eq!(s.registration(&offered()), (offered(), 0));
        assert!(s.arrived(1));
        assert!(s.arrived(2));
        assert!(!s.arrived(2), "a duplicate");
        assert!(s.arrived(5));
        assert_eq!(s.report.gaps, vec![(3, 4)]);
        assert_eq!(s.report.duplicates, 1);
        assert_eq!(s.registration(&offered()).1, 5);
        assert!(s.arrived(0));
        assert_eq!(s.report.unnumbered, 1);
    }

    #[test]
    fn refuse_and_never_and_forgetting() {
        let mut s = Sequencing::new(AckMode::Refuse, false);
        assert_eq!(s.registration(&offered()), (vec![], 0));
        assert!(s.arrived(0) && s.arrived(0), "legacy: everything processed");
        let mut s = Sequencing::new(AckMode::Never, true);
        s.registration(&offered());
        assert!(s.arrived(1) && s.arrived(2));
        assert_eq!(s.registration(&offered()).1, 0, "never acknowledges");
        s.restarted();
        assert!(s.arrived(3), "forgotten: taken as the new baseline");
        assert!(s.report.gaps.is_empty());
        assert_eq!(
            "late:250".parse(),
            Ok(AckMode::Late(Duration::from_millis(250)))
        );
        assert!("sometimes".parse::<AckMode>().is_err());
    }
}
