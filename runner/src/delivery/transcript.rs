//! Per-thread transcripts (issue 15): every update the runner sends for a
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
//! it records it here (the same masked text goes on the wire). Off the hot
//! path: the sender queues the update itself, shared with the outbox (a
//! pointer, not a copy; a burst of updates as one job), on a queue bounded
//! in lines ([`QUEUE_CAPACITY`]) and in the text they hold
//! ([`QUEUE_BYTES`]), with a non-blocking push. One writer thread formats
//! the lines and appends them, buffered per file and written out whenever
//! the queue runs empty. When the queue is full the lines are
//! dropped, never waited for (a transcript must not slow a turn or the
//! link); the writer then appends a `{"dropped": N}` line to the next
//! transcript it writes, so the gap is visible. A file over [`MAX_BYTES`]
//! is rotated to `<thread>.jsonl.1` (one old file kept). A
//! thread's transcripts are removed with the thread (that job waits for
//! room: it must not be lost).

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::sync::mpsc::error::{TryRecvError, TrySendError};
use tokio::sync::mpsc::{Receiver, Sender};

use agent_runner_proto::runner::{ClientMessage, ThreadStatus, client_message::Payload};
use serde::Serialize;
use serde_json::json;

/// Lines waiting for the writer at most (counted in `queued`); also the
/// channel's capacity in jobs, each holding at least one line or a
/// removal. The channel is tokio's bounded one, which takes memory for its
/// slots as they fill (in blocks of 32 on 64-bit targets): std's
/// `sync_channel` allocated and wrote all 4,096 up front, 288 KiB resident
/// in every runner, idle or not (issue 14).
pub const QUEUE_CAPACITY: usize = 4096;
/// Bytes of text (see [`weight`]) the queued lines may hold at most: the
/// queue holds whole updates, which the outbox would otherwise have freed
/// once sent.
pub const QUEUE_BYTES: usize = 32 << 20;
/// A transcript file is rotated past this size.
pub const MAX_BYTES: u64 = 4 * 1024 * 1024;
/// Longest text (item text, command output) kept per line, in bytes.
const MAX_TEXT: usize = 16 * 1024;

enum Job {
    /// Lines of one thread's transcript, in order (one update, or a burst:
    /// one push for all of them, not one each).
    Lines {
        thread: String,
        /// When they were recorded.
        ts_ms: u64,
        updates: Vec<Arc<ClientMessage>>,
        /// Their [`weight`], summed.
        bytes: usize,
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
    /// The [`weight`] of the queued lines' updates.
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
            Job::Lines {
                thread, updates, ..
            } => write!(f, "Lines({thread}, {})", updates.len()),
            Job::Remove { thread } => write!(f, "Remove({thread})"),
        }
    }
}

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
fn safe_id(thread: &str) -> bool {
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
            .spawn(move || writer(dir, rx, counts))?;
        Ok(Self {
            tx,
            dropped,
            queued,
            queued_bytes,
        })
    }

    /// Queue `msg` (sent for `thread`, masked already) for its transcript:
    /// a pointer and a non-blocking push; formatting and writing happen on
    /// the writer. A full queue drops the update (counted).
    pub fn record(&self, thread: &str, msg: &Arc<ClientMessage>) {
        if !is_deletion(msg) {
            self.queue(thread, vec![msg.clone()]);
        }
    }

    /// [`Transcripts::record`] for updates that were ready together, each
    /// recorded in the transcript of the thread it names ([`thread_of`];
    /// those naming none are not recorded): one push per run of updates of
    /// one thread.
    pub fn record_all(&self, msgs: &[Arc<ClientMessage>]) {
        let mut rest = msgs;
        while let Some(first) = rest.first() {
            let thread = thread_of(first);
            let run = rest.iter().take_while(|m| thread_of(m) == thread).count();
            if let Some(thread) = thread {
                let updates = rest[..run]
                    .iter()
                    .filter(|m| !is_deletion(m))
                    .cloned()
                    .collect();
                self.queue(thread, updates);
            }
            rest = &rest[run..];
        }
    }

    /// Pushes `updates` for `thread`, or drops (and counts) them all when
    /// the queue would then hold more than [`QUEUE_CAPACITY`] lines or
    /// [`QUEUE_BYTES`] of text.
    fn queue(&self, thread: &str, updates: Vec<Arc<ClientMessage>>) {
        let n = updates.len();
        if n == 0 {
            return;
        }
        let bytes: usize = updates.iter().map(|m| weight(m)).sum();
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
            ts_ms: unix_ms(),
            updates,
            bytes,
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

/// What a queued update counts against [`QUEUE_BYTES`]: the text it
/// carries (what can be large), plus a fixed amount for the rest.
fn weight(msg: &ClientMessage) -> usize {
    const REST: usize = 256;
    let text = match &msg.payload {
        Some(Payload::ItemUpdate(i)) => {
            i.text.as_ref().map_or(0, String::len)
                + i.command_execution_item.as_ref().map_or(0, |c| {
                    c.command.len() + c.output.as_ref().map_or(0, String::len)
                })
        }
        Some(Payload::RequestError(e)) => e.error_message.len(),
        _ => 0,
    };
    REST + text
}

/// The writer's side of the queue's counters.
struct Counts {
    dropped: Arc<AtomicU64>,
    queued: Arc<AtomicUsize>,
    queued_bytes: Arc<AtomicUsize>,
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Transcript files kept open between lines (a turn writes many lines to
/// one file in a row); when full, one is closed to make room.
const OPEN_FILES: usize = 64;
/// Bytes buffered per open file before a write; everything buffered is
/// written whenever the queue runs empty, so a reader (`agent-runner logs
/// --follow`) sees a line as soon as the writer has caught up.
/// (8 KiB made a `write` call every ~80 lines of a streaming turn: 2 % of
/// the runner's CPU in the throughput profile.)
const FILE_BUFFER: usize = 32 * 1024;
/// How long the writer lets lines gather after catching up (a line is on
/// disk this much later at most; at the highest update rates measured,
/// 200,000 a second, a few hundred lines of the queue's 4,096).
const GATHER: std::time::Duration = std::time::Duration::from_millis(2);

/// The writer's maps are looked up for every line: foldhash, seeded per
/// process (SipHash, std's default, was a sixth of the writer's time).
type Hashing = foldhash::fast::RandomState;

/// The writer's open files and their sizes.
struct Files {
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
    /// Writes out every file's buffered lines (the queue ran empty).
    fn flush_all(&mut self) {
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

    fn remove(&mut self, thread: &str) {
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
    fn append(&mut self, thread: &str, lines: &[u8]) {
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

fn writer(dir: PathBuf, mut rx: Receiver<Job>, counts: Counts) {
    let mut files = Files {
        dir,
        sizes: HashMap::default(),
        open: HashMap::default(),
    };
    let mut scratch = Vec::with_capacity(512);
    loop {
        let job = match rx.try_recv() {
            Ok(job) => job,
            Err(TryRecvError::Empty) => {
                // Caught up: write out what is buffered. Then let a burst
                // gather before waiting: a writer parked on the queue costs
                // every sender a wake-up (a futex call and a context
                // switch per line while a turn streams).
                files.flush_all();
                std::thread::sleep(GATHER);
                match rx.try_recv() {
                    Ok(job) => job,
                    Err(TryRecvError::Empty) => {
                        crate::util::allocator::before_wait();
                        match rx.blocking_recv() {
                            Some(job) => job,
                            None => break,
                        }
                    }
                    Err(TryRecvError::Disconnected) => break,
                }
            }
            Err(TryRecvError::Disconnected) => break,
        };
        match job {
            Job::Remove { thread } => files.remove(&thread),
            Job::Lines {
                thread,
                ts_ms,
                updates,
                bytes,
            } => {
                counts.queued.fetch_sub(updates.len(), Ordering::Relaxed);
                counts.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
                if !safe_id(&thread) {
                    continue;
                }
                scratch.clear();
                let lost = counts.dropped.swap(0, Ordering::Relaxed);
                if lost > 0 {
                    let gap = json!({"dropped": lost, "ts_ms": unix_ms()});
                    if serde_json::to_writer(&mut scratch, &gap).is_ok() {
                        scratch.push(b'\n');
                    }
                }
                for update in &updates {
                    let line_start = scratch.len();
                    let entry = Entry::of(update, ts_ms);
                    if let Err(e) = serde_json::to_writer(&mut scratch, &entry) {
                        tracing::warn!(error = %e, "a transcript line could not be encoded");
                        scratch.truncate(line_start);
                        continue;
                    }
                    scratch.push(b'\n');
                }
                if !scratch.is_empty() {
                    files.append(&thread, &scratch);
                }
            }
        }
    }
    files.flush_all();
}

/// Text kept whole up to [`MAX_TEXT`] bytes, cut with its length after.
fn clip(text: &str) -> Cow<'_, str> {
    if text.len() <= MAX_TEXT {
        return Cow::Borrowed(text);
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}… ({} bytes)", &text[..end], text.len()))
}

/// A protocol enum's value written as its variant's name (its `Debug`
/// text), looked up in a table made once per enum: formatting the name for
/// every line (`collect_str` over `Debug`) was 2.7 % of the runner's CPU in
/// the throughput profile, the writer's largest item after string escaping.
#[derive(Serialize)]
#[serde(transparent)]
struct Named(Cow<'static, str>);

/// One enum's variant names by number, for [`name`].
type Names = OnceLock<Vec<Option<Box<str>>>>;

/// The numbers [`name`] keeps names for: every variant of the enums a line
/// names is below this (a test checks).
const NAMED: i32 = 64;

static ITEM_TYPES: Names = OnceLock::new();
static TURN_STATUSES: Names = OnceLock::new();
static THREAD_STATUSES: Names = OnceLock::new();
static ITEM_STATUSES: Names = OnceLock::new();

/// The name of `value`, from `names` (filled on first use).
fn name<T>(names: &'static Names, value: T) -> Named
where
    T: Copy + std::fmt::Debug + TryFrom<i32>,
    i32: From<T>,
{
    let table = names.get_or_init(|| {
        (0..NAMED)
            .map(|n| T::try_from(n).ok().map(|v| format!("{v:?}").into()))
            .collect()
    });
    let known = usize::try_from(i32::from(value))
        .ok()
        .and_then(|n| table.get(n))
        .and_then(Option::as_deref);
    // A variant numbered past the table (none today) is formatted as before.
    Named(known.map_or_else(|| Cow::Owned(format!("{value:?}")), Cow::Borrowed))
}

/// One transcript line: the update's kind, request id and what it says,
/// borrowed from the update (the writer formats it; nothing is copied but
/// text past [`MAX_TEXT`]). Written straight out (no `Value` tree), its
/// fields in alphabetical order, as the lines have always been.
#[derive(Serialize)]
struct Entry<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    item_type: Option<Named>,
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Named>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<Cow<'a, str>>,
    ts_ms: u64,
}

impl<'a> Entry<'a> {
    /// The line for `msg`, sent at `ts_ms`.
    fn of(msg: &'a ClientMessage, ts_ms: u64) -> Self {
        let clipped = |text: &'a str| clip(text);
        let mut entry = Entry {
            command: None,
            error: None,
            item_type: None,
            kind: crate::observe::message_kind::kind(msg),
            name: None,
            output: None,
            request_id: msg.request_id.as_deref(),
            status: None,
            text: None,
            ts_ms,
        };
        match &msg.payload {
            Some(Payload::TurnUpdate(t)) => entry.status = Some(name(&TURN_STATUSES, t.status())),
            Some(Payload::ThreadUpdate(t)) => {
                entry.status = Some(name(&THREAD_STATUSES, t.status()));
            }
            Some(Payload::ItemUpdate(i)) => {
                entry.item_type = Some(name(&ITEM_TYPES, i.item_type()));
                entry.status = Some(name(&ITEM_STATUSES, i.status()));
                entry.text = i.text.as_deref().map(clipped);
                if let Some(c) = &i.command_execution_item {
                    entry.command = Some(clipped(&c.command));
                    entry.output = c.output.as_deref().map(clipped);
                }
            }
            Some(Payload::RequestError(e)) => entry.error = Some(clipped(&e.error_message)),
            Some(Payload::ThreadNameUpdate(n)) => entry.name = n.thread_name.as_deref(),
            _ => {}
        }
        entry
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_runner_proto::runner::{ItemStatus, ItemType, TurnStatus};
    use serde_json::Value;

    /// Every variant of the enums a line names is in its table, under its
    /// `Debug` name (what the lines have always said).
    #[test]
    fn enum_names_are_the_variants_debug_names() {
        fn check<T>(names: &'static Names)
        where
            T: Copy + std::fmt::Debug + TryFrom<i32>,
            i32: From<T>,
        {
            let mut seen = 0;
            for n in 0..4 * NAMED {
                if let Ok(v) = T::try_from(n) {
                    assert!(n < NAMED, "{v:?} = {n} is past the table");
                    assert_eq!(name(names, v).0, format!("{v:?}"));
                    assert!(matches!(name(names, v).0, Cow::Borrowed(_)));
                    seen += 1;
                }
            }
            assert!(seen >= 3, "no variants found");
        }
        check::<ItemType>(&ITEM_TYPES);
        check::<ItemStatus>(&ITEM_STATUSES);
        check::<TurnStatus>(&TURN_STATUSES);
        check::<ThreadStatus>(&THREAD_STATUSES);
        assert_eq!(name(&ITEM_TYPES, ItemType::McpToolCall).0, "McpToolCall");
    }

    fn wait_for(path: &Path, pred: impl Fn(&str) -> bool) -> String {
        for _ in 0..200 {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            if pred(&text) {
                return text;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("{} never matched", path.display());
    }

    #[tokio::test]
    async fn appends_rotates_and_removes() {
        let dir = tempfile::tempdir().unwrap();
        let t = Transcripts::start(dir.path().to_path_buf()).unwrap();
        let msg = Arc::new(crate::delivery::messages::request_error(
            Some("r1".into()),
            "token refused",
        ));
        t.record("thr-1", &msg);
        let p = path(dir.path(), "thr-1").unwrap();
        let text = wait_for(&p, |t| t.contains("request_error"));
        assert!(text.contains("token refused"), "{text}");
        let line: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(line["request_id"], "r1");
        // Past MAX_BYTES it rotates: one old file, a fresh current one.
        let big = Arc::new(crate::delivery::messages::request_error(
            None,
            "x".repeat(MAX_TEXT),
        ));
        for _ in 0..(MAX_BYTES as usize / MAX_TEXT + 2) {
            t.record("thr-1", &big);
        }
        t.record("thr-1", &msg);
        wait_for(&rotated(&p), |t| !t.is_empty());
        t.remove("thr-1").await;
        for _ in 0..200 {
            if !p.exists() && !rotated(&p).exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("transcripts not removed");
    }

    #[test]
    fn a_line_names_the_update_and_every_file_gets_its_lines() {
        use agent_runner_proto::runner::ItemUpdate;
        let dir = tempfile::tempdir().unwrap();
        let t = Transcripts::start(dir.path().to_path_buf()).unwrap();
        let item = |thread: &str, n: usize| ClientMessage {
            request_id: Some("r7".into()),
            payload: Some(Payload::ItemUpdate(ItemUpdate {
                thread_id: thread.into(),
                sdk_item_id: format!("i{n}"),
                status: ItemStatus::Completed.into(),
                item_type: ItemType::AgentMessage.into(),
                text: Some(format!("line \"{n}\"")),
                ..Default::default()
            })),
            ..Default::default()
        };
        // More threads than files kept open: the closed ones keep their
        // buffered lines.
        let threads: Vec<String> = (0..OPEN_FILES + 6).map(|i| format!("thr-{i}")).collect();
        for n in 0..3 {
            for thread in &threads {
                t.record(thread, &Arc::new(item(thread, n)));
            }
        }
        for thread in &threads {
            let p = path(dir.path(), thread).unwrap();
            let text = wait_for(&p, |t| t.lines().count() == 3);
            for (n, line) in text.lines().enumerate() {
                let v: Value = serde_json::from_str(line).unwrap();
                assert_eq!(v["kind"], "item_update");
                assert_eq!(v["request_id"], "r7");
                assert_eq!(v["item_type"], "AgentMessage");
                assert_eq!(v["status"], "Completed");
                assert_eq!(v["text"], format!("line \"{n}\""));
                assert!(v["ts_ms"].as_u64().unwrap() > 0);
                assert!(v.get("command").is_none(), "{line}");
            }
        }
    }

    #[test]
    fn updates_naming_a_thread_are_told_apart() {
        use agent_runner_proto::runner::ThreadUpdate;
        let created = ClientMessage {
            request_id: Some("c".into()),
            payload: Some(Payload::ThreadUpdate(ThreadUpdate {
                thread_id: "thr-9".into(),
                ..Default::default()
            })),
            ..Default::default()
        };
        assert_eq!(thread_of(&created), Some("thr-9"));
        assert_eq!(
            thread_of(&crate::delivery::messages::request_error(
                Some("r".into()),
                "x"
            )),
            None
        );
    }

    fn said(thread: &str, text: &str) -> Arc<ClientMessage> {
        Arc::new(crate::delivery::messages::item(
            Some("r".into()),
            thread,
            "u",
            sdk_adapter::ItemEvent {
                item_id: "i".into(),
                kind: sdk_adapter::ItemKind::AgentMessage,
                status: sdk_adapter::ItemStatus::Completed,
                text: Some(text.into()),
                command: None,
            },
        ))
    }

    fn texts(text: &str) -> Vec<String> {
        text.lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                v["text"].as_str().unwrap_or("-").to_owned()
            })
            .collect()
    }

    /// A burst is recorded per thread it names, in order; an update naming
    /// none, and a thread's deletion, are not recorded.
    #[test]
    fn a_burst_goes_to_the_transcripts_of_the_threads_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let t = Transcripts::start(dir.path().to_path_buf()).unwrap();
        let deleted = crate::delivery::messages::thread(None, "thr-b", ThreadStatus::Deleted);
        t.record_all(&[
            said("thr-a", "a0"),
            said("thr-a", "a1"),
            Arc::new(crate::delivery::messages::request_error(
                None,
                "names no thread",
            )),
            said("thr-b", "b0"),
            Arc::new(deleted),
            said("thr-a", "a2"),
        ]);
        let a = wait_for(&path(dir.path(), "thr-a").unwrap(), |t| {
            t.lines().count() == 3
        });
        assert_eq!(texts(&a), ["a0", "a1", "a2"]);
        let b = wait_for(&path(dir.path(), "thr-b").unwrap(), |t| {
            t.lines().count() == 1
        });
        assert_eq!(texts(&b), ["b0"]);
        assert!(!a.contains("names no thread") && !b.contains("names no thread"));
    }

    /// A queue no writer takes from yet (the test starts one, or none).
    fn without_writer() -> (Transcripts, Receiver<Job>) {
        let (tx, rx) = tokio::sync::mpsc::channel(QUEUE_CAPACITY);
        let t = Transcripts {
            tx,
            dropped: Arc::new(AtomicU64::new(0)),
            queued: Arc::new(AtomicUsize::new(0)),
            queued_bytes: Arc::new(AtomicUsize::new(0)),
        };
        (t, rx)
    }

    /// The queue is bounded in lines, whatever the jobs hold: past
    /// [`QUEUE_CAPACITY`] a burst is dropped whole, and the next line the
    /// writer writes says how many were lost.
    #[test]
    fn a_full_queue_drops_lines_and_the_transcript_says_how_many() {
        let dir = tempfile::tempdir().unwrap();
        let (t, rx) = without_writer();
        // No writer yet: the queue fills.
        let burst_texts: Vec<String> = (0..16).map(|n| n.to_string()).collect();
        let burst: Vec<Arc<ClientMessage>> = burst_texts.iter().map(|n| said("thr-f", n)).collect();
        for _ in 0..QUEUE_CAPACITY / 16 {
            t.record_all(&burst);
        }
        assert_eq!(t.queued.load(Ordering::Relaxed), QUEUE_CAPACITY);
        t.record_all(&burst[..3]);
        t.record("thr-f", &burst[0]);
        assert_eq!(t.dropped.load(Ordering::Relaxed), 4);
        assert_eq!(t.queued.load(Ordering::Relaxed), QUEUE_CAPACITY);
        let counts = Counts {
            dropped: t.dropped.clone(),
            queued: t.queued.clone(),
            queued_bytes: t.queued_bytes.clone(),
        };
        let root = dir.path().to_path_buf();
        std::thread::spawn(move || writer(root, rx, counts));
        let p = path(dir.path(), "thr-f").unwrap();
        // The writer learns of the loss as it takes the first job, so the
        // gap is said before the lines it took.
        let text = wait_for(&p, |text| text.lines().count() == QUEUE_CAPACITY + 1);
        assert_eq!(t.queued.load(Ordering::Relaxed), 0);
        assert_eq!(t.queued_bytes.load(Ordering::Relaxed), 0);
        let lines: Vec<&str> = text.lines().collect();
        let gap: Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(gap["dropped"], 4, "{}", lines[0]);
        assert_eq!(texts(&lines[1..17].join("\n")), burst_texts);
        drop(t);
    }

    /// The queue holds whole updates, so it is bounded in the text they
    /// carry too: large updates are dropped (counted) past [`QUEUE_BYTES`]
    /// long before the line bound.
    #[test]
    fn a_queue_of_large_updates_is_bounded_in_bytes() {
        let (t, _rx) = without_writer();
        let big = said("thr-b", &"x".repeat(1 << 20));
        let each = weight(&big);
        for _ in 0..40 {
            t.record("thr-b", &big);
        }
        let fit = QUEUE_BYTES / each;
        assert!(fit < 40);
        assert_eq!(t.queued.load(Ordering::Relaxed), fit);
        assert_eq!(t.queued_bytes.load(Ordering::Relaxed), fit * each);
        assert_eq!(t.dropped.load(Ordering::Relaxed), (40 - fit) as u64);
    }

    /// Lines are dropped when the queue is full, a removal never: it waits
    /// for room, and comes after the lines queued before it.
    #[test]
    fn a_removal_waits_for_room_in_a_full_queue() {
        use futures::FutureExt as _;
        let (t, mut rx) = without_writer();
        let update = said("thr-r", "s");
        for _ in 0..QUEUE_CAPACITY {
            t.record("thr-r", &update);
        }
        let mut removal = Box::pin(t.remove("thr-r"));
        assert!(
            (&mut removal).now_or_never().is_none(),
            "queued in a full queue"
        );
        assert!(matches!(rx.try_recv(), Ok(Job::Lines { .. })));
        assert!(
            removal.now_or_never().is_some(),
            "queued once there is room"
        );
        let mut last = None;
        while let Ok(job) = rx.try_recv() {
            last = Some(job);
        }
        assert!(matches!(last, Some(Job::Remove { thread }) if thread == "thr-r"));
    }

    #[test]
    fn unsafe_ids_have_no_path() {
        for id in ["", "../x", "a/b", ".hidden"] {
            assert!(path(Path::new("/t"), id).is_none(), "{id}");
        }
    }
}
