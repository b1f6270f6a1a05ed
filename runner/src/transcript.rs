//! Per-thread transcripts (issue 15): every update the runner sends for a
//! thread is also appended, as one JSON line, to
//! `<state dir>/transcripts/<thread id>.jsonl`, so an operator can replay
//! what a thread did (`agent-runner logs THREAD`).
//!
//! Recorded where every update enters the outbox ([`crate::outbox`]), for
//! each update whose payload names a thread (thread, turn, item, name and
//! token-usage updates: replies from `commands.rs`/`dispatch.rs` included);
//! a thread's request errors, which name none, are recorded by the thread
//! itself ([`thread_of`] says which is which).
//!
//! Off the hot path: the sender clones the update into a bounded queue
//! ([`QUEUE_CAPACITY`] updates, a non-blocking push) and one writer thread
//! summarises, masks secrets (the runner's redactor) and appends. When the
//! queue is full the update is dropped, never waited for (a transcript must
//! not slow a turn or the link); the writer then appends a `{"dropped": N}`
//! line to the next transcript it writes, so the gap is visible. A file over [`MAX_BYTES`] is
//! rotated to `<thread>.jsonl.1` (one old file kept). A thread's
//! transcripts are removed with the thread.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};

use agent_runner_proto::runner::{ClientMessage, client_message::Payload};
use serde_json::{Value, json};

use crate::redact::Redactor;

/// Lines waiting for the writer at most.
pub const QUEUE_CAPACITY: usize = 4096;
/// A transcript file is rotated past this size.
pub const MAX_BYTES: u64 = 4 * 1024 * 1024;
/// Longest text (item text, command output) kept per line, in bytes.
const MAX_TEXT: usize = 16 * 1024;

enum Job {
    Line {
        thread: String,
        msg: Box<ClientMessage>,
        ts_ms: u64,
    },
    Remove {
        thread: String,
    },
}

/// The queue to the writer thread.
#[derive(Debug, Clone)]
pub struct Transcripts {
    tx: SyncSender<Job>,
    dropped: Arc<AtomicU64>,
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
            Job::Line { thread, .. } => write!(f, "Line({thread})"),
            Job::Remove { thread } => write!(f, "Remove({thread})"),
        }
    }
}

/// Where `thread`'s transcript is under `dir`; `None` for an id that is not
/// a safe file name (ids are checked on arrival; this is a second guard).
pub fn path(dir: &Path, thread: &str) -> Option<PathBuf> {
    let safe = !thread.is_empty()
        && thread.len() <= 200
        && thread
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && !thread.starts_with('.');
    safe.then(|| dir.join(format!("{thread}.jsonl")))
}

/// The rotated (older) file of `current`.
pub fn rotated(current: &Path) -> PathBuf {
    let mut name = current.as_os_str().to_os_string();
    name.push(".1");
    PathBuf::from(name)
}

impl Transcripts {
    /// Start the writer thread, writing under `dir` (created), masking
    /// what `redactor` knows.
    pub fn start(dir: PathBuf, redactor: Redactor) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE_CAPACITY);
        let dropped = Arc::new(AtomicU64::new(0));
        let counter = dropped.clone();
        std::thread::Builder::new()
            .name("transcripts".into())
            .spawn(move || writer(dir, rx, counter, redactor))?;
        Ok(Self { tx, dropped })
    }

    /// Queue `msg` (sent for `thread`) for its transcript: a clone and a
    /// non-blocking push; summarising and masking happen on the writer.
    /// A full queue drops the update (counted).
    pub fn record(&self, thread: &str, msg: &ClientMessage) {
        // A deleted thread's transcript went with it: its last update (the
        // deletion itself) must not make a new file.
        if let Some(Payload::ThreadUpdate(t)) = &msg.payload
            && t.status() == agent_runner_proto::runner::ThreadStatus::Deleted
        {
            return;
        }
        let job = Job::Line {
            thread: thread.to_owned(),
            msg: Box::new(msg.clone()),
            ts_ms: unix_ms(),
        };
        match self.tx.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    /// Remove `thread`'s transcripts (after the lines queued before).
    pub fn remove(&self, thread: &str) {
        // Waits for room: a removal must not be lost.
        let _ = self.tx.send(Job::Remove {
            thread: thread.to_owned(),
        });
    }
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

fn writer(dir: PathBuf, rx: Receiver<Job>, dropped: Arc<AtomicU64>, redactor: Redactor) {
    let mut sizes: HashMap<String, u64> = HashMap::new();
    let mut open: HashMap<String, std::fs::File> = HashMap::new();
    while let Ok(job) = rx.recv() {
        match job {
            Job::Remove { thread } => {
                sizes.remove(&thread);
                open.remove(&thread);
                if let Some(p) = path(&dir, &thread) {
                    let _ = std::fs::remove_file(rotated(&p));
                    let _ = std::fs::remove_file(&p);
                }
            }
            Job::Line { thread, msg, ts_ms } => {
                let Some(p) = path(&dir, &thread) else {
                    continue;
                };
                let mut summary = summary(&msg);
                summary["ts_ms"] = json!(ts_ms);
                let mut line = redactor.redact(&summary.to_string()).into_owned();
                let lost = dropped.swap(0, Ordering::Relaxed);
                if lost > 0 {
                    line = format!("{}\n{line}", json!({"dropped": lost, "ts_ms": unix_ms()}));
                }
                line.push('\n');
                let size = sizes
                    .entry(thread.clone())
                    .or_insert_with(|| std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0));
                if *size + line.len() as u64 > MAX_BYTES && *size > 0 {
                    open.remove(&thread);
                    if let Err(e) = std::fs::rename(&p, rotated(&p)) {
                        tracing::warn!(error = %e, path = %p.display(), "rotating a transcript failed");
                    }
                    *size = 0;
                }
                let file = match open.entry(thread.clone()) {
                    std::collections::hash_map::Entry::Occupied(file) => Ok(file.into_mut()),
                    std::collections::hash_map::Entry::Vacant(slot) => std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&p)
                        .map(|file| slot.insert(file)),
                };
                let written = file.and_then(|f| f.write_all(line.as_bytes()));
                match written {
                    Ok(()) => *size += line.len() as u64,
                    Err(e) => {
                        // Opened afresh next time.
                        open.remove(&thread);
                        tracing::warn!(error = %e, path = %p.display(), "writing a transcript failed")
                    }
                }
                if open.len() > OPEN_FILES
                    && let Some(any) = open.keys().next().cloned()
                {
                    open.remove(&any);
                }
            }
        }
    }
}

fn clip(text: &str) -> String {
    if text.len() <= MAX_TEXT {
        return text.to_owned();
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

/// One transcript line: the update's kind, request id and what it says.
pub fn summary(msg: &ClientMessage) -> Value {
    let mut v = json!({"kind": crate::updates::kind(msg)});
    if let Some(rid) = &msg.request_id {
        v["request_id"] = json!(rid);
    }
    match &msg.payload {
        Some(Payload::TurnUpdate(t)) => {
            v["status"] = json!(format!("{:?}", t.status()));
        }
        Some(Payload::ThreadUpdate(t)) => {
            v["status"] = json!(format!("{:?}", t.status()));
        }
        Some(Payload::ItemUpdate(i)) => {
            v["item_type"] = json!(format!("{:?}", i.item_type()));
            v["status"] = json!(format!("{:?}", i.status()));
            if let Some(text) = &i.text {
                v["text"] = json!(clip(text));
            }
            if let Some(c) = &i.command_execution_item {
                v["command"] = json!(clip(&c.command));
                if let Some(out) = &c.output {
                    v["output"] = json!(clip(out));
                }
            }
        }
        Some(Payload::RequestError(e)) => {
            v["error"] = json!(clip(&e.error_message));
        }
        Some(Payload::ThreadNameUpdate(n)) => {
            v["name"] = json!(n.thread_name);
        }
        _ => {}
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn appends_masks_rotates_and_removes() {
        let dir = tempfile::tempdir().unwrap();
        let redactor = Redactor::default();
        let t = Transcripts::start(dir.path().to_path_buf(), redactor.clone()).unwrap();
        redactor.add("ghs_topsecret");
        let msg = crate::updates::request_error(Some("r1".into()), "token ghs_topsecret refused");
        t.record("thr-1", &msg);
        let p = path(dir.path(), "thr-1").unwrap();
        let text = wait_for(&p, |t| t.contains("request_error"));
        assert!(!text.contains("ghs_topsecret"), "{text}");
        let line: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(line["request_id"], "r1");
        // Past MAX_BYTES it rotates: one old file, a fresh current one.
        let big = crate::updates::request_error(None, "x".repeat(MAX_TEXT));
        for _ in 0..(MAX_BYTES as usize / MAX_TEXT + 2) {
            t.record("thr-1", &big);
        }
        t.record("thr-1", &msg);
        wait_for(&rotated(&p), |t| !t.is_empty());
        t.remove("thr-1");
        for _ in 0..200 {
            if !p.exists() && !rotated(&p).exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("transcripts not removed");
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
            thread_of(&crate::updates::request_error(Some("r".into()), "x")),
            None
        );
    }

    #[test]
    fn unsafe_ids_have_no_path() {
        for id in ["", "../x", "a/b", ".hidden"] {
            assert!(path(Path::new("/t"), id).is_none(), "{id}");
        }
    }
}
