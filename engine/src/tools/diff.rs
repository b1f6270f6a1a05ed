//! Unified diffs of file changes (the `diff` metadata of write and edit),
//! made with the `similar` crate, and the result those tools report.

use similar::TextDiff;

use super::ToolOutput;
use super::cap::cap_head_tail;

/// The result of a call that wrote the file shown as `shown`: `summary`,
/// and metadata naming the file (`path`), the change (`kind`: `add` when
/// there was no file before, else `update`) and its unified `diff`, capped
/// at `cap` bytes.
pub(crate) fn file_changed(
    summary: String,
    shown: String,
    old: Option<&str>,
    new: &str,
    cap: usize,
) -> ToolOutput {
    let diff = cap_head_tail(&unified_diff(&shown, old, new), cap);
    let kind = if old.is_some() { "update" } else { "add" };
    ToolOutput::ok(summary)
        .with("path", shown)
        .with("kind", kind)
        .with("diff", diff)
}

/// A unified diff from `old` to `new` with `a/`/`b/` headers naming `path`
/// (`/dev/null` for a new file).
pub(crate) fn unified_diff(path: &str, old: Option<&str>, new: &str) -> String {
    let before = old.unwrap_or("");
    let old_header = match old {
        Some(_) => format!("a/{path}"),
        None => "/dev/null".to_string(),
    };
    TextDiff::from_lines(before, new)
        .unified_diff()
        .context_radius(3)
        .header(&old_header, &format!("b/{path}"))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_diff_shows_the_changed_line() {
        let diff = unified_diff("src/a.txt", Some("one\ntwo\nthree\n"), "one\n2\nthree\n");
        assert!(
            diff.starts_with("--- a/src/a.txt\n+++ b/src/a.txt\n"),
            "{diff}"
        );
        assert!(diff.contains("-two\n+2\n"), "{diff}");
    }

    #[test]
    fn new_file_diff_is_all_additions() {
        let diff = unified_diff("n.txt", None, "x\ny\n");
        assert!(diff.starts_with("--- /dev/null\n+++ b/n.txt\n"), "{diff}");
        assert!(diff.contains("+x\n+y\n"), "{diff}");
    }
}
