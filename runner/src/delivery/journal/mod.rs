//! The outbox journal: updates that must survive a crash, and the sequence
//! numbers that must never repeat.
//!
//! Terminal and structural updates (`TurnUpdate COMPLETED`, completed items,
//! `RequestError`s, thread/agent/skill updates) are appended here before they
//! count as produced, and forgotten once sent (a control plane without
//! acknowledgements) or acknowledged (`acked-delivery/1`). After a crash the
//! runner sends what the journal holds, in order, before new work.
//! Token usage is journaled too (a full outbox may still replace a queued
//! report by the thread's next; the replaced one's entry is forgotten).
//! RUNNING snapshots stay in memory only.
//!
//! With acknowledged delivery every `ClientMessage` carries a sequence number
//! that never repeats over the runner's life. Numbers are reserved here in
//! blocks ahead of use ([`Sequencer`]), so handing one out costs no disk write; after a crash
//! numbering resumes above the last reservation (a gap the control plane can
//! see, only after its last acknowledgement). A journaled update's number is
//! recorded (`mark_sent`) before it goes on the wire, so a re-send after a
//! crash reuses it and the control plane drops it as already processed.
//!
//! Its own file (`journal.log` beside `state.db`): an append-only log of
//! checksummed records ([`log`]), written only by its writer thread
//! ([`writer`]) in group commits — a burst of updates costs one `write` —
//! and compacted when settled records dominate it. A `journal.db` left by
//! a runner that kept the journal in SQLite is carried over at start-up
//! ([`import`]).

mod import;
mod keyed;
mod log;
mod writer;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use self::log::Record;
use self::writer::{Job, Records, Writer};

pub use self::writer::THREAD_NAME;

/// Most appends one [`Journal::append_queued_many`] job carries: a
/// thread's burst, whose producer waits for that one group commit before
/// its SDK's next step. Each burst pays a round trip (a wake of the
/// writer, a commit, a wake of the producer): at 16, 8 streaming turns
/// cost the runner 5.9–7.5 µs of CPU per update sent and reached 0.29–0.39
/// of the bare stream's rate; at 64, 4.0–5.1 µs and 0.50–0.61, with half
/// the commits (paired runs, bench/HISTORY.md round Z5). 128 measured no
/// better.
pub const BURST: usize = 64;

/// Sequence numbers reserved per disk write.
pub const SEQUENCE_BLOCK: u64 = 4_096;

/// The journal's file name under the state directory.
pub const FILE: &str = "journal.log";

/// Why the journal failed.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Reading the SQLite journal of an older runner.
    #[error("outbox journal: reading the old journal.db: {0}")]
    Import(#[from] rusqlite::Error),
    /// The file is not a journal.
    #[error("outbox journal {path}: {error}")]
    Format {
        /// The file.
        path: String,
        /// What is wrong with it.
        error: log::NotAJournal,
    },
    /// A write failed: the update is not journaled.
    #[error("outbox journal: {0}")]
    Write(String),
    /// The writer thread is gone.
    #[error("outbox journal: the writer thread has stopped")]
    Stopped,
    /// Opening, reading or starting the writer.
    #[error("outbox journal: {0}")]
    Io(#[from] std::io::Error),
}

/// One journaled update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    /// The journal's own key, in append order.
    pub id: u64,
    /// The sequence number it was sent with, once sent (acked delivery).
    pub sequence: Option<u64>,
    /// The encoded `ClientMessage`.
    pub message: Bytes,
}

/// What a previous run left behind.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Updates produced but not yet forgotten, in append order.
    pub entries: Vec<JournalEntry>,
    /// Every sequence number at or below this may have been used already:
    /// the next one handed out must be above it.
    pub sequence_floor: u64,
}

/// A handle to the journal; cheap to clone.
#[derive(Clone)]
pub struct Journal {
    jobs: mpsc::Sender<Job>,
    /// The id the next appended entry gets (ids are chosen here, not by
    /// the writer, so an entry's id is known before its write lands).
    next_id: Arc<AtomicU64>,
}

impl Journal {
    /// Opens (or creates) `<dir>/journal.log` and reads what it holds. Call
    /// at start-up, before any update is produced. A torn or corrupt tail
    /// (a crash during a write) is dropped with an error in the log; the
    /// file is then rewritten compacted, as it is when settled records
    /// dominate it.
    pub fn open(dir: &Path) -> Result<(Self, Recovered), JournalError> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        let read = log::read(&bytes).map_err(|error| JournalError::Format {
            path: path.display().to_string(),
            error,
        })?;
        if read.dropped_bytes > 0 {
            tracing::error!(
                file = %path.display(),
                dropped_bytes = read.dropped_bytes,
                "outbox journal: a torn or corrupt tail was dropped (a write cut short by a crash)"
            );
        }
        let mut state = log::State::default();
        for record in &read.records {
            state.apply(record);
        }
        let imported = import::import(dir, &mut state)?;
        let recovered = Recovered {
            entries: state
                .entries
                .iter()
                .map(|(id, live)| JournalEntry {
                    id,
                    sequence: live.sequence,
                    message: live.message.clone(),
                })
                .collect(),
            sequence_floor: state.reserved,
        };
        let first_id = state.max_id + 1;
        // Rewritten (and synced) only when it must be: to carry over an
        // old journal (written whole before that goes), to drop a torn
        // tail, or when settled records dominate. Otherwise the file is
        // appended to as it is: a start need not wait for the disk (two
        // `fsync`s, each start, before it registers).
        let writer = if imported
            || read.dropped_bytes > 0
            || Writer::compaction_due(bytes.len() as u64, &state)
        {
            Writer::create(&path, state)?
        } else {
            Writer::reopen(&path, bytes.len() as u64, state)?
        };
        if imported {
            import::remove_old(dir)?;
            tracing::info!(
                entries = recovered.entries.len(),
                "outbox journal: carried over from journal.db"
            );
        }
        let journal = Self {
            jobs: writer.start()?,
            next_id: Arc::new(AtomicU64::new(first_id)),
        };
        Ok((journal, recovered))
    }

    /// A fresh entry id, above every id used before (restarts included:
    /// recovered entries are below it).
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Queues `record` and waits until it is written.
    async fn write(&self, record: Option<Record>) -> Result<(), JournalError> {
        self.write_job(record.map_or(Records::None, Records::One))
            .await
    }

    /// Queues `records` as one job and waits until they are written.
    async fn write_job(&self, records: Records) -> Result<(), JournalError> {
        let (done, result) = oneshot::channel();
        self.jobs
            .send(Job {
                records,
                done: Some(done),
            })
            .await
            .map_err(|_| JournalError::Stopped)?;
        match result.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(JournalError::Write(e)),
            Err(_) => Err(JournalError::Stopped),
        }
    }

    /// Queues `record` without waiting for room; false when the queue is
    /// full or the writer is gone.
    fn try_queue(&self, record: Record) -> bool {
        self.jobs
            .try_send(Job {
                records: Records::One(record),
                done: None,
            })
            .is_ok()
    }

    /// Journals `message` (an encoded `ClientMessage`) as entry `id` (from
    /// [`Journal::next_id`]); returns once it is written.
    pub async fn append(&self, id: u64, message: Bytes) -> Result<(), JournalError> {
        self.write(Some(Record::Append { id, message })).await
    }

    /// Queues the append of entry `id` (waiting only for room in the
    /// writer's queue, not for the write). Ordered before every later
    /// write: awaiting any later write ([`Journal::append`],
    /// [`Journal::flush`], [`Journal::mark_sent`]) means this one is
    /// written too.
    pub async fn append_queued(&self, id: u64, message: Bytes) -> Result<(), JournalError> {
        self.jobs
            .send(Job {
                records: Records::One(Record::Append { id, message }),
                done: None,
            })
            .await
            .map_err(|_| JournalError::Stopped)
    }

    /// [`Journal::append_queued`] for several entries, in order, as one job:
    /// one slot of the writer's queue and at most one wake of the writer.
    /// At most [`BURST`] of them (a thread's updates that were ready
    /// together), so the queue's bound still bounds the records waiting.
    pub async fn append_queued_many(&self, entries: Vec<(u64, Bytes)>) -> Result<(), JournalError> {
        debug_assert!(entries.len() <= BURST);
        let records = entries
            .into_iter()
            .map(|(id, message)| Record::Append { id, message })
            .collect();
        self.jobs
            .send(Job {
                records: Records::Many(records),
                done: None,
            })
            .await
            .map_err(|_| JournalError::Stopped)
    }

    /// [`Journal::append`] for several entries, in order, as one job (one
    /// slot of the writer's queue, at most one wake of the writer); returns
    /// once they are written. At most [`BURST`] of them (a thread's updates
    /// that were ready together), so the queue's bound still bounds the
    /// records waiting.
    pub async fn append_many(&self, entries: Vec<(u64, Bytes)>) -> Result<(), JournalError> {
        debug_assert!(entries.len() <= BURST);
        let records = entries
            .into_iter()
            .map(|(id, message)| Record::Append { id, message })
            .collect();
        self.write_job(Records::Many(records)).await
    }

    /// Queues the append of entry `id` without waiting (for producers that
    /// cannot wait: replies made by the read loop). Ordered before every
    /// later write. False when the writer's queue is full: the entry is
    /// then not journaled (it lives in memory only).
    pub fn append_detached(&self, id: u64, message: Bytes) -> bool {
        self.try_queue(Record::Append { id, message })
    }

    /// Records the sequence numbers journaled updates are about to be sent
    /// with; returns once that is written.
    pub async fn mark_sent(&self, marks: Vec<(u64, u64)>) -> Result<(), JournalError> {
        if marks.is_empty() {
            return Ok(());
        }
        self.write(Some(Record::Mark(marks))).await
    }

    /// Forgets the given entries (delivery settled). Neither waits for
    /// room nor for the write: a crash before it lands, or a full queue,
    /// only means they are sent again after a restart (at least once; with
    /// acknowledgements the control plane drops the repeat by its
    /// sequence). False when the queue was full.
    pub fn forget(&self, ids: Vec<u64>) -> bool {
        if ids.is_empty() {
            return true;
        }
        self.try_queue(Record::Forget(ids))
    }

    /// Forgets every entry sent with a sequence number at or below
    /// `acked` (the control plane processed them). Like
    /// [`Journal::forget`], never waits; a later call covers a skipped one.
    pub fn forget_through(&self, acked: u64) -> bool {
        self.try_queue(Record::ForgetThrough(acked))
    }

    /// Reserves sequence numbers up to `through`; returns once that is
    /// written (a restart will then start above it).
    pub async fn reserve_through(&self, through: u64) -> Result<(), JournalError> {
        self.write(Some(Record::Reserve(through))).await
    }

    /// Waits until every write queued before this call is written.
    pub async fn flush(&self) -> Result<(), JournalError> {
        self.write(None).await
    }
}

/// Hands out sequence numbers: strictly increasing, never reused across
/// restarts. Numbers are handed out only from a block already reserved on
/// disk ([`Journal::reserve_through`]); the caller reserves ahead (an
/// await, before it takes anything it could lose) and hands out without
/// waiting.
#[derive(Debug)]
pub struct Sequencer {
    next: u64,
    reserved: u64,
}

impl Sequencer {
    /// Continues above `floor` (see [`Recovered::sequence_floor`]).
    pub fn new(floor: u64) -> Self {
        Self {
            next: floor + 1,
            reserved: floor,
        }
    }

    /// If fewer than `n` reserved numbers are left: the number to reserve
    /// through (a block ahead) before taking `n`.
    pub fn needs_reservation(&self, n: u64) -> Option<u64> {
        let last = self.next + n.saturating_sub(1);
        (last > self.reserved).then_some(last + SEQUENCE_BLOCK)
    }

    /// Numbers up to `through` are reserved on disk.
    pub fn reserved(&mut self, through: u64) {
        self.reserved = self.reserved.max(through);
    }

    /// The next number, if one is reserved.
    pub fn take(&mut self) -> Option<u64> {
        (self.next <= self.reserved).then(|| {
            self.next += 1;
            self.next - 1
        })
    }

    /// The highest number handed out so far (0 if none).
    pub fn last(&self) -> u64 {
        self.next - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn entries_survive_a_reopen_until_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, recovered) = Journal::open(dir.path()).unwrap();
        assert!(recovered.entries.is_empty());
        let (a, b, c) = (journal.next_id(), journal.next_id(), journal.next_id());
        journal.append(a, Bytes::from_static(b"a")).await.unwrap();
        journal.append(b, Bytes::from_static(b"b")).await.unwrap();
        assert!(journal.append_detached(c, Bytes::from_static(b"c")));
        journal.mark_sent(vec![(a, 7), (b, 8)]).await.unwrap();
        assert!(journal.forget_through(7));
        assert!(journal.forget(vec![c]));
        journal.flush().await.unwrap();
        drop(journal);

        let (journal, recovered) = Journal::open(dir.path()).unwrap();
        assert!(journal.next_id() > c, "ids never repeat across restarts");
        assert_eq!(
            recovered.entries,
            vec![JournalEntry {
                id: b,
                sequence: Some(8),
                message: Bytes::from_static(b"b")
            }]
        );
        assert_eq!(recovered.sequence_floor, 8, "a sent sequence is used");
    }

    /// A start appends to a clean journal as it is (no rewrite, so no
    /// `fsync` before the runner registers); a torn one is rewritten.
    #[tokio::test]
    async fn a_clean_journal_is_appended_to_and_a_torn_one_rewritten() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let inode = || std::fs::metadata(&path).unwrap().ino();
        let (journal, _) = Journal::open(dir.path()).unwrap();
        let created = inode();
        let a = journal.next_id();
        journal.append(a, Bytes::from_static(b"a")).await.unwrap();
        drop(journal);
        let (journal, recovered) = Journal::open(dir.path()).unwrap();
        assert_eq!(inode(), created, "reopened, not rewritten");
        assert_eq!(recovered.entries.len(), 1);
        let b = journal.next_id();
        journal.append(b, Bytes::from_static(b"b")).await.unwrap();
        drop(journal);
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.set_len(f.metadata().unwrap().len() - 1).unwrap();
        drop(f);
        let (_, recovered) = Journal::open(dir.path()).unwrap();
        assert_ne!(inode(), created, "a torn tail is rewritten away");
        let ids: Vec<u64> = recovered.entries.iter().map(|e| e.id).collect();
        assert_eq!(ids, vec![a]);
    }

    /// A new journal file is not synced: a crash may leave it empty or
    /// with part of its header, which opens as an empty journal.
    #[tokio::test]
    async fn a_file_cut_short_in_its_header_opens_empty() {
        for cut in [0, 3, log::MAGIC.len() - 1] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(FILE);
            std::fs::write(&path, &log::MAGIC[..cut]).unwrap();
            let (journal, recovered) = Journal::open(dir.path()).unwrap();
            assert!(recovered.entries.is_empty(), "{cut}");
            let a = journal.next_id();
            journal.append(a, Bytes::from_static(b"a")).await.unwrap();
            drop(journal);
            let (_, recovered) = Journal::open(dir.path()).unwrap();
            assert_eq!(recovered.entries.len(), 1, "{cut}");
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), b"ARJXXX").unwrap();
        assert!(Journal::open(dir.path()).is_err(), "not a journal at all");
    }

    #[tokio::test]
    async fn a_torn_tail_is_dropped_and_what_came_before_survives() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, _) = Journal::open(dir.path()).unwrap();
        let (a, b) = (journal.next_id(), journal.next_id());
        journal.append(a, Bytes::from_static(b"a")).await.unwrap();
        journal.append(b, Bytes::from_static(b"b")).await.unwrap();
        drop(journal);
        // A crash in the middle of the last write: its record is cut short.
        let path = dir.path().join(FILE);
        let len = std::fs::metadata(&path).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len - 2).unwrap();
        drop(f);
        let (journal, recovered) = Journal::open(dir.path()).unwrap();
        let ids: Vec<u64> = recovered.entries.iter().map(|e| e.id).collect();
        assert_eq!(ids, vec![a], "the torn append is gone, the one before kept");
        assert!(journal.next_id() > a);
        // The file was rewritten clean: appending after it reads back.
        let c = journal.next_id();
        journal.append(c, Bytes::from_static(b"c")).await.unwrap();
        drop(journal);
        let (_, recovered) = Journal::open(dir.path()).unwrap();
        let ids: Vec<u64> = recovered.entries.iter().map(|e| e.id).collect();
        assert_eq!(ids, vec![a, c]);
    }

    #[tokio::test]
    async fn the_file_is_compacted_when_settled_records_dominate() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, recovered) = Journal::open(dir.path()).unwrap();
        let mut seq = Sequencer::new(recovered.sequence_floor);
        let through = seq.needs_reservation(1).unwrap();
        journal.reserve_through(through).await.unwrap();
        seq.reserved(through);
        let keep = journal.next_id();
        journal
            .append(keep, Bytes::from_static(b"kept"))
            .await
            .unwrap();
        let message = Bytes::from(vec![7u8; 1024]);
        let total = writer::COMPACT_AT as usize / message.len() * 2;
        for _ in 0..total / 64 {
            let ids: Vec<u64> = (0..64).map(|_| journal.next_id()).collect();
            for id in &ids {
                journal.append_queued(*id, message.clone()).await.unwrap();
            }
            assert!(journal.forget(ids));
        }
        journal.flush().await.unwrap();
        // The writer answers a batch's jobs before it compacts after that
        // batch (no writer waits for a compaction): a second flush returns
        // only once the first batch's compaction is over.
        journal.flush().await.unwrap();
        let len = std::fs::metadata(dir.path().join(FILE)).unwrap().len();
        assert!(
            len < writer::COMPACT_AT,
            "{len} bytes: {total} KiB were written and forgotten"
        );
        drop(journal);
        let (journal, recovered) = Journal::open(dir.path()).unwrap();
        assert_eq!(recovered.entries.len(), 1);
        assert_eq!(recovered.entries[0].message, Bytes::from_static(b"kept"));
        assert!(recovered.sequence_floor >= through);
        assert!(journal.next_id() > keep + total as u64);
    }

    #[tokio::test]
    async fn sequences_never_repeat_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, recovered) = Journal::open(dir.path()).unwrap();
        let mut seq = Sequencer::new(recovered.sequence_floor);
        assert_eq!(seq.take(), None, "nothing reserved yet");
        let through = seq.needs_reservation(4).unwrap();
        journal.reserve_through(through).await.unwrap();
        seq.reserved(through);
        assert_eq!(seq.needs_reservation(4), None);
        let taken: Vec<u64> = (0..4).map(|_| seq.take().unwrap()).collect();
        assert_eq!(taken, vec![1, 2, 3, 4]);
        assert_eq!(seq.last(), 4);
        // A crash: nothing but the reservation is known.
        drop(journal);
        let (_journal, recovered) = Journal::open(dir.path()).unwrap();
        // The whole reservation survived, not just what was handed out.
        assert!(recovered.sequence_floor >= through, "{recovered:?}");
        let mut seq = Sequencer::new(recovered.sequence_floor);
        let next_block = seq.needs_reservation(1).unwrap();
        seq.reserved(next_block);
        let next = seq.take().unwrap();
        assert!(next > through, "{next}");
    }
}
