//! `agent-runner logs THREAD [--follow] [--json]`: a thread's transcript
//! (see `crate::delivery::transcript`), readably or as the JSON lines themselves.
//! It reads the files in the state dir (found as `run` finds it:
//! [`RunnerLocation`]), so it works whether or not the runner is running.
//! `--follow` ends, exit 0, when the thread is deleted (its transcript
//! goes with it).

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::locate::RunnerLocation;
use crate::delivery::transcript;

/// Flags of `agent-runner logs`.
#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// The thread id.
    thread: String,
    /// Keep printing lines as they are written, until the thread is
    /// deleted (or Ctrl-C).
    #[arg(long, short = 'f')]
    follow: bool,
    /// Print the JSON lines as stored.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    runner: RunnerLocation,
}

/// How often `--follow` looks for new lines.
const POLL: Duration = Duration::from_millis(250);

/// Prints the transcript (the rotated part first), then follows it.
pub async fn run(args: LogsArgs) -> anyhow::Result<()> {
    let state_dir = args.runner.state_dir()?;
    let dir = transcript::dir(&state_dir);
    let current = transcript::path(&dir, &args.thread)
        .ok_or_else(|| anyhow::anyhow!("thread: {:?} is not a thread id", args.thread))?;
    let old = transcript::rotated(&current);
    if !current.exists() && !old.exists() && !args.follow {
        anyhow::bail!(
            "no transcript for thread {} in {} (unknown thread, deleted, or another --state-dir)",
            args.thread,
            dir.display()
        );
    }
    if let Ok(text) = std::fs::read_to_string(&old) {
        print_lines(&text, args.json);
    }
    let mut offset = 0u64;
    offset += print_from(&current, offset, args.json);
    if !args.follow {
        return Ok(());
    }
    // Whether the transcript was there: once it was, its disappearance
    // (current and rotated file both gone) is the thread's deletion.
    let mut seen = current.exists() || old.exists();
    loop {
        tokio::time::sleep(POLL).await;
        let there = current.exists() || old.exists();
        if seen && !there {
            eprintln!(
                "agent-runner logs: thread {} was deleted (its transcript went with it)",
                args.thread
            );
            return Ok(());
        }
        seen |= there;
        let len = std::fs::metadata(&current).map(|m| m.len()).unwrap_or(0);
        if len < offset {
            // Rotated: the rest of the old file, then the new one from 0.
            let rest = std::fs::read_to_string(&old).unwrap_or_default();
            if let Some(tail) = rest.get(offset as usize..) {
                print_lines(tail, args.json);
            }
            offset = 0;
        }
        offset += print_from(&current, offset, args.json);
    }
}

/// Prints the whole lines of `path` from `offset`; the bytes consumed.
fn print_from(path: &Path, offset: u64, json: bool) -> u64 {
    let Ok(mut file) = std::fs::File::open(path) else {
        return 0;
    };
    if file.seek(SeekFrom::Start(offset)).is_err() {
        return 0;
    }
    let mut text = String::new();
    if file.read_to_string(&mut text).is_err() {
        return 0;
    }
    // Only complete lines: the writer may be mid-line.
    let complete = text.rfind('\n').map(|i| i + 1).unwrap_or(0);
    print_lines(&text[..complete], json);
    complete as u64
}

fn print_lines(text: &str, json: bool) {
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if json {
            println!("{line}");
        } else {
            println!("{}", readable(line));
        }
    }
}

/// `HH:MM:SS.mmm  kind  [request]  details`.
fn readable(line: &str) -> String {
    let Ok(v) = serde_json::from_str::<Value>(line) else {
        return line.to_owned();
    };
    let ms = v["ts_ms"].as_u64().unwrap_or(0);
    let secs = ms / 1000;
    let time = format!(
        "{:02}:{:02}:{:02}.{:03}",
        (secs / 3600) % 24,
        (secs / 60) % 60,
        secs % 60,
        ms % 1000
    );
    if let Some(n) = v["dropped"].as_u64() {
        return format!("{time}  ({n} lines dropped: the transcript queue was full)");
    }
    let mut out = format!("{time}  {}", v["kind"].as_str().unwrap_or("?"));
    if let Some(rid) = v["request_id"].as_str() {
        out.push_str(&format!("  [{rid}]"));
    }
    for key in [
        "status",
        "item_type",
        "name",
        "error",
        "text",
        "command",
        "output",
    ] {
        if let Some(text) = v[key].as_str() {
            let one_line = text.replace('\n', "⏎");
            out.push_str(&format!("  {key}={one_line}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readable_lines_say_kind_request_and_what_happened() {
        let line = r#"{"kind":"item_update","request_id":"m","item_type":"CommandExecution","status":"Completed","command":"echo hi","output":"hi\n","ts_ms":3723004}"#;
        assert_eq!(
            readable(line),
            "01:02:03.004  item_update  [m]  status=Completed  item_type=CommandExecution  command=echo hi  output=hi⏎"
        );
        assert!(readable(r#"{"dropped":3,"ts_ms":0}"#).contains("3 lines dropped"));
    }
}
