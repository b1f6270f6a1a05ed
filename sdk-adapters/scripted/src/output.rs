//! The cap on a command's recorded output.
//!
//! A command may print without limit, but its output travels to the control
//! plane inside one item update, so only the first [`OUTPUT_CAP_BYTES`] are
//! kept; the rest is counted (and still read, so the command never blocks on
//! a full pipe) and reported as a final note line.

/// How many bytes of a command's combined stdout+stderr an item keeps.
///
/// Output longer than this keeps its first `OUTPUT_CAP_BYTES` bytes (fewer by
/// up to 3 when the cut would split a UTF-8 character) followed by the line
/// `\n[output truncated: N bytes omitted]`, where N counts every byte not
/// kept. Output of at most this size is kept whole, with no note. Bytes that
/// are not UTF-8 are replaced by U+FFFD.
pub const OUTPUT_CAP_BYTES: usize = 64 * 1024;

/// Collects output up to a cap and counts what went over.
#[derive(Debug)]
pub(crate) struct CappedOutput {
    cap: usize,
    kept: Vec<u8>,
    omitted: u64,
}

impl CappedOutput {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            cap,
            kept: Vec::new(),
            omitted: 0,
        }
    }

    /// Add the next bytes the command wrote.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        let room = self.cap.saturating_sub(self.kept.len()).min(bytes.len());
        self.kept.extend_from_slice(&bytes[..room]);
        self.omitted = self
            .omitted
            .saturating_add(u64::try_from(bytes.len() - room).unwrap_or(u64::MAX));
    }

    /// The text an item carries: the kept bytes, plus the truncation note when
    /// anything was omitted.
    pub(crate) fn finish(mut self) -> String {
        if self.omitted == 0 {
            return String::from_utf8_lossy(&self.kept).into_owned();
        }
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
    fn under_the_cap_is_kept_whole() {
        let mut out = CappedOutput::new(10);
        out.push(b"hello");
        out.push(b"world");
        assert_eq!(out.finish(), "helloworld");
    }

    #[test]
    fn over_the_cap_keeps_the_start_and_counts_the_rest() {
        let mut out = CappedOutput::new(10);
        out.push(b"0123456");
        out.push(b"789abc");
        out.push(b"def");
        assert_eq!(
            out.finish(),
            "0123456789\n[output truncated: 6 bytes omitted]"
        );
    }

    #[test]
    fn a_cut_character_is_omitted_whole() {
        // "é" is two bytes; the cap falls between them.
        let mut out = CappedOutput::new(4);
        out.push("abcé!".as_bytes());
        assert_eq!(out.finish(), "abc\n[output truncated: 3 bytes omitted]");
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let mut out = CappedOutput::new(10);
        out.push(b"a\xffb");
        assert_eq!(out.finish(), "a\u{fffd}b");
    }
}
