//! Where transcripts live on disk (one JSON-lines file per thread, one
//! rotated file kept) and the writer's open, buffered files: opening,
//! appending, rotating, removing.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::MAX_BYTES;

/// The transcripts' directory in `state_dir`: where the runner writes
/// them and `agent-runner logs` reads them.
pub fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("transcripts")
}

/// Where `thread`'s transcript is under `dir`; `None` for an id that is not
/// a safe file name (ids are checked on arrival; this is a second guard).
pub fn path(dir: &Path, thread: &str) -> Option<PathBuf> {
    safe_id(thread).then(|| file_in(dir, thread))
}

/// `<dir>/<thread>.jsonl`, for an id already known to be safe.
fn file_in(dir: &Path, thread: &str) -> PathBuf {
    dir.join(format!("{thread}.jsonl"))
}

/// Whether `thread` may name a file: not empty, at most 200 bytes of
/// `[A-Za-z0-9._-]`, not starting with a dot.
pub(super) fn safe_id(thread: &str) -> bool {
    !thread.is_empty()
        && thread.len() <= 200
        && thread
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && !thread.starts_with('.')
}

/// The rotated (older) file of `current`.
pub fn rotated(current: &Path) -> PathBuf {
    let mut name = current.as_os_str().to_os_string();
    name.push(".1");
    PathBuf::from(name)
}

/// Transcript files kept open between lines (a turn writes many lines to
/// one file in a row); when full, one is closed to make room.
pub(super) const OPEN_FILES: usize = 64;
/// Bytes buffered per open file before a write; everything buffered is
/// written whenever the queue runs empty, so a reader (`agent-runner logs
/// --follow`) sees a line as soon as the writer has caught up.
/// (8 KiB made a `write` call every ~80 lines of a streaming turn.)
const FILE_BUFFER: usize = 32 * 1024;

/// The writer's maps are looked up for every line: foldhash, seeded per
/// process (SipHash, std's default, is needlessly slow here).
type Hashing = foldhash::fast::RandomState;

/// The writer's open files and their sizes.
pub(super) struct Files {
    dir: PathBuf,
    sizes: HashMap<String, u64, Hashing>,
    open: OpenFiles,
}

/// The open transcripts, by thread.
type OpenFiles = HashMap<String, std::io::BufWriter<std::fs::File>, Hashing>;

/// Writes out what `thread`'s file holds buffered and closes it.
fn close(open: &mut OpenFiles, thread: &str) {
    if let Some(mut file) = open.remove(thread)
        && let Err(e) = file.flush()
    {
        tracing::warn!(error = %e, thread, "writing a transcript failed");
    }
}

impl Files {
    /// No file open yet, writing under `dir`.
    pub(super) fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            sizes: HashMap::default(),
            open: HashMap::default(),
        }
    }

    /// Writes out every file's buffered lines (the queue ran empty).
    pub(super) fn flush_all(&mut self) {
        let mut failed = Vec::new();
        for (thread, file) in &mut self.open {
            if let Err(e) = file.flush() {
                tracing::warn!(error = %e, thread, "writing a transcript failed");
                failed.push(thread.clone());
            }
        }
        for thread in failed {
            // Opened afresh next time; what it held is lost, as said.
            if let Some(file) = self.open.remove(&thread) {
                let (_, _) = file.into_parts();
            }
        }
    }

    /// Removes `thread`'s transcripts, current and rotated.
    pub(super) fn remove(&mut self, thread: &str) {
        self.sizes.remove(thread);
        if let Some(file) = self.open.remove(thread) {
            // The thread is gone: what it had buffered goes with it.
            let (_, _) = file.into_parts();
        }
        if let Some(p) = path(&self.dir, thread) {
            let _ = std::fs::remove_file(rotated(&p));
            let _ = std::fs::remove_file(&p);
        }
    }

    /// Appends `lines` (whole lines, newline included) to `thread`'s
    /// transcript (a safe id), rotating it first when it would outgrow
    /// [`MAX_BYTES`]. The path is built only to open or rotate the file.
    /// An append to an open file costs two map lookups (its size, its
    /// file).
    pub(super) fn append(&mut self, thread: &str, lines: &[u8]) {
        let Files { dir, sizes, open } = self;
        let size = match sizes.get_mut(thread) {
            Some(size) => size,
            None => {
                let known = std::fs::metadata(file_in(dir, thread)).map_or(0, |m| m.len());
                sizes.entry(thread.to_owned()).or_insert(known)
            }
        };
        if *size + lines.len() as u64 > MAX_BYTES && *size > 0 {
            *size = 0;
            close(open, thread);
            let p = file_in(dir, thread);
            if let Err(e) = std::fs::rename(&p, rotated(&p)) {
                tracing::warn!(error = %e, path = %p.display(), "rotating a transcript failed");
            }
        }
        let file = match open.get_mut(thread) {
            Some(file) => file,
            None => {
                if open.len() >= OPEN_FILES
                    && let Some(any) = open.keys().next().cloned()
                {
                    close(open, &any);
                }
                let p = file_in(dir, thread);
                match std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&p)
                {
                    Ok(file) => open
                        .entry(thread.to_owned())
                        .or_insert(std::io::BufWriter::with_capacity(FILE_BUFFER, file)),
                    Err(e) => {
                        tracing::warn!(error = %e, path = %p.display(), "opening a transcript failed");
                        return;
                    }
                }
            }
        };
        match file.write_all(lines) {
            Ok(()) => *size += lines.len() as u64,
            Err(e) => {
                tracing::warn!(error = %e, thread, "writing a transcript failed");
                if let Some(file) = open.remove(thread) {
                    let (_, _) = file.into_parts();
                }
            }
        }
    }
}
