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
//! blocks ahead of use, so handing one out costs no disk write; after a crash
//! numbering resumes above the last reservation (a gap the control plane can
//! see, only after its last acknowledgement). A journaled update's number is
//! recorded (`mark_sent`) before it goes on the wire, so a re-send after a
//! crash reuses it and the control plane drops it as already processed.
//!
//! Its own database file (`journal.db` beside `state.db`), written only by
//! its [`StoreThread`] in group commits: a burst of updates costs one commit.

use std::path::Path;

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
        let store = StoreThread::start("outbox-journal", conn)?;
        Ok((Self { store }, recovered))
    }

    /// Journals `message` (an encoded `ClientMessage`); returns its id once
    /// it is on disk.
    pub async fn append(&self, message: Vec<u8>) -> Result<u64, JournalError> {
        let id = self
            .store
            .run(move |tx| {
                tx.execute("INSERT INTO entries (message) VALUES (?1)", [message])?;
                Ok(tx.last_insert_rowid())
            })
            .await?;
        Ok(id as u64)
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

    /// Forgets the given entries (sent to a control plane without
    /// acknowledgements). Not awaited to disk: a crash before it lands only
    /// sends them again (at least once).
    pub async fn forget(&self, ids: Vec<u64>) -> Result<(), JournalError> {
        if ids.is_empty() {
            return Ok(());
        }
        self.store
            .submit(move |tx| {
                let mut stmt = tx.prepare_cached("DELETE FROM entries WHERE id = ?1")?;
                for id in ids {
                    stmt.execute([id as i64])?;
                }
                Ok(())
            })
            .await?;
        Ok(())
    }

    /// Forgets every entry sent with a sequence number at or below
    /// `acked` (the control plane processed them).
    pub async fn forget_through(&self, acked: u64) -> Result<(), JournalError> {
        self.store
            .submit(move |tx| {
                tx.execute(
                    "DELETE FROM entries WHERE sequence IS NOT NULL AND sequence <= ?1",
                    [acked as i64],
                )
                .map(drop)
            })
            .await?;
        Ok(())
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
/// restarts, reserving a block on disk before the current one runs out.
pub struct Sequencer {
    journal: Journal,
    next: u64,
    reserved: u64,
}

impl Sequencer {
    /// Continues above `floor` (see [`Recovered::sequence_floor`]).
    pub fn new(journal: Journal, floor: u64) -> Self {
        Self {
            journal,
            next: floor + 1,
            reserved: floor,
        }
    }

    /// The next `n` numbers (a contiguous run starting at the returned one).
    pub async fn take(&mut self, n: u64) -> Result<u64, JournalError> {
        let first = self.next;
        let last = first + n.saturating_sub(1);
        if last > self.reserved {
            let through = last + SEQUENCE_BLOCK;
            self.journal.reserve_through(through).await?;
            self.reserved = through;
        }
        self.next = last + 1;
        Ok(first)
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
        let a = journal.append(b"a".to_vec()).await.unwrap();
        let b = journal.append(b"b".to_vec()).await.unwrap();
        let c = journal.append(b"c".to_vec()).await.unwrap();
        journal.mark_sent(vec![(a, 7), (b, 8)]).await.unwrap();
        journal.forget_through(7).await.unwrap();
        journal.forget(vec![c]).await.unwrap();
        journal.flush().await.unwrap();
        drop(journal);

        let (_journal, recovered) = Journal::open(dir.path()).unwrap();
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
        let mut seq = Sequencer::new(journal.clone(), recovered.sequence_floor);
        assert_eq!(seq.take(1).await.unwrap(), 1);
        assert_eq!(seq.take(3).await.unwrap(), 2);
        assert_eq!(seq.last(), 4);
        // A crash: nothing but the reservation is known.
        drop(seq);
        drop(journal);
        let (journal, recovered) = Journal::open(dir.path()).unwrap();
        assert!(recovered.sequence_floor >= 4);
        let mut seq = Sequencer::new(journal, recovered.sequence_floor);
        let next = seq.take(SEQUENCE_BLOCK * 2).await.unwrap();
        assert!(next > 4, "{next}");
        assert_eq!(seq.last(), next + SEQUENCE_BLOCK * 2 - 1);
    }
}
