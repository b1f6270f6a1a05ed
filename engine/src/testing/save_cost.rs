//! What one session save costs, for the benchmark (issue 14: "session save
//! cost per step reported"). The engine saves a `FILE` session once per
//! step of the agent loop; this times that same save (`FileStore::save`:
//! pretty JSON, temp file, fsync, rename) of a session file the engine
//! wrote, on the same file system, so the figure is the engine's own code
//! on the same record and disk rather than an estimate.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::session::record::SessionRecord;
use crate::store::FileStore;

/// Saves the session read from `session_file` `runs` times into a scratch
/// store beside it and returns each save's duration. `Err` says what could
/// not be read or written.
pub fn session_save_times(session_file: &Path, runs: usize) -> Result<Vec<Duration>, String> {
    let text = std::fs::read(session_file)
        .map_err(|e| format!("reading {}: {e}", session_file.display()))?;
    let record: SessionRecord = serde_json::from_slice(&text)
        .map_err(|e| format!("parsing {}: {e}", session_file.display()))?;
    let beside = session_file
        .parent()
        .ok_or_else(|| format!("{} has no parent", session_file.display()))?;
    let scratch = tempfile::tempdir_in(beside).map_err(|e| format!("scratch dir: {e}"))?;
    let store = FileStore::open(scratch.path()).map_err(|e| e.to_string())?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        store.save(&record).map_err(|e| e.to_string())?;
        times.push(started.elapsed());
    }
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_session_is_timed_and_bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        let record = SessionRecord {
            version: 1,
            session_id: "s1".into(),
            created_at: 0,
            updated_at: 0,
            config: Default::default(),
            messages: Vec::new(),
            todos: Vec::new(),
            usage: Default::default(),
            skills: Vec::new(),
            permissions: None,
            confirmation: None,
            lanes: Vec::new(),
        };
        store.save(&record).unwrap();
        let file = dir.path().join("sessions/s1.json");
        let times = session_save_times(&file, 3).unwrap();
        assert_eq!(times.len(), 3);
        let missing = session_save_times(&dir.path().join("nope.json"), 1).unwrap_err();
        assert!(missing.contains("nope.json"), "{missing}");
    }
}
