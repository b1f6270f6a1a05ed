//! Skipping visibly. A test whose tool is missing (podman, tinyproxy, npm
//! for the real codex, …) passes without checking anything; [`skip`] says
//! so on stderr and appends a line `<test>\t<reason>` to the skip ledger,
//! so a green run can still tell which tests did not run (`.ci/run` prints
//! the ledger and fails when a test CI must run skipped).
//!
//! The ledger is `AGENT_RUNNER_SKIP_LEDGER` when set, else
//! `<target>/test-skips.txt` ([`target_dir`]). Test processes run in
//! parallel: each line is one `write` to a file opened with `O_APPEND`, so
//! lines never interleave.

use std::io::Write as _;
use std::path::PathBuf;

use crate::paths::target_dir;

/// The variable naming the ledger file.
pub const LEDGER_ENV: &str = "AGENT_RUNNER_SKIP_LEDGER";

/// A ledger line is at most this long (one atomic write, even to a pipe).
const MAX_LINE: usize = 4000;

/// Where skips are recorded.
pub fn ledger_path() -> PathBuf {
    std::env::var_os(LEDGER_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("test-skips.txt"))
}

/// The running test as `<test binary>::<test path>` (`e2e::proxy::the_…`,
/// `deploy::image::the_…`): libtest runs each test on a thread named after
/// it; the binary is this executable without cargo's hash suffix. Outside a
/// test thread the thread's name (or `?`) stands in for the test path.
pub fn current_test() -> String {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let binary = match exe.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            name.to_owned()
        }
        _ => exe,
    };
    let thread = std::thread::current();
    format!("{binary}::{}", thread.name().unwrap_or("?"))
}

/// Records that `test_name` did not run, and why: `SKIPPED <test>: <reason>`
/// on stderr (shown with `--nocapture` and for failing tests) and a line in
/// the ledger. A ledger named by [`LEDGER_ENV`] that cannot be written fails
/// the test (CI relies on it); the default one only warns.
pub fn skip(test_name: &str, reason: &str) {
    eprintln!("SKIPPED {test_name}: {reason}");
    let path = ledger_path();
    if let Err(e) = append_line(&path, &ledger_line(test_name, reason)) {
        let what = format!("cannot record the skip in {}: {e}", path.display());
        assert!(std::env::var_os(LEDGER_ENV).is_none(), "{what}");
        eprintln!("({what})");
    }
}

/// [`skip`] for the running test ([`current_test`]).
pub fn skip_this_test(reason: &str) {
    skip(&current_test(), reason);
}

/// `<test>\t<reason>\n`, on one line (tabs and line breaks in either become
/// spaces), cut to [`MAX_LINE`] bytes.
fn ledger_line(test_name: &str, reason: &str) -> String {
    let flat = |s: &str| s.trim().replace(['\t', '\n', '\r'], " ");
    let mut line = format!("{}\t{}", flat(test_name), flat(reason));
    if line.len() > MAX_LINE - 1 {
        let mut cut = MAX_LINE - 4;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
        line.push_str("...");
    }
    line.push('\n');
    line
}

/// Appends `line` with one `write` to `path` opened `O_APPEND` (created, with
/// its directory, when missing).
fn append_line(path: &std::path::Path, line: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let written = file.write(line.as_bytes())?;
    if written == line.len() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "short write: {written} of {} bytes",
            line.len()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ledger_line_is_one_line_of_two_fields() {
        let line = ledger_line("e2e::proxy::t", "apt-get failed:\nE: no\tnetwork\n");
        assert_eq!(line, "e2e::proxy::t\tapt-get failed: E: no network\n");
        let long = ledger_line("t", &"é".repeat(5000));
        assert!(long.len() <= MAX_LINE, "{}", long.len());
        assert!(long.ends_with("...\n"));
    }

    #[test]
    fn parallel_appends_never_interleave() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/ledger.txt");
        std::thread::scope(|s| {
            for t in 0..8 {
                let path = &path;
                s.spawn(move || {
                    for i in 0..200 {
                        let line =
                            ledger_line(&format!("t{t}"), &format!("{i} {}", "x".repeat(500)));
                        append_line(path, &line).unwrap();
                    }
                });
            }
        });
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 8 * 200);
        assert!(
            lines
                .iter()
                .all(|l| l.split('\t').count() == 2 && l.ends_with('x'))
        );
    }

    #[test]
    fn the_current_test_is_named_after_its_thread() {
        let name = current_test();
        assert!(
            name.ends_with("::skip::tests::the_current_test_is_named_after_its_thread"),
            "{name}"
        );
        assert!(name.starts_with("test_kit::"), "{name}");
    }
}
