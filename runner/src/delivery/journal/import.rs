//! Reads the SQLite journal (`journal.db`) that runners before the log file
//! kept, so an upgrade sends what the old runner left unsettled and keeps
//! its sequence numbers above the old ones. Read once at start-up; the new
//! log is written (and synced) before the old files are removed.

use std::path::Path;

use rusqlite::{Connection, OpenFlags, OptionalExtension};

use super::log::{Record, State};

/// The old journal's file name under the state directory.
pub const OLD_FILE: &str = "journal.db";

/// Replays `<dir>/journal.db` into `state`; false when there is none.
pub fn import(dir: &Path, state: &mut State) -> rusqlite::Result<bool> {
    let path = dir.join(OLD_FILE);
    if !path.exists() {
        return Ok(false);
    }
    let conn = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
    let has_entries: Option<String> = conn
        .query_row(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'entries'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    if has_entries.is_some() {
        let mut stmt = conn.prepare("SELECT id, sequence, message FROM entries ORDER BY id")?;
        let rows = stmt.query_map([], |row| {
            Ok((
                row.get::<_, i64>(0)? as u64,
                row.get::<_, Option<i64>>(1)?.map(|s| s as u64),
                row.get::<_, Vec<u8>>(2)?,
            ))
        })?;
        for row in rows {
            let (id, sequence, message) = row?;
            state.insert(id, message.into());
            if let Some(seq) = sequence {
                state.apply(&Record::Mark(vec![(id, seq)]));
            }
        }
        // Ids of forgotten entries were used too.
        let used: Option<i64> = conn
            .query_row(
                "SELECT seq FROM sqlite_sequence WHERE name = 'entries'",
                [],
                |r| r.get(0),
            )
            .optional()?;
        state.max_id = state.max_id.max(used.unwrap_or(0) as u64);
    }
    let has_meta: Option<String> = conn
        .query_row(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    if has_meta.is_some() {
        let reserved: Option<i64> = conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'sequence_reserved'",
                [],
                |r| r.get(0),
            )
            .optional()?;
        state.apply(&Record::Reserve(reserved.unwrap_or(0) as u64));
    }
    Ok(true)
}

/// Removes the old journal's files (once the log holds what they held).
pub fn remove_old(dir: &Path) -> std::io::Result<()> {
    for name in [OLD_FILE, "journal.db-wal", "journal.db-shm"] {
        match std::fs::remove_file(dir.join(name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_sqlite_journal_is_carried_over() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join(OLD_FILE)).unwrap();
        conn.execute_batch(
            "CREATE TABLE entries (id INTEGER PRIMARY KEY AUTOINCREMENT, sequence INTEGER, message BLOB NOT NULL);
             CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
             INSERT INTO entries (id, sequence, message) VALUES (3, 40, x'61'), (4, NULL, x'62'), (9, NULL, x'63');
             DELETE FROM entries WHERE id = 9;
             INSERT INTO meta VALUES ('sequence_reserved', 4096);",
        )
        .unwrap();
        drop(conn);
        let mut state = State::default();
        assert!(import(dir.path(), &mut state).unwrap());
        let got: Vec<_> = state
            .entries
            .iter()
            .map(|(id, l)| (id, l.sequence, l.message.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (3, Some(40), bytes::Bytes::from_static(b"a")),
                (4, None, bytes::Bytes::from_static(b"b"))
            ]
        );
        assert_eq!((state.max_id, state.reserved), (9, 4096));
        remove_old(dir.path()).unwrap();
        assert!(!import(dir.path(), &mut State::default()).unwrap());
    }
}
