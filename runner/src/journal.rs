//! The outbox journal: updates that must survive a crash, and the sequence
//! numbers that must never repeat.
//!
//! Terminal and structural updates (`TurnUpdate COMPLETED`, completed items,
//! `RequestError`s, thread/agent/skill updates) are appended here before they
//! count as produced, and forgotten once sent (a control plane without
//! acknowledgements) or acknowledged (`acked-delivery/1`). After a crash the
//! runner sends what the journal holds, in order, before new work.
//! Intermediate updates (RUNNING snapshots, token usage) stay in memory only.
//!
//! With acknowledged delivery every `ClientMessage` carries a sequence number
//! that never repeats over the runner's life. Numbers are reserved here in
//! blocks ahead of use ([`Sequencer`]), so handing one out costs no disk write; after a crash
//! numbering resumes above the last reservation (a gap the control plane can
//! see, only after its last acknowledgement). A journaled update's number is
//! recorded (`mark_sent`) before it goes on the wire, so a re-send after a
//! crash reuses it and the control plane drops it as already processed.
//!
//! Its own database file (`journal.db` beside `state.db`), written only by
//! its [`StoreThread`] in group commits: a burst of updates costs one commit.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::{Connection, OptionalExtension, params};

use crate::store_thread::{StoreThread, StoreThreadError};

/// Sequence numbers reserved per disk write.
pub const SEQUENCE_BLOCK: u64 = 4_096;

/// Why the journal failed.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Opening or reading the database.
    #[error("outbox journal: {0}")]
    Sql(#[from] rusqlite::Error),
    /// A write on the store thread.
    #[error("outbox journal: {0}")]
    Write(#[from] StoreThreadError),
    /// Starting the store thread.
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
    pub message: Vec<u8>,
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
    store: StoreThread,
    /// The id the next appended entry gets (ids are chosen here, not by
    /// SQLite, so an entry's id is known before its write lands).
    next_id: Arc<AtomicU64>,
}

impl Journal {
    /// Opens (or creates) `<dir>/journal.db` and reads what it holds. Call
    /// at start-up, before any update is produced.
    pub fn open(dir: &Path) -> Result<(Self, Recovered), JournalError> {
        std::fs::create_dir_all(dir)?;
        let conn = Connection::open(dir.join("journal.db"))?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             CREATE TABLE IF NOT EXISTS entries (
                 id INTEGER PRIMARY KEY AUTOINCREMENT,
                 sequence INTEGER,
                 message BLOB NOT NULL
             );
             CREATE INDEX IF NOT EXISTS entries_sequence ON entries(sequence);
             CREATE TABLE IF NOT EXISTS meta (
                 key TEXT PRIMARY KEY,
                 value INTEGER NOT NULL
             );",
        )?;
        let recovered = read(&conn)?;
        // AUTOINCREMENT remembers the highest id ever used, even of
        // entries since forgotten: ids never repeat.
        let used: Option<i64> = conn
            .query_row(
                "SELECT seq FROM sqlite_sequence WHERE name = 'entries'",
                [],
                |r| r.get(0),
            )
            .optional()?;
        let first_id = recovered
            .entries
            .last()
            .map_or(0, |e| e.id)
            .max(used.unwrap_or(0) as u64)
            + 1;
        // Every job is one statement, or idempotent (`mark_sent`).
        let store = StoreThread::start_single_statement("outbox-journal", conn)?;
        let journal = Self {
            store,
            next_id: Arc::new(AtomicU64::new(first_id)),
        };
        Ok((journal, recovered))
    }

    /// A fresh entry id, above every id used before (restarts included:
    /// recovered entries are below it).
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Journals `message` (an encoded `ClientMessage`) as entry `id` (from
    /// [`Journal::next_id`]); returns once it is on disk.
    pub async fn append(&self, id: u64, message: Vec<u8>) -> Result<(), JournalError> {
        self.store.run(move |tx| insert(tx, id, message)).await?;
        Ok(())
    }

    /// Queues the append of entry `id` (waiting only for room in the store
    /// thread's queue, not for the disk). Ordered before every later write:
    /// awaiting any later write ([`Journal::append`], [`Journal::flush`],
    /// [`Journal::mark_sent`]) means this one is on disk too.
    pub async fn append_queued(&self, id: u64, message: Vec<u8>) -> Result<(), JournalError> {
        self.store.submit(move |tx| insert(tx, id, message)).await?;
        Ok(())
    }

    /// Queues the append of entry `id` without waiting (for producers that
    /// cannot wait: replies made by the read loop). Ordered before every
    /// later write. False when the store thread's queue is full: the entry
    /// is then not journaled (it lives in memory only).
    pub fn append_detached(&self, id: u64, message: Vec<u8>) -> bool {
        self.store.try_submit(move |tx| insert(tx, id, message))
    }

    /// Records the sequence numbers journaled updates are about to be sent
    /// with; returns once that is on disk.
    pub async fn mark_sent(&self, marks: Vec<(u64, u64)>) -> Result<(), JournalError> {
        if marks.is_empty() {
            return Ok(());
        }
        self.store
            .run(move |tx| {
                let mut stmt =
                    tx.prepare_cached("UPDATE entries SET sequence = ?2 WHERE id = ?1")?;
                for (id, seq) in marks {
                    stmt.execute(params![id as i64, seq as i64])?;
                }
                Ok(())
            })
            .await?;
        Ok(())
    }

    /// Forgets the given entries (delivery settled). Neither waits for
    /// room nor for the disk: a crash before it lands, or a full queue,
    /// only means they are sent again after a restart (at least once; with
    /// acknowledgements the control plane drops the repeat by its
    /// sequence). False when the queue was full.
    pub fn forget(&self, ids: Vec<u64>) -> bool {
        if ids.is_empty() {
            return true;
        }
        self.store.try_submit(move |tx| {
            let mut stmt = tx.prepare_cached("DELETE FROM entries WHERE id = ?1")?;
            for id in ids {
                stmt.execute([id as i64])?;
            }
            Ok(())
        })
    }

    /// Forgets every entry sent with a sequence number at or below
    /// `acked` (the control plane processed them). Like
    /// [`Journal::forget`], never waits; a later call covers a skipped one.
    pub fn forget_through(&self, acked: u64) -> bool {
        self.store.try_submit(move |tx| {
            tx.prepare_cached("DELETE FROM entries WHERE sequence IS NOT NULL AND sequence <= ?1")?
                .execute([acked as i64])
                .map(drop)
        })
    }

    /// Reserves sequence numbers up to `through`; returns once that is on
    /// disk (a restart will then start above it).
    pub async fn reserve_through(&self, through: u64) -> Result<(), JournalError> {
        self.store
            .run(move |tx| {
                tx.execute(
                    "INSERT INTO meta (key, value) VALUES ('sequence_reserved', ?1)
                     ON CONFLICT(key) DO UPDATE SET value = max(value, excluded.value)",
                    [through as i64],
                )
                .map(drop)
            })
            .await?;
        Ok(())
    }

    /// Waits until every write queued before this call is on disk.
    pub async fn flush(&self) -> Result<(), JournalError> {
        self.store.run(|_| Ok(())).await?;
        Ok(())
    }
}

/// Appends entry `id` (a cached statement: the journal's hot path).
fn insert(tx: &Connection, id: u64, message: Vec<u8>) -> rusqlite::Result<()> {
    tx.prepare_cached("INSERT INTO entries (id, message) VALUES (?1, ?2)")?
        .execute(params![id as i64, message])
        .map(drop)
}

fn read(conn: &Connection) -> Result<Recovered, rusqlite::Error> {
    let mut stmt = conn.prepare("SELECT id, sequence, message FROM entries ORDER BY id")?;
    let entries = stmt
        .query_map([], |row| {
            Ok(JournalEntry {
                id: row.get::<_, i64>(0)? as u64,
                sequence: row.get::<_, Option<i64>>(1)?.map(|s| s as u64),
                message: row.get(2)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let reserved: Option<i64> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'sequence_reserved'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    let sent = entries.iter().filter_map(|e| e.sequence).max().unwrap_or(0);
    Ok(Recovered {
        entries,
        sequence_floor: (reserved.unwrap_or(0) as u64).max(sent),
    })
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
        journal.append(a, b"a".to_vec()).await.unwrap();
        journal.append(b, b"b".to_vec()).await.unwrap();
        assert!(journal.append_detached(c, b"c".to_vec()));
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
                message: b"b".to_vec()
            }]
        );
        assert_eq!(recovered.sequence_floor, 8, "a sent sequence is used");
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
