//! A session as a restarted engine would read it back: the snapshot with
//! its log's steps applied (see `crate::store`), for tests that check what
//! reached the disk.

use std::path::Path;

use crate::store::FileStore;

/// The session `id` under `state_dir` as JSON (the snapshot's layout, every
/// logged step applied). `Err` says what could not be read.
pub fn session_on_disk(state_dir: &Path, id: &str) -> Result<serde_json::Value, String> {
    let store = FileStore::open(state_dir).map_err(|e| e.to_string())?;
    let file = state_dir.join("sessions").join(format!("{id}.json"));
    let (record, torn) = store.load(&file).map_err(|e| e.to_string())?;
    if let Some(torn) = torn {
        return Err(torn.to_string());
    }
    serde_json::to_value(record).map_err(|e| e.to_string())
}
