//! Reading a child's output one line at a time without trusting it: a line
//! longer than the limit is cut (the rest up to the newline is skipped), so a
//! runaway child cannot make the runner buffer without bound.

use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// One line read, without its newline.
#[derive(Debug)]
pub(crate) struct Line {
    pub bytes: Vec<u8>,
    /// Bytes dropped because the line was over the limit.
    pub cut: usize,
}

/// The next line, or `None` at end of input. A last line without a newline
/// still counts.
pub(crate) async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    limit: usize,
) -> io::Result<Option<Line>> {
    let mut line = Line {
        bytes: Vec::new(),
        cut: 0,
    };
    let mut seen_any = false;
    loop {
        let available = match reader.fill_buf().await {
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(seen_any.then_some(line));
        }
        seen_any = true;
        let (chunk, used, done) = match available.iter().position(|&b| b == b'\n') {
            Some(at) => (&available[..at], at + 1, true),
            None => (available, available.len(), false),
        };
        let room = limit.saturating_sub(line.bytes.len());
        let keep = room.min(chunk.len());
        line.bytes.extend_from_slice(&chunk[..keep]);
        line.cut += chunk.len() - keep;
        reader.consume(used);
        if done {
            return Ok(Some(line));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn splits_lines_and_cuts_long_ones() {
        let data: &[u8] = b"short\nthis one is long\n\nlast";
        let mut reader = tokio::io::BufReader::with_capacity(4, data);
        let mut out = Vec::new();
        while let Some(line) = read_line(&mut reader, 8).await.unwrap() {
            out.push((String::from_utf8(line.bytes).unwrap(), line.cut));
        }
        assert_eq!(
            out,
            vec![
                ("short".to_owned(), 0),
                ("this one".to_owned(), 8),
                (String::new(), 0),
                ("last".to_owned(), 0),
            ]
        );
    }
}
