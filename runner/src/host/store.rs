//! Durable state: what must survive a restart (SIGKILL included).
//!
//! One SQLite database, `state.db` under `--state-dir`, in WAL mode: agents,
//! threads (with the SDK's own ids, model, reasoning level and the control
//! plane's additional instructions), the turn each thread has running, and
//! the approval requests waiting for a decision.
//! A database written by an older runner is migrated when opened (columns
//! added since are added, empty). Statements are tiny and run on the calling task
//! behind a mutex; each is a single row write, well under a millisecond.
//! The per-turn bookkeeping (a turn started, a turn ended: two writes per
//! turn, the only writes whose count grows with the load) runs instead on a
//! store thread of its own connection ([`StoreThread`]), off the async
//! workers, in group commits: turns ending together share one commit.
//! A lock file keeps two runners off one state dir.

use std::fs::File;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension, params};

use crate::host::store_thread::{StoreThread, StoreThreadError};

/// How long a connection waits for the other's write (the mutex's and the
/// store thread's connections share the file).
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why the state store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A statement failed.
    #[error("state database: {0}")]
    Sql(#[from] rusqlite::Error),
    /// The state dir could not be used.
    #[error("state dir: {0}")]
    Io(#[from] std::io::Error),
    /// A thread with this id exists already (of this agent).
    #[error("thread {0} exists already (agent {1})")]
    Taken(String, String),
    /// Another runner holds the state dir.
    #[error("state dir {0} is in use by another runner")]
    Locked(String),
    /// A write on the store thread.
    #[error("state database: {0}")]
    Thread(#[from] StoreThreadError),
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
    /// The control plane's additional model instructions, if any.
    pub instructions: Option<String>,
    /// Protocol 0.7's `cli_secret`: the thread's token for the control
    /// plane's agent API (a secret: only here, in the state dir).
    pub agent_api_token: Option<String>,
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

/// The held lock of a state dir (see [`Store::lock`]).
#[derive(Debug)]
pub struct StateLock(File);

/// The state store (see the module doc).
pub struct Store {
    conn: Mutex<Connection>,
    /// The per-turn writes, in group commits.
    turns: StoreThread,
    _lock: File,
}

impl Store {
    /// Opens (or creates) the store in `dir`, taking its lock.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let lock = Self::lock(dir)?;
        Self::open_locked(dir, lock)
    }

    /// Takes the state dir's lock (creating the dir): one runner per state
    /// dir. Whatever else lives in the dir (the journal) is opened only
    /// after this, possibly while [`Store::open_locked`] runs.
    pub fn lock(dir: &Path) -> Result<StateLock, StoreError> {
        std::fs::create_dir_all(dir)?;
        let lock = File::create(dir.join("state.lock"))?;
        // A predecessor killed a moment ago can leave the lock held for a
        // moment more: a child it forked shares the descriptor until its
        // exec closes it. A runner that is really there holds it for good.
        let deadline = std::time::Instant::now() + LOCK_PATIENCE;
        while lock_exclusive(&lock).is_err() {
            if std::time::Instant::now() >= deadline {
                return Err(StoreError::Locked(dir.display().to_string()));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Ok(StateLock(lock))
    }

    /// Opens (or creates) the store in `dir`, whose lock is held.
    pub fn open_locked(dir: &Path, lock: StateLock) -> Result<Self, StoreError> {
        let lock = lock.0;
        let conn = Connection::open(dir.join("state.db"))?;
        // The schema is written without waiting for the disk: a new
        // database is switched to WAL and its tables are created under
        // `synchronous = OFF`, so a first start registers without waiting
        // for an `fsync` (two, of the new write-ahead log's header and of
        // its directory entry: 0.5–1 ms each on this machine's disk, more
        // while it writes back a burst). Nothing is lost by it: the schema
        // is re-created by these same statements at every start, and the
        // skipped syncs happen at the first checkpoint, which syncs the log
        // before anything of it counts as durable. An existing database is
        // in WAL already and these statements write nothing to it. Every
        // commit after them is `NORMAL`, a migration's too.
        conn.execute_batch(
            "PRAGMA synchronous = OFF;
             PRAGMA journal_mode = WAL;
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
                 last_turn_id TEXT,
                 instructions TEXT,
                 agent_api_token TEXT
             );
             CREATE TABLE IF NOT EXISTS running_turns (
                 thread_id TEXT PRIMARY KEY REFERENCES threads(thread_id) ON DELETE CASCADE,
                 sdk_turn_id TEXT NOT NULL,
                 request_id TEXT
             );
             CREATE TABLE IF NOT EXISTS waiting_approvals (
                 approval_id TEXT PRIMARY KEY,
                 thread_id TEXT NOT NULL,
                 request_id TEXT
             );",
        )?;
        conn.execute_batch("PRAGMA synchronous = NORMAL;")?;
        migrate(&conn)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        let turns_conn = Connection::open(dir.join("state.db"))?;
        turns_conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")?;
        turns_conn.busy_timeout(BUSY_TIMEOUT)?;
        Ok(Self {
            conn: Mutex::new(conn),
            turns: StoreThread::start("state-store", turns_conn)?,
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
            "SELECT thread_id, agent_id, sdk_thread_id, model, reasoning_level, last_turn_id,
                    instructions, agent_api_token
             FROM threads ORDER BY agent_id, thread_id",
        )?;
        let rows = stmt.query_map([], thread_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// One thread, if stored.
    pub fn thread(&self, thread_id: &str) -> Result<Option<ThreadRow>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT thread_id, agent_id, sdk_thread_id, model, reasoning_level, last_turn_id,
                        instructions, agent_api_token
                 FROM threads WHERE thread_id = ?1",
                [thread_id],
                thread_row,
            )
            .optional()?)
    }

    /// Stores (or replaces) a thread.
    pub fn put_thread(&self, row: &ThreadRow) -> Result<(), StoreError> {
        write_thread(&self.conn(), "INSERT OR REPLACE", row)
    }

    /// Stores a new thread; fails, naming the owner, when a thread with its
    /// id exists already (two agents choosing the same id at once).
    pub fn insert_thread(&self, row: &ThreadRow) -> Result<(), StoreError> {
        let conn = self.conn();
        let owner: Option<String> = conn
            .query_row(
                "SELECT agent_id FROM threads WHERE thread_id = ?1",
                [&row.thread_id],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(owner) = owner {
            return Err(StoreError::Taken(row.thread_id.clone(), owner));
        }
        // Still under the connection's lock: nobody inserted meanwhile.
        write_thread(&conn, "INSERT", row)
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

    /// [`Store::start_turn`] on the store thread: returns once committed
    /// (sharing the commit with the turn writes queued meanwhile).
    pub async fn record_turn_start(&self, turn: RunningTurnRow) -> Result<(), StoreError> {
        self.turns
            .run(move |c| {
                c.prepare_cached(
                    "INSERT OR REPLACE INTO running_turns (thread_id, sdk_turn_id, request_id)
                     VALUES (?1, ?2, ?3)",
                )?
                .execute(params![turn.thread_id, turn.sdk_turn_id, turn.request_id])
                .map(drop)
            })
            .await?;
        Ok(())
    }

    /// [`Store::finish_turn`] on the store thread: returns once committed.
    pub async fn record_turn_end(
        &self,
        thread_id: String,
        sdk_turn_id: String,
    ) -> Result<(), StoreError> {
        self.turns
            .run(move |c| {
                c.prepare_cached("DELETE FROM running_turns WHERE thread_id = ?1")?
                    .execute([&thread_id])?;
                c.prepare_cached("UPDATE threads SET last_turn_id = ?2 WHERE thread_id = ?1")?
                    .execute([&thread_id, &sdk_turn_id])
                    .map(drop)
            })
            .await?;
        Ok(())
    }

    /// An approval request of `thread_id` (sent with `request_id`) waits
    /// for a decision: a restart reports it ended. On the store thread;
    /// returns once committed.
    pub async fn record_approval_wait(
        &self,
        approval_id: String,
        thread_id: String,
        request_id: Option<String>,
    ) -> Result<(), StoreError> {
        self.turns
            .run(move |c| {
                c.prepare_cached(
                    "INSERT OR REPLACE INTO waiting_approvals (approval_id, thread_id, request_id)
                     VALUES (?1, ?2, ?3)",
                )?
                .execute(params![approval_id, thread_id, request_id])
                .map(drop)
            })
            .await?;
        Ok(())
    }

    /// The approval request `approval_id` was resolved.
    pub async fn record_approval_end(&self, approval_id: String) -> Result<(), StoreError> {
        self.turns
            .run(move |c| {
                c.prepare_cached("DELETE FROM waiting_approvals WHERE approval_id = ?1")?
                    .execute([&approval_id])
                    .map(drop)
            })
            .await?;
        Ok(())
    }

    /// Every approval request recorded as waiting: (approval id, thread id,
    /// request id).
    pub fn waiting_approvals(&self) -> Result<Vec<(String, String, Option<String>)>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT approval_id, thread_id, request_id FROM waiting_approvals ORDER BY approval_id",
        )?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Forgets the approval request `approval_id` (reported ended).
    pub fn forget_approval(&self, approval_id: &str) -> Result<(), StoreError> {
        self.conn()
            .execute(
                "DELETE FROM waiting_approvals WHERE approval_id = ?1",
                [approval_id],
            )
            .map(drop)?;
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

/// Writes `row` with `verb` (`INSERT`: fails on an existing id; `INSERT OR
/// REPLACE`: overwrites it).
fn write_thread(conn: &Connection, verb: &str, row: &ThreadRow) -> Result<(), StoreError> {
    conn.prepare_cached(&format!(
        "{verb} INTO threads
         (thread_id, agent_id, sdk_thread_id, model, reasoning_level, last_turn_id,
          instructions, agent_api_token)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
    ))?
    .execute(params![
        row.thread_id,
        row.agent_id,
        row.sdk_thread_id,
        row.model,
        row.reasoning_level,
        row.last_turn_id,
        row.instructions,
        row.agent_api_token
    ])?;
    Ok(())
}

fn thread_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ThreadRow> {
    Ok(ThreadRow {
        thread_id: r.get(0)?,
        agent_id: r.get(1)?,
        sdk_thread_id: r.get(2)?,
        model: r.get(3)?,
        reasoning_level: r.get(4)?,
        last_turn_id: r.get(5)?,
        instructions: r.get(6)?,
        agent_api_token: r.get(7)?,
    })
}

/// Columns added after the first release, with the statement that adds each
/// to a database written before it existed.
const ADDED_COLUMNS: &[(&str, &str, &str)] = &[
    (
        "threads",
        "instructions",
        "ALTER TABLE threads ADD COLUMN instructions TEXT",
    ),
    (
        "threads",
        "agent_api_token",
        "ALTER TABLE threads ADD COLUMN agent_api_token TEXT",
    ),
];

/// Brings a database written by an older runner up to date.
fn migrate(conn: &Connection) -> Result<(), StoreError> {
    for (table, column, add) in ADDED_COLUMNS {
        let mut stmt = conn.prepare(&format!("PRAGMA table_info({table})"))?;
        let names = stmt.query_map([], |r| r.get::<_, String>(1))?;
        let mut present = false;
        for name in names {
            present |= name? == *column;
        }
        if !present {
            conn.execute_batch(add)?;
            tracing::info!(table, column, "state database migrated: column added");
        }
    }
    Ok(())
}

/// How long [`Store::lock`] waits for a lock held by someone else.
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

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

    /// `.cargo/config.toml` builds SQLite without its lookaside allocator
    /// (48 KB per connection, resident once used): a connection
    /// that has run statements has used none.
    /// The schema is created under `synchronous = OFF` (no `fsync` before
    /// the first registration); every commit after it must be `NORMAL`
    /// again, on both connections, or a power loss could corrupt the file.
    #[test]
    fn commits_after_opening_are_normal() {
        let dir = tempfile::tempdir().unwrap();
        for _ in 0..2 {
            // A new database, then the same one reopened.
            let s = Store::open(dir.path()).unwrap();
            let synchronous: i64 = s
                .conn()
                .query_row("PRAGMA synchronous", [], |r| r.get(0))
                .unwrap();
            assert_eq!(synchronous, 1, "NORMAL on the store's connection");
            let mode: String = s
                .conn()
                .query_row("PRAGMA journal_mode", [], |r| r.get(0))
                .unwrap();
            assert_eq!(mode, "wal");
        }
    }

    #[test]
    fn sqlite_is_built_without_lookaside() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        s.threads().unwrap();
        let conn = s.conn();
        let (mut current, mut highwater) = (0, 0);
        // SAFETY: a live connection's handle, two out-pointers to ints.
        let rc = unsafe {
            rusqlite::ffi::sqlite3_db_status(
                conn.handle(),
                rusqlite::ffi::SQLITE_DBSTATUS_LOOKASIDE_USED,
                &mut current,
                &mut highwater,
                0,
            )
        };
        assert_eq!(rc, rusqlite::ffi::SQLITE_OK);
        assert_eq!((current, highwater), (0, 0), "lookaside slots in use");
    }

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
                instructions: Some("be brief".into()),
                agent_api_token: Some("cli-secret-of-t".into()),
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
        let t = s.thread("t").unwrap().unwrap();
        assert_eq!(t.instructions.as_deref(), Some("be brief"));
        assert_eq!(t.agent_api_token.as_deref(), Some("cli-secret-of-t"));
        assert!(s.thread("nope").unwrap().is_none());
        s.delete_agent("a").unwrap();
        assert!(s.threads().unwrap().is_empty());
    }

    /// A database of a runner from before the `instructions` column opens,
    /// keeps its rows, and stores instructions from then on.
    #[test]
    fn an_older_database_is_migrated() {
        let dir = tempfile::tempdir().unwrap();
        {
            let conn = Connection::open(dir.path().join("state.db")).unwrap();
            conn.execute_batch(
                "CREATE TABLE agents (agent_id TEXT PRIMARY KEY, sdk TEXT NOT NULL);
                 CREATE TABLE threads (
                     thread_id TEXT PRIMARY KEY,
                     agent_id TEXT NOT NULL REFERENCES agents(agent_id) ON DELETE CASCADE,
                     sdk_thread_id TEXT NOT NULL,
                     model TEXT NOT NULL,
                     reasoning_level TEXT,
                     last_turn_id TEXT
                 );
                 INSERT INTO agents VALUES ('a', 'scripted');
                 INSERT INTO threads VALUES ('old', 'a', 's', 'm', NULL, 'u0');",
            )
            .unwrap();
        }
        let s = Store::open(dir.path()).unwrap();
        let old = s.thread("old").unwrap().unwrap();
        assert_eq!(old.last_turn_id.as_deref(), Some("u0"));
        assert_eq!(old.instructions, None);
        assert_eq!(old.agent_api_token, None);
        s.put_thread(&ThreadRow {
            thread_id: "new".into(),
            instructions: Some("x".into()),
            ..old
        })
        .unwrap();
        drop(s);
        let s = Store::open(dir.path()).unwrap();
        assert_eq!(
            s.thread("new").unwrap().unwrap().instructions.as_deref(),
            Some("x")
        );
    }
}
