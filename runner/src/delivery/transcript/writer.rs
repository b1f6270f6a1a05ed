//! The writer thread: drains the queue and appends each job's lines,
//! buffered, to its thread's file; writes everything out when the queue
//! runs empty, and says how many lines were dropped.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use tokio::sync::mpsc::Receiver;
use tokio::sync::mpsc::error::TryRecvError;

use serde_json::json;

use super::files::{Files, safe_id};
use super::{Counts, Job, unix_ms};

/// How long the writer lets lines gather after catching up (a line is on
/// disk this much later at most; at the highest update rates measured,
/// 200,000 a second, a few hundred lines of the queue's 4,096).
const GATHER: std::time::Duration = std::time::Duration::from_millis(2);

/// The writer thread's body: runs until every sender is gone.
pub(super) fn run(dir: PathBuf, mut rx: Receiver<Job>, counts: Counts) {
    let mut files = Files::new(dir);
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
                lines,
                count,
            } => {
                counts.queued.fetch_sub(count, Ordering::Relaxed);
                counts
                    .queued_bytes
                    .fetch_sub(lines.len(), Ordering::Relaxed);
                if !safe_id(&thread) {
                    continue;
                }
                let lost = counts.dropped.swap(0, Ordering::Relaxed);
                if lost > 0 {
                    scratch.clear();
                    let gap = json!({"dropped": lost, "ts_ms": unix_ms()});
                    if serde_json::to_writer(&mut scratch, &gap).is_ok() {
                        scratch.push(b'\n');
                        files.append(&thread, &scratch);
                    }
                }
                files.append(&thread, &lines);
            }
        }
    }
    files.flush_all();
}
