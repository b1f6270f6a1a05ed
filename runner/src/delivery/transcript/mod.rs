//! Per-thread transcripts: every update the runner sends for a
//! thread is also appended, as one JSON line, to
//! `<state dir>/transcripts/<thread id>.jsonl`, so an operator can replay
//! what a thread did (`agent-runner logs THREAD`).
//!
//! Recorded where every update enters the outbox ([`crate::delivery::outbox`]), for
//! each update whose payload names a thread (thread, turn, item, name and
//! token-usage updates: replies from `commands.rs`/`dispatch.rs` included);
//! a thread's request errors, which name none, are recorded for the thread
//! that pushed them (`Outbox::push_for_thread`; [`thread_of`] says which
//! is which). An intermediate update the outbox drops later, when it is
//! full, is recorded all the same; one a full outbox sheds from a thread's
//! burst before it enters (a snapshot its item's next update made
//! redundant) is not.
//!
//! Updates come masked: the outbox masks every update as it enters, before
//! it records it here (the same masked text goes on the wire). The sender
//! formats the lines ([`line`]: a few hundred nanoseconds, so that the
//! update is freed by the thread that made it, not by the writer) and
//! queues them (a burst of updates as one job) on a queue bounded in lines
//! ([`QUEUE_CAPACITY`]) and in bytes ([`QUEUE_BYTES`]), with a
//! non-blocking push. One writer thread appends them, buffered per file
//! and written out whenever the queue runs empty. When the queue is full the lines are
//! dropped, never waited for (a transcript must not slow a turn or the
//! link); the writer then appends a `{"dropped": N}` line to the next
//! transcript it writes, so the gap is visible. A file over [`MAX_BYTES`]
//! is rotated to `<thread>.jsonl.1` (one old file kept). A
//! thread's transcripts are removed with the thread (that job waits for
//! room: it must not be lost).
//!
//! The parts: this file is the senders' side (the lines formatted, the
//! bounded queue); [`writer`] is the thread that drains it; [`line`]
//! formats one update as a line;
//! [`files`] is where transcripts live and how they are appended and
//! rotated.

mod files;
mod line;
mod writer;

pub use files::{dir, path, rotated};

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tokio::sync::mpsc::Sender;
use tokio::sync::mpsc::error::TrySendError;

use agent_runner_proto::runner::{ClientMessage, ThreadStatus, client_message::Payload};

/// Lines waiting for the writer at most (counted in `queued`); also the
/// channel's capacity in jobs, each holding at least one line or a
/// removal. The channel is tokio's bounded one, which takes memory for its
/// slots as they fill (in blocks of 32 on 64-bit targets): std's
/// `sync_channel` allocated and wrote all 4,096 up front, 288 KiB resident
/// in every runner, idle or not.
pub const QUEUE_CAPACITY: usize = 4096;
/// Bytes the queued lines may hold at most (a line's texts are clipped to
/// [`line::MAX_TEXT`] each).
pub const QUEUE_BYTES: usize = 32 << 20;
/// A transcript file is rotated past this size.
pub const MAX_BYTES: u64 = 4 * 1024 * 1024;

/// What the senders queue for the writer thread.
enum Job {
    /// Lines of one thread's transcript, in order, each ending in a
    /// newline (one update, or a burst: one push for all of them, not one
    /// each).
    Lines {
        thread: String,
        lines: Vec<u8>,
        /// How many lines `lines` holds.
        count: usize,
    },
    Remove {
        thread: String,
    },
}

/// The queue to the writer thread.
#[derive(Debug, Clone)]
pub struct Transcripts {
    tx: Sender<Job>,
    /// Lines dropped since the writer last said so.
    dropped: Arc<AtomicU64>,
    /// Lines queued and not yet written: the bound is in lines, whatever
    /// the jobs hold.
    queued: Arc<AtomicUsize>,
    /// The bytes of the queued lines.
    queued_bytes: Arc<AtomicUsize>,
}

/// The thread `msg` is about, when its payload names one (`None` for
/// request errors, agent and SDK updates, heartbeats).
pub fn thread_of(msg: &ClientMessage) -> Option<&str> {
    let id = match msg.payload.as_ref()? {
        Payload::ThreadUpdate(t) => &t.thread_id,
        Payload::TurnUpdate(t) => &t.thread_id,
        Payload::ItemUpdate(i) => &i.thread_id,
        Payload::ThreadNameUpdate(n) => &n.thread_id,
        Payload::ThreadTokenUsageUpdate(u) => &u.thread_id,
        _ => return None,
    };
    (!id.is_empty()).then_some(id.as_str())
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Job::Lines { thread, count, .. } => write!(f, "Lines({thread}, {count})"),
            Job::Remove { thread } => write!(f, "Remove({thread})"),
        }
    }
}

impl Transcripts {
    /// Start the writer thread, writing under `dir` (created).
    pub fn start(dir: PathBuf) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        let (tx, rx) = tokio::sync::mpsc::channel(QUEUE_CAPACITY);
        let dropped = Arc::new(AtomicU64::new(0));
        let queued = Arc::new(AtomicUsize::new(0));
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let counts = Counts {
            dropped: dropped.clone(),
            queued: queued.clone(),
            queued_bytes: queued_bytes.clone(),
        };
        std::thread::Builder::new()
            .name("transcripts".into())
            .spawn(move || writer::run(dir, rx, counts))?;
        Ok(Self {
            tx,
            dropped,
            queued,
            queued_bytes,
        })
    }

    /// Queue `msg`'s line (sent for `thread`, masked already) for its
    /// transcript: formatted here, written by the writer, pushed without
    /// blocking. A full queue drops the line (counted).
    pub fn record(&self, thread: &str, msg: &ClientMessage) {
        self.queue(thread, std::slice::from_ref(msg));
    }

    /// [`Transcripts::record`] for updates that were ready together, each
    /// recorded in the transcript of the thread it names ([`thread_of`];
    /// those naming none are not recorded): one push per run of updates of
    /// one thread.
    pub fn record_all(&self, msgs: &[ClientMessage]) {
        let mut rest = msgs;
        while let Some(first) = rest.first() {
            let thread = thread_of(first);
            let run = rest.iter().take_while(|m| thread_of(m) == thread).count();
            if let Some(thread) = thread {
                self.queue(thread, &rest[..run]);
            }
            rest = &rest[run..];
        }
    }

    /// Pushes the lines of `updates` (a thread's deletion has none) for
    /// `thread`, or drops (and counts) them all when the queue would then
    /// hold more than [`QUEUE_CAPACITY`] lines or [`QUEUE_BYTES`].
    fn queue(&self, thread: &str, updates: &[ClientMessage]) {
        let n = updates.iter().filter(|m| !is_deletion(m)).count();
        if n == 0 {
            return;
        }
        // A queue full of lines already: dropped before they cost a format.
        if self.queued.load(Ordering::Relaxed) + n > QUEUE_CAPACITY {
            self.dropped.fetch_add(n as u64, Ordering::Relaxed);
            return;
        }
        let ts_ms = unix_ms();
        // About what a short update's line takes: most bursts fit at once.
        let mut lines = Vec::with_capacity(160 * n);
        for update in updates.iter().filter(|m| !is_deletion(m)) {
            line::Entry::of(update, ts_ms).write(&mut lines);
            lines.push(b'\n');
        }
        let bytes = lines.len();
        let lines_over = self.queued.fetch_add(n, Ordering::Relaxed) + n > QUEUE_CAPACITY;
        let bytes_over =
            self.queued_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes > QUEUE_BYTES;
        let undo = || {
            self.queued.fetch_sub(n, Ordering::Relaxed);
            self.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
        };
        if lines_over || bytes_over {
            undo();
            self.dropped.fetch_add(n as u64, Ordering::Relaxed);
            return;
        }
        let job = Job::Lines {
            thread: thread.to_owned(),
            lines,
            count: n,
        };
        match self.tx.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                undo();
                self.dropped.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(TrySendError::Closed(_)) => undo(),
        }
    }

    /// Remove `thread`'s transcripts (after the lines queued before).
    pub async fn remove(&self, thread: &str) {
        // Waits for room: a removal must not be lost.
        let _ = self
            .tx
            .send(Job::Remove {
                thread: thread.to_owned(),
            })
            .await;
    }
}

/// A deleted thread's transcript went with it: its last update (the
/// deletion itself) must not make a new file.
fn is_deletion(msg: &ClientMessage) -> bool {
    matches!(&msg.payload, Some(Payload::ThreadUpdate(t)) if t.status() == ThreadStatus::Deleted)
}

/// The writer's side of the queue's counters.
struct Counts {
    dropped: Arc<AtomicU64>,
    queued: Arc<AtomicUsize>,
    queued_bytes: Arc<AtomicUsize>,
}

/// Now, in milliseconds since the Unix epoch (0 if the clock is before it).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
