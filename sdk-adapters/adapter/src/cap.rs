//! The cap on text that travels to the control plane inside one item update
//! (command output, tool results): one rule for every SDK, beside the item
//! model it belongs to.
//!
//! Output longer than [`OUTPUT_CAP_BYTES`] keeps its first bytes (cut on a
//! character boundary) followed by the line
//! `\n[output truncated: N bytes omitted]`, where N counts every byte not
//! kept; output of at most that size is kept whole, with no note.
//! [`CappedText`] collects text, [`CappedBytes`] raw bytes from a pipe
//! (still read past the cap, so a command never blocks on a full pipe; bytes
//! that are not UTF-8 become U+FFFD).
//!
//! The cap is applied before the runner masks secrets, so a cut through a
//! secret would leave its first bytes unmasked (the masker finds only whole
//! secrets). Secrets hold no whitespace, so when a cut falls inside a run of
//! non-whitespace, the kept text is cut back to the start of that run, or by
//! [`WORD_TAIL`] bytes when the run is longer: no secret shorter than that
//! (every one the runner masks) keeps a prefix.

/// How many bytes of a command's output (or a tool's result) an item keeps.
pub const OUTPUT_CAP_BYTES: usize = 64 * 1024;

/// How far a cut inside a word is moved back at most (longer than any
/// secret the runner masks).
pub const WORD_TAIL: usize = 4 * 1024;

/// How many bytes of `kept` stay when the text after it (cut away) goes on
/// with `next`: all of them at a word boundary, else up to the start of the
/// last word, or [`WORD_TAIL`] fewer when that word is longer.
fn word_safe_len(kept: &[u8], next: Option<u8>) -> usize {
    let in_word = |b: u8| !b.is_ascii_whitespace();
    match (kept.last(), next) {
        (Some(&last), Some(next)) if in_word(last) && in_word(next) => {}
        _ => return kept.len(),
    }
    let floor = kept.len().saturating_sub(WORD_TAIL);
    match kept[floor..].iter().rposition(|&b| !in_word(b)) {
        Some(i) => floor + i + 1,
        None => floor,
    }
}

/// `text` cut to at most `cap` bytes (on a character boundary) plus a note
/// `\n[output truncated: N bytes omitted]` when anything was cut.
pub fn cap_text(text: &str, cap: usize) -> String {
    let mut capped = CappedText::new(cap);
    capped.push(text);
    capped.text()
}

/// Text that grows in pieces (streamed output) under a cap.
#[derive(Debug, Clone)]
pub struct CappedText {
    cap: usize,
    kept: String,
    omitted: u64,
    /// The first byte cut away, once anything was.
    first_omitted: Option<u8>,
}

impl CappedText {
    /// Keeps at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            kept: String::new(),
            omitted: 0,
            first_omitted: None,
        }
    }

    /// Add the next piece; what does not fit is only counted.
    pub fn push(&mut self, more: &str) {
        if self.omitted > 0 {
            self.omitted = self.omitted.saturating_add(more.len() as u64);
            return;
        }
        let room = self.cap.saturating_sub(self.kept.len());
        if more.len() <= room {
            self.kept.push_str(more);
            return;
        }
        let cut = floor_char_boundary(more, room);
        self.kept.push_str(&more[..cut]);
        self.omitted = (more.len() - cut) as u64;
        self.first_omitted = more.as_bytes().get(cut).copied();
        let keep = floor_char_boundary(
            &self.kept,
            word_safe_len(self.kept.as_bytes(), self.first_omitted),
        );
        self.omitted = self.omitted.saturating_add((self.kept.len() - keep) as u64);
        self.kept.truncate(keep);
    }

    /// Whether nothing was pushed (or only empty pieces).
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty() && self.omitted == 0
    }

    /// The kept text, plus the truncation note when anything was cut.
    pub fn text(&self) -> String {
        if self.omitted == 0 {
            return self.kept.clone();
        }
        format!(
            "{}\n[output truncated: {} bytes omitted]",
            self.kept, self.omitted
        )
    }
}

fn floor_char_boundary(text: &str, index: usize) -> usize {
    let mut cut = index.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    cut
}

/// Collects output up to a cap and counts what went over.
#[derive(Debug)]
pub struct CappedBytes {
    cap: usize,
    kept: Vec<u8>,
    omitted: u64,
    /// The first byte cut away, once anything was.
    first_omitted: Option<u8>,
}

impl CappedBytes {
    /// Keeps at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            kept: Vec::new(),
            omitted: 0,
            first_omitted: None,
        }
    }

    /// Add the next bytes the command wrote.
    pub fn push(&mut self, bytes: &[u8]) {
        let room = self.cap.saturating_sub(self.kept.len()).min(bytes.len());
        self.kept.extend_from_slice(&bytes[..room]);
        if self.first_omitted.is_none() && room < bytes.len() {
            self.first_omitted = Some(bytes[room]);
        }
        self.omitted = self
            .omitted
            .saturating_add(u64::try_from(bytes.len() - room).unwrap_or(u64::MAX));
    }

    /// The text an item carries: the kept bytes, plus the truncation note when
    /// anything was omitted.
    pub fn finish(mut self) -> String {
        if self.omitted == 0 {
            return String::from_utf8_lossy(&self.kept).into_owned();
        }
        let keep = word_safe_len(&self.kept, self.first_omitted);
        self.omitted = self.omitted.saturating_add((self.kept.len() - keep) as u64);
        self.kept.truncate(keep);
        // Don't end on half a character: move an incomplete trailing sequence
        // to the omitted count (invalid bytes elsewhere become U+FFFD below).
        if let Err(e) = std::str::from_utf8(&self.kept)
            && e.error_len().is_none()
        {
            let cut = self.kept.len() - e.valid_up_to();
            self.kept.truncate(e.valid_up_to());
            self.omitted = self.omitted.saturating_add(cut as u64);
        }
        let mut text = String::from_utf8_lossy(&self.kept).into_owned();
        text.push_str(&format!(
            "\n[output truncated: {} bytes omitted]",
            self.omitted
        ));
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept_whole() {
        assert_eq!(cap_text("hello", 10), "hello");
    }

    #[test]
    fn long_text_keeps_the_start_and_counts_the_rest() {
        assert_eq!(
            cap_text("01234 6789 abc", 10),
            "01234 6789\n[output truncated: 4 bytes omitted]"
        );
    }

    #[test]
    fn a_cut_character_is_omitted_whole() {
        assert_eq!(
            cap_text("ab é!", 4),
            "ab \n[output truncated: 3 bytes omitted]"
        );
    }

    #[test]
    fn pieces_stop_at_the_cap() {
        let mut text = CappedText::new(6);
        assert!(text.is_empty());
        text.push("0123");
        text.push("4 67");
        text.push("89");
        assert_eq!(text.text(), "01234 \n[output truncated: 4 bytes omitted]");
    }

    #[test]
    fn under_the_cap_is_kept_whole() {
        let mut out = CappedBytes::new(10);
        out.push(b"hello");
        out.push(b"world");
        assert_eq!(out.finish(), "helloworld");
    }

    #[test]
    fn over_the_cap_keeps_the_start_and_counts_the_rest() {
        let mut out = CappedBytes::new(10);
        out.push(b"01234 6");
        out.push(b"789 bc");
        out.push(b"def");
        assert_eq!(
            out.finish(),
            "01234 6789\n[output truncated: 6 bytes omitted]"
        );
    }

    #[test]
    fn a_cut_character_is_omitted_whole_from_bytes() {
        // "é" is two bytes; the cap falls between them.
        let mut out = CappedBytes::new(4);
        out.push("ab é!".as_bytes());
        assert_eq!(out.finish(), "ab \n[output truncated: 3 bytes omitted]");
    }

    #[test]
    fn a_cut_inside_a_word_keeps_no_part_of_it() {
        let secret = "ghs_0123456789abcdefABCDEF";
        let text = format!("token: {secret} end");
        for cap in 8..text.len() - 4 {
            let capped = cap_text(&text, cap);
            let kept = capped.split('\n').next().unwrap_or_default();
            assert!(
                kept.ends_with(' ') || kept.len() < 7 || kept.ends_with(secret),
                "cap {cap}: {capped:?}"
            );
            assert!(
                !kept.contains("ghs_") || kept.contains(secret),
                "{capped:?}"
            );
            let omitted = text.len() - kept.len();
            assert!(capped.ends_with(&format!("[output truncated: {omitted} bytes omitted]")));
            let mut bytes = CappedBytes::new(cap);
            for chunk in text.as_bytes().chunks(5) {
                bytes.push(chunk);
            }
            assert_eq!(bytes.finish(), capped, "bytes, cap {cap}");
        }
    }

    #[test]
    fn a_cut_word_longer_than_the_tail_loses_the_tail() {
        let text = "x".repeat(WORD_TAIL * 3);
        let capped = cap_text(&text, WORD_TAIL * 2);
        assert_eq!(
            capped,
            format!(
                "{}\n[output truncated: {} bytes omitted]",
                "x".repeat(WORD_TAIL),
                WORD_TAIL * 2
            )
        );
        let mut pieces = CappedText::new(10);
        pieces.push("abc defg");
        pieces.push("hij");
        assert_eq!(pieces.text(), "abc \n[output truncated: 7 bytes omitted]");
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let mut out = CappedBytes::new(10);
        out.push(b"a\xffb");
        assert_eq!(out.finish(), "a\u{fffd}b");
    }
}
