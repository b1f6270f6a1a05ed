//! The cap on tool output: keep the head and the tail, say what was cut.
//!
//! A command's last lines (the error, the test summary) matter as much as
//! its first ones, so both ends are kept and the middle is replaced by a
//! line counting the omitted bytes. [`HeadTail`] does it for a byte stream
//! (bash output arriving in chunks), [`cap_head_tail`] for finished text.
//!
//! Output is capped before whoever drives the engine masks secrets in it,
//! and a masker finds only whole secrets: a seam through one would keep part
//! of it. Secrets hold no whitespace, so a seam inside a run of
//! non-whitespace moves out to the run's end (head) or start (tail), by at
//! most [`WORD_TAIL`] bytes.

use std::collections::VecDeque;

/// How far a seam inside a word moves at most (longer than any secret).
pub const WORD_TAIL: usize = 4 * 1024;

fn in_word(byte: u8) -> bool {
    !byte.is_ascii_whitespace()
}

/// How many bytes of `head` stay when the cut-away text after it starts
/// with `next`: all at a word boundary, else up to the last word's start,
/// or [`WORD_TAIL`] fewer when that word is longer.
fn head_keep(head: &[u8], next: Option<u8>) -> usize {
    match (head.last(), next) {
        (Some(&last), Some(next)) if in_word(last) && in_word(next) => {}
        _ => return head.len(),
    }
    let floor = head.len().saturating_sub(WORD_TAIL);
    match head[floor..].iter().rposition(|&b| !in_word(b)) {
        Some(i) => floor + i + 1,
        None => floor,
    }
}

/// How many leading bytes of `tail` go when the cut-away text before it
/// ends with `previous`: the mirror of [`head_keep`].
fn tail_skip(tail: &[u8], previous: Option<u8>) -> usize {
    match (previous, tail.first()) {
        (Some(previous), Some(&first)) if in_word(previous) && in_word(first) => {}
        _ => return 0,
    }
    let window = tail.len().min(WORD_TAIL);
    tail[..window]
        .iter()
        .position(|&b| !in_word(b))
        .unwrap_or(window)
}

/// Bytes under a cap: the first half kept as it arrives, the last half in a
/// ring, everything in between only counted.
#[derive(Debug)]
pub(crate) struct HeadTail {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    /// The first byte that did not fit the head.
    after_head: Option<u8>,
    /// The byte just before the tail's first, once the ring dropped any.
    before_tail: Option<u8>,
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
            after_head: None,
            before_tail: None,
        }
    }

    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        self.total = self.total.saturating_add(bytes.len() as u64);
        let room = self.head_cap.saturating_sub(self.head.len());
        let into_head = room.min(bytes.len());
        self.head.extend_from_slice(&bytes[..into_head]);
        bytes = &bytes[into_head..];
        if self.after_head.is_none() {
            self.after_head = bytes.first().copied();
        }
        if self.tail_cap == 0 || bytes.is_empty() {
            return;
        }
        if bytes.len() >= self.tail_cap {
            let start = bytes.len() - self.tail_cap;
            let previous = match start {
                0 => self.tail.back().copied(),
                _ => Some(bytes[start - 1]),
            };
            if previous.is_some() {
                self.before_tail = previous;
            }
            self.tail.clear();
            self.tail.extend(&bytes[start..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
        if overflow > 0 {
            self.before_tail = self.tail.get(overflow - 1).copied();
        }
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
        // No seam inside a word, nor inside a character.
        let head = trim_partial_end(&self.head[..head_keep(&self.head, self.after_head)]);
        let tail = trim_partial_start(&tail[tail_skip(&tail, self.before_tail)..]);
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
        for chunk in [&b"012 "[..], b"4567", b"89ab", b" def"] {
            capped.push(chunk);
        }
        assert_eq!(capped.omitted(), 8);
        assert_eq!(
            capped.text(),
            "012 \n[... 8 bytes of output omitted ...]\n def"
        );
    }

    #[test]
    fn a_large_single_chunk_is_capped() {
        let mut capped = HeadTail::new(4);
        capped.push(b"a bcdefgh i");
        assert_eq!(capped.text(), "a \n[... 7 bytes of output omitted ...]\n i");
    }

    #[test]
    fn split_characters_are_dropped_and_counted() {
        // "é" is two bytes; a cap of 4 splits the first one at the seam.
        let text = " ééé ! ééé ";
        let capped = cap_head_tail(text, 6);
        assert!(capped.starts_with(' '), "{capped}");
        assert!(capped.ends_with("\n "), "{capped}");
        // 17 bytes, a space kept at each end: 15 reported omitted.
        assert!(capped.contains("[... 15 bytes"), "{capped}");
        assert!(!capped.contains('\u{FFFD}'), "{capped}");
        assert!(capped.contains("bytes of output omitted"));
        assert_eq!(cap_head_tail("short", 100), "short");
    }

    #[test]
    fn no_seam_keeps_part_of_a_word() {
        let secret = "ghp_0123456789abcdefABCDEF";
        let text = format!("a {secret} b {secret} c");
        for cap in 4..text.len() {
            for chunk in [1, 3, 7, text.len()] {
                let mut capped = HeadTail::new(cap);
                for piece in text.as_bytes().chunks(chunk) {
                    capped.push(piece);
                }
                let out = capped.text();
                let partial = out.matches("ghp_").count() != out.matches(secret).count()
                    || out.matches("DEF").count() != out.matches(secret).count();
                assert!(!partial, "cap {cap}, chunk {chunk}: {out:?}");
            }
        }
    }

    #[test]
    fn a_long_word_loses_at_most_the_word_tail() {
        let text = "y".repeat(WORD_TAIL * 4);
        let capped = cap_head_tail(&text, WORD_TAIL * 3);
        let omitted = WORD_TAIL * 4 - WORD_TAIL;
        assert_eq!(
            capped,
            format!(
                "{}\n[... {omitted} bytes of output omitted ...]\n{}",
                "y".repeat(WORD_TAIL / 2),
                "y".repeat(WORD_TAIL / 2)
            )
        );
    }
}
