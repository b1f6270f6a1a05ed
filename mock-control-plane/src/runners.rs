//! One runner's share of the mock's state. A control plane knows a runner by
//! its credentials, so a mock serving several keeps, per runner: its live
//! `ControlChannel` stream (a new stream replaces only the same runner's),
//! its sequence check and acknowledgements (two runners number their
//! messages independently, so their numbers must never meet), and which
//! messages in the shared log are its own.

use crate::versions::Outgoing;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tonic::Status;

use crate::acks::{SequenceReport, Sequencing};

/// The sending half of a live stream, kept so tests can push into it and
/// end it.
pub(crate) struct LiveStream {
    pub(crate) id: u64,
    pub(crate) tx: mpsc::Sender<Outgoing>,
    /// Ends the server→runner stream with this status.
    pub(crate) kill: oneshot::Sender<Status>,
    /// Stops the task reading the runner→server half.
    pub(crate) cancel: CancellationToken,
}

impl LiveStream {
    /// Ends both halves, the server→runner one with `status`.
    pub(crate) fn end(self, status: Status) {
        // The receiver may already be gone (runner left): nothing to end then.
        let _ = self.kill.send(status);
        self.cancel.cancel();
    }
}

/// What the mock holds for one runner identity.
pub(crate) struct RunnerState {
    /// Its name (see [`crate::MockConfig::runners`]).
    pub(crate) name: String,
    pub(crate) live: Option<LiveStream>,
    /// Its streams accepted so far.
    pub(crate) streams_opened: u64,
    /// Its successful registrations so far.
    pub(crate) registrations: usize,
    pub(crate) sequencing: Sequencing,
    /// The positions in the shared log of the messages it sent (processed
    /// ones; dropped ones are in the timeline as `Dropped`).
    pub(crate) received: Vec<usize>,
    /// The positions in the shared `sent` log of what went to it.
    pub(crate) sent: Vec<usize>,
    /// Its highest processed sequence number; its acknowledgers watch it.
    pub(crate) processed: watch::Sender<u64>,
}

impl RunnerState {
    pub(crate) fn new(name: String, sequencing: Sequencing) -> Self {
        RunnerState {
            name,
            live: None,
            streams_opened: 0,
            registrations: 0,
            sequencing,
            received: Vec::new(),
            sent: Vec::new(),
            processed: watch::Sender::new(0),
        }
    }

    pub(crate) fn is_connected(&self) -> bool {
        self.live.is_some()
    }

    /// Tells its acknowledgers the processed mark, if it moved.
    pub(crate) fn publish_processed(&self) {
        let mark = self.sequencing.report.processed;
        self.processed.send_if_modified(|old| {
            let changed = *old != mark;
            *old = mark;
            changed
        });
    }
}

/// What the sequence checks of all `runners` saw: one runner's report as it
/// is; several runners' summed (duplicates, unnumbered messages and
/// acknowledgements added up, gaps listed one runner after another, the
/// highest processed mark of any).
pub(crate) fn merged_report(runners: &[RunnerState]) -> SequenceReport {
    if let [only] = runners {
        return only.sequencing.report.clone();
    }
    let mut merged = SequenceReport::default();
    for runner in runners {
        let r = &runner.sequencing.report;
        merged.processed = merged.processed.max(r.processed);
        merged.duplicates += r.duplicates;
        merged.gaps.extend_from_slice(&r.gaps);
        merged.unnumbered += r.unnumbered;
        merged.acks_sent += r.acks_sent;
    }
    merged
}
