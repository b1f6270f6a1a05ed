//! How long this machine's filesystem takes to create a directory and a
//! file in it, sampled while a scenario runs (start-up's, mostly).
//!
//! A fresh runner creates about ten files and directories before it
//! registers (its state dir, lock, databases, sockets). On this machine's
//! root filesystem (ext4 mounted with online `discard`) those creations
//! slowed from about 0.25 ms to about 2 ms, for every process, for a minute
//! or more after a scenario deleted thousands of thread directories, and
//! starts measured then ran twice as long. Sampled beside the starts, the
//! figure tells such a series from a slower runner.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

use crate::stats::Summary;

/// Time between samples: light enough not to be load itself.
const EVERY: Duration = Duration::from_millis(10);

/// A running probe; [`FsProbe::finish`] stops it and summarizes. Dropped
/// unfinished (a scenario that failed), it stops too.
pub struct FsProbe {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<Duration>>>,
}

impl Drop for FsProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl FsProbe {
    /// Starts sampling in a new temporary directory (where the runners'
    /// temporary directories are made).
    pub fn start() -> Result<Self> {
        let dir = tempfile::tempdir().context("creating the filesystem probe's directory")?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("fs-probe".into())
            .spawn(move || {
                let mut samples = Vec::new();
                let sub = dir.path().join("d");
                while !stopped.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let created = std::fs::create_dir(&sub)
                        .and_then(|()| std::fs::File::create(sub.join("f")));
                    if created.is_ok() {
                        samples.push(started.elapsed());
                    }
                    let _ = std::fs::remove_dir_all(&sub);
                    std::thread::sleep(EVERY);
                }
                samples
            })
            .context("starting the filesystem probe")?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops sampling: the distribution of mkdir + create, if any sample
    /// was taken.
    pub fn finish(mut self) -> Option<Summary> {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self.thread.take()?.join().ok()?;
        (!samples.is_empty()).then(|| Summary::of(&samples))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_until_finished() {
        let probe = FsProbe::start().expect("start");
        std::thread::sleep(EVERY * 3);
        let s = probe.finish().expect("at least one sample");
        assert!(s.p50_us > 0.0, "{s:?}");
    }

    #[test]
    fn dropped_unfinished_it_stops() {
        let probe = FsProbe::start().expect("start");
        let stop = probe.stop.clone();
        drop(probe);
        assert!(stop.load(Ordering::Relaxed));
    }
}
