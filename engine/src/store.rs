//! Where `STORAGE_TYPE_FILE` sessions live on disk: one JSON file per session
//! under `<state_dir>/sessions/`, replaced atomically (temp file + rename) so
//! a crash never leaves half a session behind. Session ids come from the
//! wire, so they are validated before they become file names.

use std::path::{Path, PathBuf};

use crate::session::record::SessionRecord;

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

    /// Writes the record atomically (blocking I/O: call from `spawn_blocking`).
    pub fn save(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let path = self.path_of(&record.session_id)?;
        let io = |source| StoreError::Io {
            path: path.clone(),
            source,
        };
        let bytes = serde_json::to_vec_pretty(record).map_err(|e| StoreError::Format {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir).map_err(io)?;
        std::io::Write::write_all(&mut tmp, &bytes).map_err(io)?;
        tmp.as_file().sync_all().map_err(io)?;
        tmp.persist(&path).map_err(|e| io(e.error))?;
        Ok(())
    }

    /// Removes a session's file; a missing file is not an error.
    pub fn delete(&self, id: &str) -> Result<(), StoreError> {
        let path = self.path_of(id)?;
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StoreError::Io { path, source }),
        }
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
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(stem) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".json"))
            else {
                continue;
            };
            if validate_session_id(stem).is_err() {
                continue;
            }
            match Self::read(&path) {
                Ok(record) if record.session_id == stem => records.push(record),
                Ok(record) => skipped.push(StoreError::Format {
                    path: path.clone(),
                    message: format!(
                        "holds session {:?}, not the one its name says",
                        record.session_id
                    ),
                }),
                Err(e) => skipped.push(e),
            }
        }
        records.sort_by_key(|r| r.created_at);
        Ok((records, skipped))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_validated() {
        assert!(validate_session_id("abc-DEF_1.2").is_ok());
        for bad in ["", ".", "..", "a/b", "../x", "a b", "é"] {
            assert!(validate_session_id(bad).is_err(), "{bad:?} accepted");
        }
        assert!(validate_session_id(&"a".repeat(129)).is_err());
        assert!(validate_session_id(&"a".repeat(128)).is_ok());
    }
}
