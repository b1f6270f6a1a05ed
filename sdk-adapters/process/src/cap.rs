//! The cap on text (command output, tool results) that travels to the
//! control plane inside one item update.
//!
//! Kept text is the first [`OUTPUT_CAP_BYTES`] bytes, cut on a character
//! boundary, followed by a note line counting what was left out — the same
//! shape the scripted adapter uses, so every SDK reads alike.

/// How many bytes of a command's output (or a tool's result) an item keeps.
pub const OUTPUT_CAP_BYTES: usize = 64 * 1024;

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
}

impl CappedText {
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            kept: String::new(),
            omitted: 0,
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
            cap_text("0123456789abc", 10),
            "0123456789\n[output truncated: 3 bytes omitted]"
        );
    }

    #[test]
    fn a_cut_character_is_omitted_whole() {
        assert_eq!(
            cap_text("abcé!", 4),
            "abc\n[output truncated: 3 bytes omitted]"
        );
    }

    #[test]
    fn pieces_stop_at_the_cap() {
        let mut text = CappedText::new(6);
        assert!(text.is_empty());
        text.push("0123");
        text.push("4567");
        text.push("89");
        assert_eq!(text.text(), "012345\n[output truncated: 4 bytes omitted]");
    }
}
