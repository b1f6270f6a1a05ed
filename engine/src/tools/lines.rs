//! Lines as the file tools show them to the model: a file's line decoded
//! (invalid UTF-8 replaced, a Windows `\r` dropped), a long line cut, and a
//! sorted list of lines kept under the output cap.

use std::borrow::Cow;

/// One line of a file as read (without its `\n`), as text.
pub(crate) fn line_text(line: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(line.strip_suffix(b"\r").unwrap_or(line))
}

/// `text` cut after `max_chars` characters, `mark` appended where it was cut.
pub(crate) fn cut_chars(text: &str, max_chars: usize, mark: &str) -> String {
    match text.char_indices().nth(max_chars) {
        Some((at, _)) => format!("{}{mark}", &text[..at]),
        None => text.to_string(),
    }
}

/// `lines`, one a line, as many as fit in `max_lines` lines and `cap`
/// bytes; the text and how many lines it holds.
pub(crate) fn capped_lines(lines: &[String], max_lines: usize, cap: usize) -> (String, usize) {
    let mut output = String::new();
    let mut shown = 0;
    for line in lines {
        if shown >= max_lines || output.len() + line.len() + 1 > cap {
            break;
        }
        output.push_str(line);
        output.push('\n');
        shown += 1;
    }
    (output, shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_decoded_without_carriage_returns() {
        assert_eq!(line_text(b"plain"), "plain");
        assert_eq!(line_text(b"dos\r"), "dos");
        assert_eq!(line_text(b"bad \xff\r"), "bad \u{FFFD}");
        assert_eq!(line_text(b"inner\rkept"), "inner\rkept");
    }

    #[test]
    fn long_lines_are_cut_on_characters() {
        assert_eq!(cut_chars("short", 10, "…"), "short");
        assert_eq!(cut_chars("ééééé", 3, "… [cut]"), "ééé… [cut]");
        assert_eq!(cut_chars("abc", 3, "…"), "abc");
    }

    #[test]
    fn lists_stop_at_the_line_limit_or_the_cap() {
        let lines: Vec<String> = ["a", "bb", "ccc"].map(String::from).into();
        assert_eq!(capped_lines(&lines, 10, 100), ("a\nbb\nccc\n".into(), 3));
        assert_eq!(capped_lines(&lines, 2, 100), ("a\nbb\n".into(), 2));
        assert_eq!(capped_lines(&lines, 10, 6), ("a\nbb\n".into(), 2));
        assert_eq!(capped_lines(&[], 10, 100), (String::new(), 0));
    }
}
