//! What of a session is on disk, and so what its next save writes: a step
//! appended to the log when the history only grew since the last save, a
//! new snapshot when it was rewritten (compaction, clear), when there is
//! none yet, or when the log has outgrown the snapshot (see
//! `crate::store`).

use super::record::{Delta, SessionRecord};

/// A log shorter than this never forces a snapshot, however small the
/// snapshot: tiny sessions would otherwise snapshot at every other step.
const LOG_MIN: u64 = 64 * 1024;

/// The session's file as the last successful save left it.
#[derive(Clone, Copy, Debug)]
pub struct Persisted {
    /// The snapshot's log generation.
    pub generation: u64,
    /// Messages on disk (snapshot plus log).
    pub len: usize,
    /// The session's history epoch they were written at.
    pub epoch: u64,
    pub log_bytes: u64,
    pub snapshot_bytes: u64,
}

impl Persisted {
    /// As loaded from a file: the next save writes a snapshot (the log's
    /// size is not known, and the load may have dropped a torn step).
    pub fn loaded(record: &SessionRecord) -> Self {
        Persisted {
            generation: record.log_generation,
            len: record.messages.len(),
            epoch: 0,
            log_bytes: u64::MAX,
            snapshot_bytes: 0,
        }
    }

    /// Whether the step from here to (`len`, `epoch`) can be appended.
    pub fn can_append(&self, len: usize, epoch: u64) -> bool {
        self.epoch == epoch && len >= self.len && self.log_bytes < self.snapshot_bytes.max(LOG_MIN)
    }
}

/// One save, prepared under the session's lock and written off the async
/// workers.
#[derive(Debug)]
pub enum Write {
    Snapshot {
        record: SessionRecord,
        /// The generation whose log the snapshot replaces.
        previous: Option<u64>,
    },
    Append {
        generation: u64,
        delta: Delta,
    },
}

/// A save's result, to record with [`super::Session::wrote`].
#[derive(Clone, Copy, Debug)]
pub struct Written {
    pub snapshot: bool,
    pub generation: u64,
    pub len: usize,
    pub epoch: u64,
    pub bytes: u64,
}

impl Persisted {
    /// The state after `written`.
    pub fn after(previous: Option<Persisted>, written: Written) -> Persisted {
        match previous {
            Some(p) if !written.snapshot => Persisted {
                len: written.len,
                log_bytes: p.log_bytes.saturating_add(written.bytes),
                ..p
            },
            _ => Persisted {
                generation: written.generation,
                len: written.len,
                epoch: written.epoch,
                log_bytes: 0,
                snapshot_bytes: written.bytes,
            },
        }
    }
}
