//! A Claude Code session's transcript (`<config dir>/projects/<project>/
//! <session id>.jsonl`, the config dir being the thread's own,
//! `<home>/.claude`, `home` the thread's HOME): whether the session can be
//! resumed from it, and the session's title in it. It outlives the runner,
//! so a restarted runner resumes the session.
//!
//! The HOME is the agent's: every read goes beneath it through directory
//! fds, never through a link, and opens only a regular file (a FIFO planted
//! there is refused without blocking).

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use sdk_adapter::beneath;
use serde_json::Value;

/// How much of each transcript line is looked at for its `type` (an
/// entry's `type` comes before its content, so a huge entry still shows
/// what it is without being read into memory).
const LINE_PREFIX: usize = 1024;

/// Whether the session can be resumed (`--resume`) rather than started
/// (`--session-id`).
///
/// Claude creates the transcript before it writes the first message, and
/// writes other entries (its queue's) before it too: one killed in between
/// (an interrupt or a cancelled approval early in the first turn) leaves a
/// file that `--resume` refuses ("No conversation found") and
/// `--session-id` refuses too ("already in use"). So a transcript counts
/// only when one of its entries is a message; one with none is removed
/// (nothing of the conversation is in it) and the session starts afresh.
pub(crate) fn prepare_resume(home: &Path, session_id: &str) -> bool {
    resumable(home, session_id).unwrap_or_else(|e| {
        tracing::debug!(error = %e, "could not read the session's transcript");
        false
    })
}

fn resumable(home: &Path, session_id: &str) -> std::io::Result<bool> {
    let found = each_transcript(
        home,
        session_id,
        |project_name, project, file, transcript| {
            if holds_message(transcript)? {
                return Ok(Some(()));
            }
            tracing::info!(
                project = project_name,
                "a session transcript without a message (claude stopped before its first) is removed; the session starts afresh"
            );
            beneath::remove_file(project, file)?;
            Ok(None)
        },
    )?;
    Ok(found.is_some())
}

/// Calls `found` with each transcript file of `session_id` in the thread's
/// config dir (its project's name and fd, the file's name, the file opened)
/// until it returns something; everything opened beneath the HOME, as the
/// module doc says.
fn each_transcript<T>(
    home: &Path,
    session_id: &str,
    mut found: impl FnMut(&str, &OwnedFd, &str, File) -> std::io::Result<Option<T>>,
) -> std::io::Result<Option<T>> {
    let root = beneath::open_root(home)?;
    let Some(config) = beneath::open_dir(&root, crate::config_dir::DIR_NAME)? else {
        return Ok(None);
    };
    let path = crate::config_dir::thread_config_dir(home);
    let file = format!("{session_id}.jsonl");
    crate::config_dir::find_in_projects(&config, &path, |name, project| {
        match beneath::open_file(project, &file)? {
            Some(transcript) => found(name, project, &file, transcript),
            None => Ok(None),
        }
    })
}

/// Whether any entry of `transcript` is a message (`user` or `assistant`),
/// looking at the first [`LINE_PREFIX`] bytes of each line only.
fn holds_message(transcript: impl Read) -> std::io::Result<bool> {
    let is_message = |prefix: &[u8]| {
        let prefix = String::from_utf8_lossy(prefix);
        prefix.contains(r#""type":"user""#) || prefix.contains(r#""type":"assistant""#)
    };
    let mut reader = BufReader::with_capacity(64 << 10, transcript);
    let mut prefix = Vec::with_capacity(LINE_PREFIX);
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(is_message(&prefix));
        }
        let newline = buf.iter().position(|&b| b == b'\n');
        let take = newline.unwrap_or(buf.len());
        let room = LINE_PREFIX.saturating_sub(prefix.len());
        prefix.extend_from_slice(&buf[..take.min(room)]);
        reader.consume(take + usize::from(newline.is_some()));
        if newline.is_some() {
            if is_message(&prefix) {
                return Ok(true);
            }
            prefix.clear();
        }
    }
}

/// Claude Code's title for a session, from its transcript: the last
/// `custom-title` entry (`customTitle`, a title a person or Claude Code set),
/// else the last `summary` entry (`summary`, Claude Code's own summary of
/// the conversation). `None` when it has neither.
///
/// Read after every turn, so read on from where the last read stopped: a
/// transcript only grows, and reading it whole each time made a long
/// session's turns read more and more of it. Read as [`prepare_resume`]
/// reads it (beneath the HOME, no link, a regular file); from the start
/// again when it is another file or shorter than what was read.
#[derive(Debug, Default)]
pub(crate) struct TitleScan {
    /// The transcript read so far: its device and inode.
    file: Option<(u64, u64)>,
    /// How many bytes of it were read (whole lines).
    read: u64,
    custom: Option<String>,
    summary: Option<String>,
}

impl TitleScan {
    /// The session's title, its transcript read on from the last call.
    pub(crate) fn title(&mut self, home: &Path, session_id: &str) -> Option<String> {
        let transcript =
            each_transcript(home, session_id, |_, _, _, transcript| Ok(Some(transcript)));
        if let Ok(Some(transcript)) = transcript
            && let Err(e) = self.read_on(transcript)
        {
            tracing::debug!(error = %e, "could not read the session's transcript for its title");
        }
        self.custom.clone().or_else(|| self.summary.clone())
    }

    fn read_on(&mut self, mut transcript: File) -> std::io::Result<()> {
        let meta = transcript.metadata()?;
        let file = Some((meta.dev(), meta.ino()));
        if self.file != file || meta.len() < self.read {
            *self = Self {
                file,
                ..Self::default()
            };
        }
        transcript.seek(SeekFrom::Start(self.read))?;
        let mut reader = BufReader::new(transcript);
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = reader.read_until(b'\n', &mut line)?;
            if n == 0 {
                return Ok(());
            }
            self.take(&line);
            // A last line without its newline (still being written, or the
            // file's end) counts now and is read again next time, whole:
            // taking a title line twice changes nothing.
            if line.last() != Some(&b'\n') {
                return Ok(());
            }
            self.read += n as u64;
        }
    }

    /// One line of the transcript: a title entry updates the title.
    fn take(&mut self, line: &[u8]) {
        // Cheap filter first: transcripts are mostly messages.
        let has = |needle: &[u8]| line.windows(needle.len()).any(|w| w == needle);
        if !has(b"\"custom-title\"") && !has(b"\"summary\"") {
            return;
        }
        let Ok(entry) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        let text = |key: &str| {
            entry
                .get(key)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
        };
        match entry.get("type").and_then(Value::as_str) {
            Some("custom-title") => self.custom = text("customTitle").or(self.custom.take()),
            Some("summary") => self.summary = text("summary").or(self.summary.take()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn title_of(lines: &[&str]) -> Option<String> {
        let home = tempfile::tempdir().expect("tempdir");
        let project = home.path().join(".claude/projects/p");
        std::fs::create_dir_all(&project).expect("dirs");
        std::fs::write(project.join("s.jsonl"), lines.join("\n")).expect("write");
        TitleScan::default().title(home.path(), "s")
    }

    /// Only a transcript holding a message is one to resume; one without
    /// (claude killed before its first) is removed; a link or a FIFO planted
    /// at its name, or a linked project dir, is none, is left alone, and
    /// none blocks.
    #[test]
    fn only_a_transcript_with_a_message_is_resumed() {
        let home = tempfile::tempdir().expect("tempdir");
        let projects = home.path().join(".claude/projects");
        std::fs::create_dir_all(projects.join("p")).expect("dirs");
        let s = projects.join("p/s.jsonl");
        assert!(!prepare_resume(home.path(), "s"), "none yet");
        std::fs::write(&s, b"").expect("write");
        assert!(!prepare_resume(home.path(), "s"), "an empty file");
        assert!(!s.exists(), "removed, so --session-id takes the id again");
        // Only claude's queue entries: no conversation, removed.
        let big = "x".repeat(200_000);
        let queued =
            format!(r#"{{"type":"queue-operation","operation":"enqueue","content":"{big}"}}"#);
        std::fs::write(&s, format!("{queued}\n")).expect("write");
        assert!(!prepare_resume(home.path(), "s"), "queue entries only");
        assert!(!s.exists());
        // A huge queue entry, then the message: resumed, kept.
        let user = format!(r#"{{"parentUuid":null,"type":"user","message":"{big}"}}"#);
        std::fs::write(&s, format!("{queued}\n{user}")).expect("write");
        assert!(
            prepare_resume(home.path(), "s"),
            "a message after a huge entry"
        );
        assert!(s.exists(), "a conversation is never removed");

        let elsewhere = tempfile::tempdir().expect("tempdir");
        let real = elsewhere.path().join("real.jsonl");
        std::fs::write(&real, br#"{"type":"assistant"}"#).expect("write");
        std::os::unix::fs::symlink(&real, projects.join("p/linked.jsonl")).expect("link");
        assert!(
            !prepare_resume(home.path(), "linked"),
            "a link is not followed"
        );
        assert!(real.exists(), "nor is its target removed");
        std::os::unix::fs::symlink(elsewhere.path(), projects.join("q")).expect("link");
        std::fs::write(elsewhere.path().join("other.jsonl"), br#"{"type":"user"}"#).expect("write");
        assert!(
            !prepare_resume(home.path(), "other"),
            "nor a linked project"
        );
        assert!(elsewhere.path().join("other.jsonl").exists());
        std::fs::write(
            elsewhere.path().join("titled.jsonl"),
            br#"{"type":"custom-title","customTitle":"Theirs"}"#,
        )
        .expect("write");
        std::os::unix::fs::symlink(
            elsewhere.path().join("titled.jsonl"),
            projects.join("p/titled.jsonl"),
        )
        .expect("link");
        assert_eq!(
            TitleScan::default().title(home.path(), "titled"),
            None,
            "nor read for a title"
        );
        let fifo = projects.join("p/fifo.jsonl");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo makes the FIFO");
        assert_eq!(TitleScan::default().title(home.path(), "fifo"), None);
        assert!(
            !prepare_resume(home.path(), "fifo"),
            "a FIFO is no transcript"
        );
    }

    #[test]
    fn a_custom_title_wins_over_summaries_and_the_last_of_each_counts() {
        assert_eq!(title_of(&[r#"{"type":"user","text":"summary"}"#]), None);
        assert_eq!(
            title_of(&[
                r#"{"type":"summary","summary":"First","leafUuid":"x"}"#,
                r#"{"type":"summary","summary":"Second","leafUuid":"y"}"#,
            ])
            .as_deref(),
            Some("Second")
        );
        assert_eq!(
            title_of(&[
                r#"{"type":"custom-title","customTitle":"Mine","sessionId":"s"}"#,
                r#"{"type":"summary","summary":"Theirs","leafUuid":"y"}"#,
                r#"not json "summary""#,
                r#"{"type":"custom-title","customTitle":"  ","sessionId":"s"}"#,
            ])
            .as_deref(),
            Some("Mine")
        );
    }

    /// After every turn the scan reads on from where it stopped: what was
    /// appended is seen (a line still being written, when it is whole), a
    /// new file in its place or one cut shorter is read from the start.
    #[test]
    fn the_title_is_read_on_from_where_the_last_read_stopped() {
        use std::io::Write as _;
        let home = tempfile::tempdir().expect("tempdir");
        let project = home.path().join(".claude/projects/p");
        std::fs::create_dir_all(&project).expect("dirs");
        let path = project.join("s.jsonl");
        let mut file = std::fs::File::create(&path).expect("create");
        let mut scan = TitleScan::default();
        writeln!(file, r#"{{"type":"user","message":"hi"}}"#).expect("write");
        assert_eq!(scan.title(home.path(), "s"), None);
        let read = scan.read;
        assert!(read > 0);
        writeln!(file, r#"{{"type":"summary","summary":"First"}}"#).expect("write");
        assert_eq!(scan.title(home.path(), "s").as_deref(), Some("First"));
        assert!(scan.read > read, "read on, not again from the start");
        // Being written: not yet whole, then whole.
        write!(file, r#"{{"type":"custom-title","customTitle":"Mi"#).expect("write");
        assert_eq!(scan.title(home.path(), "s").as_deref(), Some("First"));
        writeln!(file, r#"ne"}}"#).expect("write");
        assert_eq!(scan.title(home.path(), "s").as_deref(), Some("Mine"));
        // Another file in its place: read from the start.
        drop(file);
        std::fs::remove_file(&path).expect("remove");
        std::fs::write(&path, "{\"type\":\"summary\",\"summary\":\"Fresh\"}\n").expect("write");
        assert_eq!(scan.title(home.path(), "s").as_deref(), Some("Fresh"));
        // The same file cut shorter: read from the start too.
        std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .expect("open");
        assert_eq!(scan.title(home.path(), "s"), None);
    }
}
