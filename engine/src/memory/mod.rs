//! Memory: per-session memories in the proto's four types
//! (episodic, semantic, procedural, working), stored in SQLite with an FTS5
//! index ([`store`]), searched and ranked ([`rank`]), reached through the
//! Memory RPCs and the `memory_store` / `memory_search` tools ([`tool`]).
//!
//! FILE sessions keep theirs in `<state-dir>/memory/<session-id>.sqlite3`
//! (surviving restarts; deleted with the session); MEMORY sessions (and an
//! engine without a state dir) in an in-memory database.

pub mod input;
pub mod rank;
pub mod store;
pub mod tool;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pub use store::{MemoryError, MemoryStore, Tier};

/// A session's memory, opened only when a tool first uses it (so a
/// session whose model never remembers anything gets no database).
#[derive(Debug)]
pub struct SessionMemory {
    /// The engine's stores.
    pub registry: Arc<MemoryRegistry>,
    /// The session.
    pub session_id: String,
    /// Whether the session is FILE-backed.
    pub file_backed: bool,
}

impl SessionMemory {
    /// The session's store.
    pub fn store(&self) -> Result<Arc<MemoryStore>, MemoryError> {
        self.registry
            .for_session(&self.session_id, self.file_backed)
    }
}

/// The open stores, one per session.
#[derive(Debug)]
pub struct MemoryRegistry {
    dir: Option<PathBuf>,
    open: Mutex<HashMap<String, Arc<MemoryStore>>>,
}

impl MemoryRegistry {
    /// Stores of FILE sessions go under `<state_dir>/memory` (if any).
    pub fn new(state_dir: Option<&std::path::Path>) -> Self {
        Self {
            dir: state_dir.map(|d| d.join("memory")),
            open: Mutex::new(HashMap::new()),
        }
    }

    /// The store of session `id` (`id` already validated), opened on first
    /// use: a file when `file_backed` and there is a state dir, else memory.
    pub fn for_session(
        &self,
        id: &str,
        file_backed: bool,
    ) -> Result<Arc<MemoryStore>, MemoryError> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(store) = open.get(id) {
            return Ok(store.clone());
        }
        let store = match (&self.dir, file_backed) {
            (Some(dir), true) => {
                std::fs::create_dir_all(dir).map_err(|e| {
                    MemoryError::Corrupt(format!("cannot create {}: {e}", dir.display()))
                })?;
                MemoryStore::open(&self.path_of(dir, id))?
            }
            _ => MemoryStore::in_memory()?,
        };
        let store = Arc::new(store);
        open.insert(id.to_string(), store.clone());
        Ok(store)
    }

    fn path_of(&self, dir: &std::path::Path, id: &str) -> PathBuf {
        dir.join(format!("{id}.sqlite3"))
    }

    /// Session `id` became FILE (`file_backed`) or MEMORY: its memories move
    /// to a file under the state dir, or into memory (the file deleted).
    pub fn storage_changed(&self, id: &str, file_backed: bool) -> Result<(), MemoryError> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let Some(current) = open.get(id).cloned() else {
            return Ok(()); // opened the right way on first use
        };
        let moved = match (&self.dir, file_backed, current.is_file()) {
            (Some(dir), true, false) => {
                std::fs::create_dir_all(dir).map_err(|e| {
                    MemoryError::Corrupt(format!("cannot create {}: {e}", dir.display()))
                })?;
                let path = self.path_of(dir, id);
                let _ = std::fs::remove_file(&path);
                current.copy_to_file(&path)?
            }
            (_, false, true) => current.copy_to_memory()?,
            _ => return Ok(()),
        };
        open.insert(id.to_string(), Arc::new(moved));
        drop(open);
        if !file_backed {
            self.delete_files(id);
        }
        Ok(())
    }

    /// Forgets session `id`'s store and deletes its file (destroyed session).
    pub fn remove(&self, id: &str) {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        self.delete_files(id);
    }

    fn delete_files(&self, id: &str) {
        if let Some(dir) = &self.dir {
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let path = PathBuf::from(format!("{}{suffix}", self.path_of(dir, id).display()));
                if let Err(e) = std::fs::remove_file(&path)
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!(path = %path.display(), error = %e, "memory file not deleted");
                }
            }
        }
    }
}
