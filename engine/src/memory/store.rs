//! One session's memories in SQLite: a `memories` table and an FTS5 index
//! (`memories_fts`) over content and tags, written in one transaction. A
//! FILE session's store is a file under the state dir; a MEMORY session's
//! is an in-memory database that dies with the engine. Calls block: the
//! async side runs them in `spawn_blocking`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use code_agent_proto::{MemoryItem, MemoryStats, MemoryType};
use rusqlite::{Connection, OptionalExtension, params};

use super::rank::{self, Candidate};

/// Memories one session may hold; storing more is refused.
pub const MAX_MEMORIES: usize = 10_000;
/// Bytes of content one memory may hold.
pub const MAX_CONTENT: usize = 64 * 1024;
/// Results one search returns at most (and by default, 10).
pub const MAX_LIMIT: u32 = 100;
const DEFAULT_LIMIT: u32 = 10;
/// `recent_only` keeps memories created within this many milliseconds.
pub const RECENT_MS: i64 = 24 * 60 * 60 * 1000;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS memories (
    n INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    content TEXT NOT NULL,
    timestamp INTEGER NOT NULL,
    importance REAL NOT NULL,
    tags TEXT NOT NULL,
    memory_type INTEGER NOT NULL,
    metadata TEXT NOT NULL,
    access_count INTEGER NOT NULL DEFAULT 0,
    last_accessed INTEGER
);
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(id UNINDEXED, content, tags);
";

/// What a search asks for (already validated).
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// Full-text words; empty = no text condition.
    pub text: Option<String>,
    /// The memory must carry every one of these tags.
    pub tags: Vec<String>,
    /// Keep only memories this important or more.
    pub min_importance: Option<f32>,
    /// Keep only memories created in the last [`RECENT_MS`].
    pub recent_only: bool,
    /// Results at most (0 = 10, capped at [`MAX_LIMIT`]).
    pub limit: u32,
}

/// A store failure (the text says what failed).
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// SQLite refused.
    #[error("memory store: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The session holds [`MAX_MEMORIES`] already.
    #[error("memory store: this session already holds {MAX_MEMORIES} memories; clear some first")]
    Full,
    /// A stored row does not decode.
    #[error("memory store: a stored row is corrupt: {0}")]
    Corrupt(String),
}

/// One session's memory store.
pub struct MemoryStore {
    conn: Mutex<Connection>,
    file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

impl MemoryStore {
    /// Opens (creating) the store in `path`.
    pub fn open(path: &Path) -> Result<Self, MemoryError> {
        Self::init(Connection::open(path)?, Some(path.to_path_buf()))
    }

    /// A store that lives in memory only.
    pub fn in_memory() -> Result<Self, MemoryError> {
        Self::init(Connection::open_in_memory()?, None)
    }

    fn init(conn: Connection, file: Option<std::path::PathBuf>) -> Result<Self, MemoryError> {
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        if file.is_some() {
            // One fsync per checkpoint rather than per write; a crash loses
            // at most the last writes, never the database.
            conn.pragma_update(None, "journal_mode", "WAL")?;
            conn.pragma_update(None, "synchronous", "NORMAL")?;
        }
        conn.execute_batch(SCHEMA)?;
        Ok(Self {
            conn: Mutex::new(conn),
            file,
        })
    }

    /// Whether this store is a file (a FILE session's).
    pub fn is_file(&self) -> bool {
        self.file.is_some()
    }

    /// A copy of this store written to the new file `path`, opened.
    pub fn copy_to_file(&self, path: &Path) -> Result<MemoryStore, MemoryError> {
        let text = path
            .to_str()
            .ok_or_else(|| MemoryError::Corrupt(format!("{} is not UTF-8", path.display())))?;
        self.conn().execute("VACUUM INTO ?1", [text])?;
        Self::open(path)
    }

    /// A copy of this store in memory.
    pub fn copy_to_memory(&self) -> Result<MemoryStore, MemoryError> {
        let copy = Self::in_memory()?;
        {
            let source = self.conn();
            let mut rows = source.prepare(&format!("SELECT {COLUMNS} FROM memories"))?;
            let items = rows.query_map([], row_item)?;
            for item in items {
                copy.store(&item??)?;
            }
        }
        Ok(copy)
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores (or replaces, same id) a memory; its id.
    pub fn store(&self, item: &MemoryItem) -> Result<String, MemoryError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        // The FTS row shares the memory's `n` as its rowid.
        let old: Option<i64> = tx
            .query_row("SELECT n FROM memories WHERE id = ?1", [&item.id], |r| {
                r.get(0)
            })
            .optional()?;
        if let Some(n) = old {
            tx.execute("DELETE FROM memories_fts WHERE rowid = ?1", [n])?;
            tx.execute("DELETE FROM memories WHERE n = ?1", [n])?;
        } else {
            let count: i64 = tx.query_row("SELECT COUNT(*) FROM memories", [], |r| r.get(0))?;
            if count as usize >= MAX_MEMORIES {
                return Err(MemoryError::Full);
            }
        }
        let tags = serde_json::to_string(&item.tags).unwrap_or_else(|_| "[]".into());
        let metadata = serde_json::to_string(&item.metadata).unwrap_or_else(|_| "{}".into());
        tx.execute(
            "INSERT INTO memories
             (id, content, timestamp, importance, tags, memory_type, metadata, access_count, last_accessed)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                item.id,
                item.content,
                item.timestamp,
                f64::from(item.importance),
                tags,
                item.memory_type,
                metadata,
                item.access_count,
                item.last_accessed
            ],
        )?;
        let n = tx.last_insert_rowid();
        tx.execute(
            "INSERT INTO memories_fts (rowid, id, content, tags) VALUES (?1, ?2, ?3, ?4)",
            params![n, item.id, item.content, item.tags.join(" ")],
        )?;
        tx.commit()?;
        Ok(item.id.clone())
    }

    /// The memory `id`, counting this access; `None` when unknown.
    pub fn retrieve(&self, id: &str, now_ms: i64) -> Result<Option<MemoryItem>, MemoryError> {
        let conn = self.conn();
        let changed = conn.execute(
            "UPDATE memories SET access_count = access_count + 1, last_accessed = ?2 WHERE id = ?1",
            params![id, now_ms],
        )?;
        if changed == 0 {
            return Ok(None);
        }
        let item = conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM memories WHERE id = ?1"),
                [id],
                row_item,
            )
            .optional()?;
        item.transpose()
    }

    /// The memories matching `query`, best first, and how many matched in all.
    pub fn search(
        &self,
        query: &Query,
        now_ms: i64,
    ) -> Result<(Vec<MemoryItem>, u32), MemoryError> {
        let conn = self.conn();
        // Phase 1: filter and rank on the few columns ranking needs.
        let min_importance = query.min_importance.map_or(f64::NEG_INFINITY, f64::from);
        let since = if query.recent_only {
            now_ms - RECENT_MS
        } else {
            i64::MIN
        };
        let light = |r: &rusqlite::Row<'_>, bm25: Option<f64>| -> rusqlite::Result<Candidate> {
            let tags: String = r.get(3)?;
            Ok(Candidate {
                item: MemoryItem {
                    id: r.get(0)?,
                    timestamp: r.get(1)?,
                    importance: r.get::<_, f64>(2)? as f32,
                    tags: if query.tags.is_empty() {
                        Vec::new()
                    } else {
                        serde_json::from_str(&tags).unwrap_or_default()
                    },
                    ..Default::default()
                },
                bm25,
            })
        };
        let mut candidates: Vec<Candidate> = Vec::new();
        let match_expr = query.text.as_deref().and_then(rank::match_expression);
        match (&query.text, match_expr) {
            (Some(_), None) => {} // no searchable word: nothing can match
            (Some(_), Some(expr)) => {
                let mut stmt = conn.prepare_cached(
                    "SELECT m.id, m.timestamp, m.importance, m.tags, bm25(memories_fts)
                     FROM memories_fts f JOIN memories m ON m.n = f.rowid
                     WHERE memories_fts MATCH ?1 AND m.importance >= ?2 AND m.timestamp >= ?3",
                )?;
                let rows = stmt.query_map(params![expr, min_importance, since], |r| {
                    light(r, Some(r.get(4)?))
                })?;
                for row in rows {
                    candidates.push(row?);
                }
            }
            (None, _) => {
                let mut stmt = conn.prepare_cached(
                    "SELECT id, timestamp, importance, tags FROM memories
                     WHERE importance >= ?1 AND timestamp >= ?2",
                )?;
                let rows = stmt.query_map(params![min_importance, since], |r| light(r, None))?;
                for row in rows {
                    candidates.push(row?);
                }
            }
        }
        candidates.retain(|c| query.tags.iter().all(|t| c.item.tags.contains(t)));
        let total = candidates.len() as u32;
        let limit = match query.limit {
            0 => DEFAULT_LIMIT,
            n => n.min(MAX_LIMIT),
        };
        // Phase 2: the whole rows of the best `limit`, in rank order.
        let mut stmt =
            conn.prepare_cached(&format!("SELECT {COLUMNS} FROM memories WHERE id = ?1"))?;
        let mut items = Vec::new();
        for best in rank::rank(candidates, now_ms, limit as usize) {
            if let Some(item) = stmt.query_row([&best.id], row_item).optional()? {
                items.push(item?);
            }
        }
        Ok((items, total))
    }

    /// Counts per tier.
    pub fn stats(&self) -> Result<MemoryStats, MemoryError> {
        let conn = self.conn();
        let mut stats = MemoryStats::default();
        let mut stmt =
            conn.prepare("SELECT memory_type, COUNT(*) FROM memories GROUP BY memory_type")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, i32>(0)?, r.get::<_, i64>(1)?)))?;
        for row in rows {
            let (kind, count) = row?;
            let count = count as u64;
            match Tier::of(kind) {
                Tier::LongTerm => stats.long_term_count += count,
                Tier::ShortTerm => stats.short_term_count += count,
                Tier::Working => stats.working_count += count,
            }
        }
        Ok(stats)
    }

    /// Deletes every memory of the given tiers; how many went.
    pub fn clear(&self, tiers: &[Tier]) -> Result<u64, MemoryError> {
        let types: Vec<i32> = tiers
            .iter()
            .flat_map(|t| t.types())
            .map(|t| t as i32)
            .collect();
        if types.is_empty() {
            return Ok(0);
        }
        let list = types
            .iter()
            .map(i32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            &format!("DELETE FROM memories_fts WHERE rowid IN (SELECT n FROM memories WHERE memory_type IN ({list}))"),
            [],
        )?;
        let cleared = tx.execute(
            &format!("DELETE FROM memories WHERE memory_type IN ({list})"),
            [],
        )?;
        tx.commit()?;
        Ok(cleared as u64)
    }
}

/// The three counters of the proto's `MemoryStats`, and which memory types each covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// Semantic (facts) and procedural (how-to) memories.
    LongTerm,
    /// Episodic memories (what happened).
    ShortTerm,
    /// Working memories (the task at hand).
    Working,
}

impl Tier {
    fn of(memory_type: i32) -> Tier {
        match MemoryType::try_from(memory_type) {
            Ok(MemoryType::Semantic | MemoryType::Procedural) => Tier::LongTerm,
            Ok(MemoryType::Working) => Tier::Working,
            _ => Tier::ShortTerm,
        }
    }

    fn types(self) -> Vec<MemoryType> {
        match self {
            Tier::LongTerm => vec![MemoryType::Semantic, MemoryType::Procedural],
            Tier::ShortTerm => vec![MemoryType::Episodic, MemoryType::Unknown],
            Tier::Working => vec![MemoryType::Working],
        }
    }
}

const COLUMNS: &str =
    "id, content, timestamp, importance, tags, memory_type, metadata, access_count, last_accessed";

type RowItem = Result<MemoryItem, MemoryError>;

fn row_item(r: &rusqlite::Row<'_>) -> rusqlite::Result<RowItem> {
    let tags: String = r.get(4)?;
    let metadata: String = r.get(6)?;
    let decoded = (|| {
        let tags: Vec<String> =
            serde_json::from_str(&tags).map_err(|e| MemoryError::Corrupt(format!("tags: {e}")))?;
        let metadata: HashMap<String, String> = serde_json::from_str(&metadata)
            .map_err(|e| MemoryError::Corrupt(format!("metadata: {e}")))?;
        Ok((tags, metadata))
    })();
    let (id, content, timestamp, importance, memory_type, access_count, last_accessed) = (
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get::<_, f64>(3)?,
        r.get(5)?,
        r.get(7)?,
        r.get(8)?,
    );
    Ok(decoded.map(|(tags, metadata)| MemoryItem {
        id,
        content,
        timestamp,
        importance: importance as f32,
        tags,
        memory_type,
        metadata,
        access_count,
        last_accessed,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search(store: &MemoryStore, text: &str) -> Vec<String> {
        let query = Query {
            text: Some(text.into()),
            ..Default::default()
        };
        let (items, _) = store.search(&query, 0).unwrap();
        items.into_iter().map(|m| m.content).collect()
    }

    #[test]
    fn replacing_a_memory_replaces_its_index_entry() {
        let store = MemoryStore::in_memory().unwrap();
        let mut item = MemoryItem {
            id: "a".into(),
            content: "alpha".into(),
            memory_type: MemoryType::Semantic as i32,
            ..Default::default()
        };
        store.store(&item).unwrap();
        item.content = "beta".into();
        store.store(&item).unwrap();
        assert!(search(&store, "alpha").is_empty());
        assert_eq!(search(&store, "beta"), vec!["beta".to_string()]);
        assert_eq!(store.stats().unwrap().long_term_count, 1);
    }

    #[test]
    fn a_file_store_copies_to_memory_and_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = MemoryStore::in_memory().unwrap();
        for (id, content) in [("a", "first note"), ("b", "second note")] {
            store
                .store(&MemoryItem {
                    id: id.into(),
                    content: content.into(),
                    ..Default::default()
                })
                .unwrap();
        }
        let file = store.copy_to_file(&dir.path().join("m.sqlite3")).unwrap();
        assert!(file.is_file());
        assert_eq!(search(&file, "second"), vec!["second note".to_string()]);
        let back = file.copy_to_memory().unwrap();
        assert!(!back.is_file());
        assert_eq!(search(&back, "note").len(), 2);
        assert_eq!(search(&back, "first"), vec!["first note".to_string()]);
    }
}
