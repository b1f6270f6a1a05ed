//! Where `STORAGE_TYPE_FILE` sessions live on disk, under
//! `<state_dir>/sessions/`: per session a snapshot `<id>.json`, replaced
//! atomically (temp file, fsync, rename) so a crash never leaves half a
//! session behind, and a log `<id>.<generation>.log` of the steps saved
//! since, one JSON [`Delta`] per line.
//!
//! Why a log: a turn saves the session at every step, and the history only
//! grows, so rewriting the whole file each time made a save cost O(history),
//! the largest part of a long session's turn. An append costs what the
//! step added. Like the runner's journal, an append
//! is not fsynced: it survives the process's death at once, a power loss
//! may take the last steps but never the file's consistency (a torn last
//! line is dropped on reading). The engine writes a new snapshot (and
//! starts the next generation's log) when the log has outgrown the
//! snapshot, so the work stays proportional to what was added.
//!
//! Session ids come from the wire, so they are validated before they
//! become file names.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::session::record::{Delta, SessionRecord};

/// The longest session id accepted.
pub const MAX_SESSION_ID_LEN: usize = 128;

/// Why a session id is refused (the text names the field).
pub fn validate_session_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("session_id: must not be empty".into());
    }
    if id.len() > MAX_SESSION_ID_LEN {
        return Err(format!(
            "session_id: at most {MAX_SESSION_ID_LEN} characters, got {}",
            id.len()
        ));
    }
    if id == "." || id == ".." {
        return Err("session_id: `.` and `..` are not session ids".into());
    }
    if let Some(bad) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "session_id: only A-Z, a-z, 0-9, `.`, `_` and `-` are allowed, found {bad:?}"
        ));
    }
    Ok(())
}

/// Errors reading or writing session files.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("session store {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("session file {path}: {message}")]
    Format { path: PathBuf, message: String },
    #[error("{0}")]
    InvalidId(String),
}

/// The directory of persisted sessions.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
}

impl FileStore {
    /// Opens (creating if needed) `<state_dir>/sessions`.
    pub fn open(state_dir: &Path) -> Result<Self, StoreError> {
        let dir = state_dir.join("sessions");
        std::fs::create_dir_all(&dir).map_err(|source| StoreError::Io {
            path: dir.clone(),
            source,
        })?;
        Ok(Self { dir })
    }

    fn path_of(&self, id: &str) -> Result<PathBuf, StoreError> {
        validate_session_id(id).map_err(StoreError::InvalidId)?;
        Ok(self.dir.join(format!("{id}.json")))
    }

    fn log_of(&self, id: &str, generation: u64) -> PathBuf {
        self.dir.join(format!("{id}.{generation}.log"))
    }

    /// Writes the record as the session's snapshot, atomically, and removes
    /// the log of the snapshot it replaces (`previous` generation); returns
    /// the snapshot's size. Blocking I/O: call from `spawn_blocking`.
    pub fn save(&self, record: &SessionRecord, previous: Option<u64>) -> Result<u64, StoreError> {
        let path = self.path_of(&record.session_id)?;
        let io = |source| StoreError::Io {
            path: path.clone(),
            source,
        };
        let bytes = serde_json::to_vec(record).map_err(|e| StoreError::Format {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir).map_err(io)?;
        tmp.write_all(&bytes).map_err(io)?;
        tmp.as_file().sync_all().map_err(io)?;
        tmp.persist(&path).map_err(|e| io(e.error))?;
        if let Some(old) = previous.filter(|g| *g != record.log_generation) {
            remove_if_present(&self.log_of(&record.session_id, old))?;
        }
        Ok(bytes.len() as u64)
    }

    /// Appends one step to the log of snapshot `generation`; returns the
    /// bytes written. One `write` of one line, not fsynced (see the module
    /// doc). Blocking I/O.
    pub fn append(&self, generation: u64, delta: &Delta) -> Result<u64, StoreError> {
        self.path_of(&delta.rest.session_id)?;
        let path = self.log_of(&delta.rest.session_id, generation);
        let mut line = serde_json::to_vec(delta).map_err(|e| StoreError::Format {
            path: path.clone(),
            message: e.to_string(),
        })?;
        line.push(b'\n');
        let io = |source| StoreError::Io {
            path: path.clone(),
            source,
        };
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .map_err(io)?;
        file.write_all(&line).map_err(io)?;
        Ok(line.len() as u64)
    }

    /// Removes a session's snapshot and the log of its `generation`; a
    /// missing file is not an error (older logs are swept at load).
    pub fn delete(&self, id: &str, generation: Option<u64>) -> Result<(), StoreError> {
        let path = self.path_of(id)?;
        if let Some(generation) = generation {
            remove_if_present(&self.log_of(id, generation))?;
        }
        remove_if_present(&path)
    }

    /// Every readable session file. Files that do not parse, or whose id
    /// does not match their name, are reported and skipped.
    pub fn load_all(&self) -> Result<(Vec<SessionRecord>, Vec<StoreError>), StoreError> {
        let entries = std::fs::read_dir(&self.dir).map_err(|source| StoreError::Io {
            path: self.dir.clone(),
            source,
        })?;
        let mut records = Vec::new();
        let mut skipped = Vec::new();
        let mut logs = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let name = path.file_name().and_then(|n| n.to_str());
            if name.is_some_and(|n| n.ends_with(".log")) {
                logs.push(path);
                continue;
            }
            let Some(stem) = name.and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if validate_session_id(stem).is_err() {
                continue;
            }
            match self.load(&path) {
                Ok((record, torn)) if record.session_id == stem => {
                    skipped.extend(torn);
                    records.push(record)
                }
                Ok((record, _)) => skipped.push(StoreError::Format {
                    path: path.clone(),
                    message: format!(
                        "holds session {:?}, not the one its name says",
                        record.session_id
                    ),
                }),
                Err(e) => skipped.push(e),
            }
        }
        // Logs no snapshot names: left by a crash between a new snapshot
        // and the removal of the old log, or by a deleted session.
        let live: std::collections::HashSet<PathBuf> = records
            .iter()
            .map(|r| self.log_of(&r.session_id, r.log_generation))
            .collect();
        for stale in logs.iter().filter(|l| !live.contains(*l)) {
            if let Err(e) = remove_if_present(stale) {
                skipped.push(e);
            }
        }
        records.sort_by_key(|r| r.created_at);
        Ok((records, skipped))
    }

    /// A snapshot with its log's steps applied, and what was wrong with the
    /// log (a torn or unreadable last step: the steps before it count).
    pub fn load(&self, path: &Path) -> Result<(SessionRecord, Option<StoreError>), StoreError> {
        let mut record = Self::read(path)?;
        let log = self.log_of(&record.session_id, record.log_generation);
        let text = match std::fs::read(&log) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((record, None)),
            Err(source) => return Err(StoreError::Io { path: log, source }),
        };
        let mut lines = text.split_inclusive(|b| *b == b'\n').enumerate();
        let torn = lines.find_map(|(n, line)| {
            let step = line
                .strip_suffix(b"\n")
                .ok_or_else(|| "torn (no end of line)".to_string())
                .and_then(|line| serde_json::from_slice::<Delta>(line).map_err(|e| e.to_string()))
                .and_then(|delta| record.apply(delta));
            step.err().map(|why| StoreError::Format {
                path: log.clone(),
                message: format!("step {}: {why}; the steps after it are ignored", n + 1),
            })
        });
        Ok((record, torn))
    }

    fn read(path: &Path) -> Result<SessionRecord, StoreError> {
        let bytes = std::fs::read(path).map_err(|source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        serde_json::from_slice(&bytes).map_err(|e| StoreError::Format {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }
}

fn remove_if_present(path: &Path) -> Result<(), StoreError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(StoreError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::message::{MessageRole, StoredMessage};

    #[test]
    fn session_ids_are_validated() {
        assert!(validate_session_id("abc-DEF_1.2").is_ok());
        for bad in ["", ".", "..", "a/b", "../x", "a b", "é"] {
            assert!(validate_session_id(bad).is_err(), "{bad:?} accepted");
        }
        assert!(validate_session_id(&"a".repeat(129)).is_err());
        assert!(validate_session_id(&"a".repeat(128)).is_ok());
    }

    fn record(id: &str, texts: &[&str]) -> SessionRecord {
        SessionRecord {
            messages: texts
                .iter()
                .map(|t| StoredMessage::text(MessageRole::User, *t))
                .collect(),
            ..SessionRecord::empty(id)
        }
    }

    fn step(id: &str, base: usize, texts: &[&str], updated_at: i64) -> Delta {
        let mut rest = record(id, &[]);
        rest.updated_at = updated_at;
        Delta {
            base,
            messages: texts
                .iter()
                .map(|t| StoredMessage::text(MessageRole::User, *t))
                .collect(),
            rest,
        }
    }

    fn texts(record: &SessionRecord) -> Vec<String> {
        record.messages.iter().map(|m| m.content.clone()).collect()
    }

    #[test]
    fn steps_appended_after_a_snapshot_load_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        store.save(&record("s", &["a"]), None).unwrap();
        store.append(1, &step("s", 1, &["b", "c"], 5)).unwrap();
        store.append(1, &step("s", 3, &["d"], 7)).unwrap();
        let (records, skipped) = store.load_all().unwrap();
        assert!(skipped.is_empty(), "{skipped:?}");
        assert_eq!(texts(&records[0]), ["a", "b", "c", "d"]);
        assert_eq!(records[0].updated_at, 7);
        assert_eq!(records[0].log_generation, 1);
    }

    #[test]
    fn a_torn_last_step_is_dropped_and_named_the_steps_before_it_count() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        store.save(&record("s", &["a"]), None).unwrap();
        store.append(1, &step("s", 1, &["b"], 5)).unwrap();
        let log = dir.path().join("sessions/s.1.log");
        let mut text = std::fs::read(&log).unwrap();
        let line = serde_json::to_vec(&step("s", 2, &["c"], 6)).unwrap();
        text.extend_from_slice(&line[..line.len() / 2]);
        std::fs::write(&log, text).unwrap();
        let (records, skipped) = store.load_all().unwrap();
        assert_eq!(texts(&records[0]), ["a", "b"]);
        assert_eq!(skipped.len(), 1);
        assert!(skipped[0].to_string().contains("step 2"), "{}", skipped[0]);
    }

    #[test]
    fn a_new_snapshot_retires_the_old_log_and_stale_logs_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        store.save(&record("s", &["a"]), None).unwrap();
        store.append(1, &step("s", 1, &["b"], 5)).unwrap();
        let mut next = record("s", &["a", "b", "x"]);
        next.log_generation = 2;
        store.save(&next, Some(1)).unwrap();
        let logs = dir.path().join("sessions");
        assert!(!logs.join("s.1.log").exists());
        // Steps of generation 2 apply; a log of another generation (a crash
        // between snapshot and removal) is ignored and swept.
        store.append(2, &step("s", 3, &["y"], 9)).unwrap();
        std::fs::write(logs.join("s.7.log"), b"junk\n").unwrap();
        std::fs::write(logs.join("gone.1.log"), b"junk\n").unwrap();
        let (records, skipped) = store.load_all().unwrap();
        assert!(skipped.is_empty(), "{skipped:?}");
        assert_eq!(texts(&records[0]), ["a", "b", "x", "y"]);
        assert!(!logs.join("s.7.log").exists() && !logs.join("gone.1.log").exists());
        assert!(logs.join("s.2.log").exists());
        store.delete("s", Some(2)).unwrap();
        assert!(!logs.join("s.2.log").exists() && !logs.join("s.json").exists());
    }

    #[test]
    fn a_step_that_does_not_fit_stops_the_replay() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        store.save(&record("s", &["a"]), None).unwrap();
        store.append(1, &step("s", 5, &["b"], 5)).unwrap();
        let (records, skipped) = store.load_all().unwrap();
        assert_eq!(texts(&records[0]), ["a"]);
        assert!(
            skipped[0].to_string().contains("starts at message 5"),
            "{}",
            skipped[0]
        );
    }
}
