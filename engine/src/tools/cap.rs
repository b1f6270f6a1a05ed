//! The cap on tool output: keep the head and the tail, say what was cut.
//!
//! A command's last lines (the error, the test summary) matter as much as
//! its first ones, so both ends are kept and the middle is replaced by a
//! line counting the omitted bytes. [`HeadTail`] does it for a byte stream
//! (bash output arriving in chunks), [`cap_head_tail`] for finished text.

use std::collections::VecDeque;

/// Bytes under a cap: the first half kept as it arrives, the last half in a
/// ring, everything in between only counted.
#[derive(Debug)]
pub(crate) struct HeadTail {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl HeadTail {
    pub(crate) fn new(cap: usize) -> Self {
        let tail_cap = cap / 2;
        Self {
            head_cap: cap - tail_cap,
            tail_cap,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        self.total = self.total.saturating_add(bytes.len() as u64);
        let room = self.head_cap.saturating_sub(self.head.len());
        let into_head = room.min(bytes.len());
        self.head.extend_from_slice(&bytes[..into_head]);
        bytes = &bytes[into_head..];
        if self.tail_cap == 0 || bytes.is_empty() {
            return;
        }
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..overflow);
        self.tail.extend(bytes);
    }

    /// Bytes that were counted but not kept.
    pub(crate) fn omitted(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// The kept text (invalid UTF-8 replaced) with a note where bytes were cut.
    pub(crate) fn text(&self) -> String {
        let omitted = self.omitted();
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        if omitted == 0 {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            return String::from_utf8_lossy(&all).into_owned();
        }
        // Cut on character boundaries: drop a split character at either seam.
        let head = trim_partial_end(&self.head);
        let tail = trim_partial_start(&tail);
        format!(
            "{}\n[... {} bytes of output omitted ...]\n{}",
            String::from_utf8_lossy(head),
            omitted + (self.head.len() - head.len()) as u64 + (self.tail.len() - tail.len()) as u64,
            String::from_utf8_lossy(tail)
        )
    }
}

/// `text` cut to about `cap` bytes, keeping its head and tail.
pub fn cap_head_tail(text: &str, cap: usize) -> String {
    if text.len() <= cap {
        return text.to_string();
    }
    let mut capped = HeadTail::new(cap);
    capped.push(text.as_bytes());
    capped.text()
}

fn trim_partial_start(bytes: &[u8]) -> &[u8] {
    let skip = bytes
        .iter()
        .take(3)
        .take_while(|byte| (**byte & 0xC0) == 0x80)
        .count();
    &bytes[skip..]
}

fn trim_partial_end(bytes: &[u8]) -> &[u8] {
    // Find the start of the last character; drop it if it is incomplete.
    let len = bytes.len();
    for back in 1..=len.min(4) {
        let byte = bytes[len - back];
        if (byte & 0xC0) != 0x80 {
            let needed = if byte < 0x80 {
                1
            } else if byte >= 0xF0 {
                4
            } else if byte >= 0xE0 {
                3
            } else {
                2
            };
            return if needed > back {
                &bytes[..len - back]
            } else {
                bytes
            };
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_kept_whole() {
        let mut capped = HeadTail::new(10);
        capped.push(b"abc");
        capped.push(b"def");
        assert_eq!(capped.text(), "abcdef");
        assert_eq!(capped.omitted(), 0);
    }

    #[test]
    fn long_output_keeps_head_and_tail() {
        let mut capped = HeadTail::new(8);
        for chunk in [&b"0123"[..], b"4567", b"89ab", b"cdef"] {
            capped.push(chunk);
        }
        assert_eq!(capped.omitted(), 8);
        assert_eq!(
            capped.text(),
            "0123\n[... 8 bytes of output omitted ...]\ncdef"
        );
    }

    #[test]
    fn a_large_single_chunk_is_capped() {
        let mut capped = HeadTail::new(4);
        capped.push(b"abcdefghij");
        assert_eq!(capped.text(), "ab\n[... 6 bytes of output omitted ...]\nij");
    }

    #[test]
    fn split_characters_are_dropped_and_counted() {
        // "é" is two bytes; a cap of 4 splits the first one at the seam.
        let text = "aéé!ééb";
        let capped = cap_head_tail(text, 4);
        assert!(capped.starts_with('a'), "{capped}");
        assert!(capped.ends_with("\nb"), "{capped}");
        // 11 bytes, "a" and "b" kept: 9 reported omitted, seams included.
        assert!(capped.contains("[... 9 bytes"), "{capped}");
        assert!(!capped.contains('\u{FFFD}'), "{capped}");
        assert!(capped.contains("bytes of output omitted"));
        assert_eq!(cap_head_tail("short", 100), "short");
    }
}
