//! The journal's writer: one OS thread that owns the log file and appends
//! every change in group commits.
//!
//! File writes are blocking I/O, so they stay off tokio's async workers.
//! Every record waiting when the thread wakes is encoded into one buffer and
//! written with one `write` (a group commit); a caller waiting on a record
//! hears back only once that write returned — from then on the record
//! survives the runner's death (SIGKILL included). Like the SQLite store it
//! replaced (WAL, `synchronous = NORMAL`), a group commit is not `fsync`ed:
//! a power loss may lose the last commits, never the file's consistency
//! (records are checksummed; a torn tail is dropped on reading).
//!
//! When settled records dominate the file (it is over [`COMPACT_AT`] bytes
//! and more than [`COMPACT_RATIO`] times what the live entries need), the
//! thread rewrites the live state into a new file, `fsync`s it and renames
//! it over the old one: the file stays proportional to what is unsettled.
//!
//! The queue is bounded ([`QUEUE_BOUND`] jobs, each one record or a
//! thread's burst of at most [`super::BURST`] appends): when it is full, callers
//! that may wait wait for room (backpressure), the ones that may not are
//! told (`false`) and decide.
//!
//! A writer parked on an empty queue costs the next caller a wake-up (a
//! futex call and a context switch; under load nearly every append found
//! the writer parked).
//! So after a busy group commit (at least [`BUSY_BATCH`] records) the
//! writer lets the next ones gather for [`GATHER`] instead of parking; a
//! quiet runner's commits (single records) are not delayed.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use tokio::sync::{mpsc, oneshot};

use super::log::{Record, State};

/// Jobs waiting for the writer before callers wait for room.
pub const QUEUE_BOUND: usize = 16_384;
/// At most this many records share one write.
const MAX_BATCH: usize = 2_048;
/// The file is compacted only above this size.
pub const COMPACT_AT: u64 = 4 << 20;
/// ... and only when it is this many times what the live entries need.
pub const COMPACT_RATIO: u64 = 4;

/// A group commit this large means records are streaming in: gather the
/// next ones before waiting.
const BUSY_BATCH: usize = 8;
/// How long records gather after a busy group commit (what it adds to a
/// commit's wait, under load only).
const GATHER: std::time::Duration = std::time::Duration::from_micros(100);

/// The thread's name, as metrics label it (the bench reads it).
pub const THREAD_NAME: &str = "outbox-journal";

/// One queued job (its changes) and who waits for it.
pub struct Job {
    /// What it writes.
    pub records: Records,
    /// Told when the write is done (`Err`: it failed).
    pub done: Option<oneshot::Sender<Result<(), String>>>,
}

/// What one job writes, in order.
pub enum Records {
    /// Nothing: a flush (its caller waits for what was queued before).
    None,
    /// One change.
    One(Record),
    /// Several, from one caller: a thread's updates that were ready
    /// together take one slot of the queue and one wake of the writer.
    Many(Vec<Record>),
}

/// The open file and what it holds.
pub struct Writer {
    path: PathBuf,
    file: File,
    /// Bytes in the file.
    len: u64,
    state: State,
}

impl Writer {
    /// Writes `state` as a fresh, compacted file at `path` (replacing what
    /// was there) and keeps it open for appending.
    pub fn create(path: &Path, state: State) -> std::io::Result<Self> {
        let (file, len) = rewrite(path, &state)?;
        Ok(Self {
            path: path.to_owned(),
            file,
            len,
            state,
        })
    }

    /// Keeps the file at `path`, `len` bytes that replay to `state` whole
    /// (no torn tail), open for appending: nothing in it is rewritten, so
    /// nothing needs an `fsync`. An empty (or missing) file gets its
    /// [`super::log::MAGIC`] first, written like any group commit.
    pub fn reopen(path: &Path, len: u64, state: State) -> std::io::Result<Self> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let mut len = len;
        if len == 0 {
            file.write_all(super::log::MAGIC)?;
            len = super::log::MAGIC.len() as u64;
        }
        Ok(Self {
            path: path.to_owned(),
            file,
            len,
            state,
        })
    }

    /// Whether a file of `len` bytes holding `state` is due for compaction
    /// (the rule the writer applies after each group commit).
    pub fn compaction_due(len: u64, state: &State) -> bool {
        // What a compacted file would take: the live entries and a header.
        len > COMPACT_AT && len > COMPACT_RATIO * (state.live_bytes + 64)
    }

    /// Starts the writer thread; it ends when every sender is dropped,
    /// after writing what was queued.
    pub fn start(self) -> std::io::Result<mpsc::Sender<Job>> {
        let (tx, rx) = mpsc::channel(QUEUE_BOUND);
        std::thread::Builder::new()
            .name(THREAD_NAME.to_owned())
            .spawn(move || self.serve(rx))?;
        Ok(tx)
    }

    fn serve(mut self, mut rx: mpsc::Receiver<Job>) {
        let mut batch: Vec<Job> = Vec::with_capacity(256);
        let mut buf: Vec<u8> = Vec::with_capacity(64 << 10);
        let mut busy = false;
        while let Some(first) = next_job(&mut rx, busy) {
            let started = std::time::Instant::now();
            batch.push(first);
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            buf.clear();
            // What the batch did, a burst counting each of its records
            // and a flush as one (the metric's "jobs", BUSY_BATCH).
            let mut records = 0;
            for job in &mut batch {
                match std::mem::replace(&mut job.records, Records::None) {
                    Records::None => records += 1,
                    Records::One(record) => {
                        records += 1;
                        self.take(record, &mut buf);
                    }
                    Records::Many(many) => {
                        records += many.len();
                        for record in many {
                            self.take(record, &mut buf);
                        }
                    }
                }
            }
            let written = self.append(&buf);
            for job in batch.drain(..) {
                if let Some(done) = job.done {
                    let _ = done.send(written.clone());
                }
            }
            if let Err(e) = &written {
                tracing::error!(error = %e, "outbox journal: write failed");
            }
            if Self::compaction_due(self.len, &self.state) {
                self.compact();
            }
            crate::observe::metrics::store_batch(THREAD_NAME, records, started.elapsed());
            busy = records >= BUSY_BATCH;
        }
    }

    /// Encodes `record` into `buf` and applies it to the live state.
    fn take(&mut self, record: Record, buf: &mut Vec<u8>) {
        match record {
            // The common case: encoded, then moved (not copied) into the
            // live state.
            Record::Append { id, message } => {
                super::log::append_record(id, &message, buf);
                self.state.insert(id, message);
            }
            record if self.state.apply(&record) => super::log::encode(&record, buf),
            _ => {}
        }
    }

    /// One write of the group commit; on failure the file is cut back to
    /// where it was, so no torn record sits before later ones.
    fn append(&mut self, buf: &[u8]) -> Result<(), String> {
        if buf.is_empty() {
            return Ok(());
        }
        match self.file.write_all(buf) {
            Ok(()) => {
                self.len += buf.len() as u64;
                Ok(())
            }
            Err(e) => {
                // Append mode writes at the end whatever the cursor says:
                // cutting the file back is all it takes.
                if let Err(cut) = self.file.set_len(self.len) {
                    tracing::error!(error = %cut, "outbox journal: cannot cut a failed write back");
                }
                Err(format!("writing {}: {e}", self.path.display()))
            }
        }
    }

    fn compact(&mut self) {
        let started = std::time::Instant::now();
        match rewrite(&self.path, &self.state) {
            Ok((file, len)) => {
                tracing::debug!(
                    before = self.len,
                    after = len,
                    took_ms = started.elapsed().as_millis() as u64,
                    "outbox journal compacted"
                );
                self.file = file;
                self.len = len;
            }
            Err(e) => {
                tracing::error!(error = %e, "outbox journal: compaction failed; the file keeps growing until it succeeds");
            }
        }
    }
}

/// The next job: after a busy commit, what gathered in [`GATHER`] (or the
/// first to come); else the first to come. `None` once every sender is gone.
fn next_job(rx: &mut mpsc::Receiver<Job>, busy: bool) -> Option<Job> {
    if busy {
        std::thread::sleep(GATHER);
        match rx.try_recv() {
            Ok(job) => return Some(job),
            Err(mpsc::error::TryRecvError::Disconnected) => return None,
            Err(mpsc::error::TryRecvError::Empty) => {}
        }
    }
    crate::util::allocator::before_wait();
    rx.blocking_recv()
}

/// Writes `state` to `<path>.new`, syncs it, renames it over `path` and
/// syncs the directory: the old file is replaced whole or not at all.
/// Returns the new file, open for appending, and its length.
fn rewrite(path: &Path, state: &State) -> std::io::Result<(File, u64)> {
    let mut bytes = Vec::new();
    state.compacted(&mut bytes);
    let tmp = path.with_extension("log.new");
    {
        let mut f = File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_data()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    let file = std::fs::OpenOptions::new().append(true).open(path)?;
    Ok((file, bytes.len() as u64))
}
