//! Test support, not for production: the plumbing the fake agent CLIs
//! (`fake-codex`, `fake-claude`, which stand in for the real ones in the
//! adapters' test suites) share, and the suites' view of what they log.
//!
//! Only compiled with the `fake` feature: the fake binaries require it
//! (`required-features`) and the suites enable it through their
//! dev-dependencies; normal builds never see it.

// Test support: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::mpsc;

use serde_json::Value;

/// Writes `value` as one line to stdout and flushes it.
pub fn out(value: &Value) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{value}");
    let _ = stdout.flush();
}

/// Writes `line` as it is (JSON or not) to stdout and flushes it.
pub fn raw(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

/// Reads stdin as JSON lines on a thread of its own. Malformed lines are
/// reported on stderr (as `<name>: bad input line: …`) and skipped; the
/// channel closes at the end of stdin.
pub fn read_stdin(name: &'static str) -> mpsc::Receiver<Value> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            match serde_json::from_str::<Value>(&line) {
                Ok(value) => {
                    if tx.send(value).is_err() {
                        break;
                    }
                }
                Err(e) => eprintln!("{name}: bad input line: {e}"),
            }
        }
    });
    rx
}

/// The append-only log a fake keeps of what it did, one line each (it
/// outlives the process, so a suite can count restarts): written by the
/// fake, read by the suite.
#[derive(Debug, Clone)]
pub struct FakeLog {
    path: PathBuf,
}

impl FakeLog {
    /// The log in the file at `path` (created on the first append).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Appends `line`; a log that cannot be written is ignored.
    pub fn append(&self, line: &str) {
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
        {
            let _ = writeln!(file, "{line}");
        }
    }

    /// Appends `pid N` for this process (see [`FakeLog::pids`]).
    pub fn append_pid(&self) {
        self.append(&format!("pid {}", std::process::id()));
    }

    /// Every line so far (none if nothing was logged yet).
    pub fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The rest of every line that starts with `tag` and a space, in order.
    pub fn tagged(&self, tag: &str) -> Vec<String> {
        let prefix = format!("{tag} ");
        self.lines()
            .into_iter()
            .filter_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
            .collect()
    }

    /// The pids [`FakeLog::append_pid`] logged, in order.
    pub fn pids(&self) -> Vec<i32> {
        self.tagged("pid")
            .iter()
            .map(|p| p.parse().unwrap())
            .collect()
    }
}
