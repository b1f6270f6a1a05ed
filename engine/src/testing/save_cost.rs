//! What one session save costs, for the benchmark's "session save cost per
//! step" figure. The engine saves a `FILE` session at every step
//! of the agent loop: a step appended to the session's log, and now and
//! then a whole snapshot (see `crate::store`). These time those same writes
//! (`FileStore::append`, `FileStore::save`) of a session the engine wrote,
//! on the same file system, so the figures are the engine's own code on the
//! same record and disk rather than an estimate.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::session::record::{Delta, SessionRecord};
use crate::store::FileStore;

/// The session in `session_file` (its log applied) and a scratch store
/// beside it.
fn load(session_file: &Path) -> Result<(SessionRecord, tempfile::TempDir, FileStore), String> {
    let sessions = session_file
        .parent()
        .ok_or_else(|| format!("{} has no parent", session_file.display()))?;
    let state = sessions
        .parent()
        .ok_or_else(|| format!("{} has no parent", sessions.display()))?;
    let (record, _) = FileStore::open(state)
        .and_then(|store| store.load(session_file))
        .map_err(|e| format!("reading {}: {e}", session_file.display()))?;
    let scratch = tempfile::tempdir_in(sessions).map_err(|e| format!("scratch dir: {e}"))?;
    let store = FileStore::open(scratch.path()).map_err(|e| e.to_string())?;
    Ok((record, scratch, store))
}

/// Writes the session read from `session_file` as a snapshot `runs` times
/// into a scratch store beside it; each write's duration and the
/// snapshot's size in bytes. `Err` says what could not be read or written.
pub fn session_save_times(
    session_file: &Path,
    runs: usize,
) -> Result<(Vec<Duration>, u64), String> {
    let (record, _scratch, store) = load(session_file)?;
    let mut times = Vec::with_capacity(runs);
    let mut bytes = 0;
    for _ in 0..runs {
        let started = Instant::now();
        bytes = store.save(&record, None).map_err(|e| e.to_string())?;
        times.push(started.elapsed());
    }
    Ok((times, bytes))
}

/// Appends `runs` steps, each holding the session's last `messages`
/// messages (a text turn adds two), to a scratch log beside it; each
/// append's duration and the step's size in bytes.
pub fn session_step_times(
    session_file: &Path,
    runs: usize,
    messages: usize,
) -> Result<(Vec<Duration>, u64), String> {
    let (mut record, _scratch, store) = load(session_file)?;
    let base = record.messages.len().saturating_sub(messages);
    let step = record.messages.split_off(base);
    let delta = Delta {
        base,
        messages: step,
        rest: SessionRecord {
            messages: Vec::new(),
            ..record
        },
    };
    let mut times = Vec::with_capacity(runs);
    let mut bytes = 0;
    for _ in 0..runs {
        let started = Instant::now();
        bytes = store.append(1, &delta).map_err(|e| e.to_string())?;
        times.push(started.elapsed());
    }
    Ok((times, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_session_is_timed_and_bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        let record = SessionRecord::empty("s1");
        store.save(&record, None).unwrap();
        let file = dir.path().join("sessions/s1.json");
        let (times, bytes) = session_save_times(&file, 3).unwrap();
        assert_eq!(times.len(), 3);
        assert!(bytes > 0);
        let (times, bytes) = session_step_times(&file, 2, 2).unwrap();
        assert_eq!(times.len(), 2);
        assert!(bytes > 0);
        let missing = session_save_times(&dir.path().join("nope.json"), 1).unwrap_err();
        assert!(missing.contains("nope.json"), "{missing}");
    }
}
