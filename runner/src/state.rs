//! Durable state: what must survive a restart (SIGKILL included).
//!
//! One SQLite database, `state.db` under `--state-dir`, in WAL mode: agents,
//! threads (with the SDK's own ids, model and reasoning level), and the turn
//! each thread has running. Statements are tiny and run on the calling task
//! behind a mutex; each is a single row write, well under a millisecond.
//! A lock file keeps two runners off one state dir.

use std::fs::File;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension, params};

/// Why the state store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A statement failed.
    #[error("state database: {0}")]
    Sql(#[from] rusqlite::Error),
    /// The state dir could not be used.
    #[error("state dir: {0}")]
    Io(#[from] std::io::Error),
    /// Another runner holds the state dir.
    #[error("state dir {0} is in use by another runner")]
    Locked(String),
}

/// An agent, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentRow {
    /// Its id.
    pub agent_id: String,
    /// Its SDK.
    pub sdk: String,
}

/// A thread, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadRow {
    /// Its id.
    pub thread_id: String,
    /// Its agent.
    pub agent_id: String,
    /// The SDK's id for it.
    pub sdk_thread_id: String,
    /// Its model.
    pub model: String,
    /// Its reasoning level.
    pub reasoning_level: Option<String>,
    /// Its most recent turn, if any.
    pub last_turn_id: Option<String>,
}

/// A turn that was running when its row was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningTurnRow {
    /// Its thread.
    pub thread_id: String,
    /// The SDK's turn id.
    pub sdk_turn_id: String,
    /// The request that started it.
    pub request_id: Option<String>,
}

/// The state store (see the module doc).
pub struct Store {
    conn: Mutex<Connection>,
    _lock: File,
}

impl Store {
    /// Opens (or creates) the store in `dir`, taking its lock.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir)?;
        let lock = File::create(dir.join("state.lock"))?;
        lock_exclusive(&lock).map_err(|_| StoreError::Locked(dir.display().to_string()))?;
        let conn = Connection::open(dir.join("state.db"))?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             PRAGMA foreign_keys = ON;
             CREATE TABLE IF NOT EXISTS agents (
                 agent_id TEXT PRIMARY KEY,
                 sdk TEXT NOT NULL
             );
             CREATE TABLE IF NOT EXISTS threads (
                 thread_id TEXT PRIMARY KEY,
                 agent_id TEXT NOT NULL REFERENCES agents(agent_id) ON DELETE CASCADE,
                 sdk_thread_id TEXT NOT NULL,
                 model TEXT NOT NULL,
                 reasoning_level TEXT,
                 last_turn_id TEXT
             );
             CREATE TABLE IF NOT EXISTS running_turns (
                 thread_id TEXT PRIMARY KEY REFERENCES threads(thread_id) ON DELETE CASCADE,
                 sdk_turn_id TEXT NOT NULL,
                 request_id TEXT
             );",
        )?;
        Ok(Self {
            conn: Mutex::new(conn),
            _lock: lock,
        })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every agent.
    pub fn agents(&self) -> Result<Vec<AgentRow>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT agent_id, sdk FROM agents ORDER BY agent_id")?;
        let rows = stmt.query_map([], |r| {
            Ok(AgentRow {
                agent_id: r.get(0)?,
                sdk: r.get(1)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// One agent, if stored.
    pub fn agent(&self, agent_id: &str) -> Result<Option<AgentRow>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT agent_id, sdk FROM agents WHERE agent_id = ?1",
                [agent_id],
                |r| {
                    Ok(AgentRow {
                        agent_id: r.get(0)?,
                        sdk: r.get(1)?,
                    })
                },
            )
            .optional()?)
    }

    /// Stores (or replaces) an agent.
    pub fn put_agent(&self, row: &AgentRow) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT OR REPLACE INTO agents (agent_id, sdk) VALUES (?1, ?2)",
            params![row.agent_id, row.sdk],
        )?;
        Ok(())
    }

    /// Deletes the agent with its threads and their running turns.
    pub fn delete_agent(&self, agent_id: &str) -> Result<(), StoreError> {
        self.conn()
            .execute("DELETE FROM agents WHERE agent_id = ?1", [agent_id])?;
        Ok(())
    }

    /// Every thread.
    pub fn threads(&self) -> Result<Vec<ThreadRow>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT thread_id, agent_id, sdk_thread_id, model, reasoning_level, last_turn_id
             FROM threads ORDER BY agent_id, thread_id",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(ThreadRow {
                thread_id: r.get(0)?,
                agent_id: r.get(1)?,
                sdk_thread_id: r.get(2)?,
                model: r.get(3)?,
                reasoning_level: r.get(4)?,
                last_turn_id: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Stores (or replaces) a thread.
    pub fn put_thread(&self, row: &ThreadRow) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT OR REPLACE INTO threads
             (thread_id, agent_id, sdk_thread_id, model, reasoning_level, last_turn_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                row.thread_id,
                row.agent_id,
                row.sdk_thread_id,
                row.model,
                row.reasoning_level,
                row.last_turn_id
            ],
        )?;
        Ok(())
    }

    /// Deletes a thread (and its running turn).
    pub fn delete_thread(&self, thread_id: &str) -> Result<(), StoreError> {
        self.conn()
            .execute("DELETE FROM threads WHERE thread_id = ?1", [thread_id])?;
        Ok(())
    }

    // The two statements below run for every turn: cached, so SQLite
    // parses them once per connection, not once per turn.

    /// Records a running turn.
    pub fn start_turn(&self, turn: &RunningTurnRow) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT OR REPLACE INTO running_turns (thread_id, sdk_turn_id, request_id)
                 VALUES (?1, ?2, ?3)",
            )?
            .execute(params![turn.thread_id, turn.sdk_turn_id, turn.request_id])?;
        Ok(())
    }

    /// The turn ended: forget it as running, remember it as the thread's last.
    pub fn finish_turn(&self, thread_id: &str, sdk_turn_id: &str) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.prepare_cached("DELETE FROM running_turns WHERE thread_id = ?1")?
            .execute([thread_id])?;
        tx.prepare_cached("UPDATE threads SET last_turn_id = ?2 WHERE thread_id = ?1")?
            .execute([thread_id, sdk_turn_id])?;
        tx.commit()?;
        Ok(())
    }

    /// Every turn recorded as running.
    pub fn running_turns(&self) -> Result<Vec<RunningTurnRow>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT thread_id, sdk_turn_id, request_id FROM running_turns ORDER BY thread_id",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(RunningTurnRow {
                thread_id: r.get(0)?,
                sdk_turn_id: r.get(1)?,
                request_id: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

fn lock_exclusive(file: &File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor we own; no memory is involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_survive_reopen_and_cascade() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = Store::open(dir.path()).unwrap();
            s.put_agent(&AgentRow {
                agent_id: "a".into(),
                sdk: "scripted".into(),
            })
            .unwrap();
            s.put_thread(&ThreadRow {
                thread_id: "t".into(),
                agent_id: "a".into(),
                sdk_thread_id: "st".into(),
                model: "m".into(),
                reasoning_level: Some("low".into()),
                last_turn_id: None,
            })
            .unwrap();
            s.start_turn(&RunningTurnRow {
                thread_id: "t".into(),
                sdk_turn_id: "u1".into(),
                request_id: Some("r".into()),
            })
            .unwrap();
            assert!(matches!(
                Store::open(dir.path()),
                Err(StoreError::Locked(_))
            ));
        }
        let s = Store::open(dir.path()).unwrap();
        assert_eq!(s.agents().unwrap().len(), 1);
        assert_eq!(s.running_turns().unwrap()[0].sdk_turn_id, "u1");
        s.finish_turn("t", "u1").unwrap();
        assert!(s.running_turns().unwrap().is_empty());
        assert_eq!(s.threads().unwrap()[0].last_turn_id.as_deref(), Some("u1"));
        s.delete_agent("a").unwrap();
        assert!(s.threads().unwrap().is_empty());
    }
}
