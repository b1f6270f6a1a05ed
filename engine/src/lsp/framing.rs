//! The base protocol of LSP over stdio: each JSON-RPC message is preceded by
//! `Content-Length: N\r\n` (and optional other headers) and a blank line.
//! Small enough to write here; a message larger than [`MAX_MESSAGE`] is an
//! error (the connection is then unusable and the server is stopped).

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest message body accepted from a server (64 MiB: a workspace symbol
/// list of a big repository fits, a runaway server does not exhaust memory).
pub(crate) const MAX_MESSAGE: usize = 64 * 1024 * 1024;
/// Longest header line accepted.
const MAX_HEADER_LINE: usize = 8 * 1024;

/// Writes one framed message.
pub(crate) async fn write_message<W: AsyncWrite + Unpin>(
    writer: &mut W,
    message: &Value,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    let header = format!("Content-Length: {}\r\n\r\n", body.len());
    writer.write_all(header.as_bytes()).await?;
    writer.write_all(&body).await?;
    writer.flush().await
}

/// Reads one framed message; `Ok(None)` at a clean end of stream.
pub(crate) async fn read_message<R: AsyncBufRead + Unpin>(
    reader: &mut R,
) -> std::io::Result<Option<Value>> {
    let mut length: Option<usize> = None;
    let mut saw_header = false;
    loop {
        let mut line = Vec::new();
        let read = (&mut *reader)
            .take(MAX_HEADER_LINE as u64)
            .read_until(b'\n', &mut line)
            .await?;
        if read == 0 {
            if saw_header {
                return Err(invalid("the stream ended inside a message header"));
            }
            return Ok(None);
        }
        if !line.ends_with(b"\n") {
            return Err(invalid("a header line is too long or unterminated"));
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            if !saw_header {
                // Stray blank line between messages.
                continue;
            }
            break;
        }
        saw_header = true;
        if let Some((name, value)) = text.split_once(':')
            && name.trim().eq_ignore_ascii_case("content-length")
        {
            let value = value.trim();
            let parsed = value
                .parse::<usize>()
                .map_err(|_| invalid(&format!("bad Content-Length {value:?}")))?;
            length = Some(parsed);
        }
    }
    let length = length.ok_or_else(|| invalid("a message has no Content-Length header"))?;
    if length > MAX_MESSAGE {
        return Err(invalid(&format!(
            "a message of {length} bytes is over the {MAX_MESSAGE}-byte limit"
        )));
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).await?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| invalid(&format!("a message is not JSON: {e}")))
}

fn invalid(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tokio::io::BufReader;

    #[tokio::test]
    async fn round_trips_and_rejects_bad_frames() {
        let mut buf = Vec::new();
        write_message(&mut buf, &json!({"jsonrpc": "2.0", "id": 1, "result": "é"}))
            .await
            .unwrap();
        write_message(&mut buf, &json!({"jsonrpc": "2.0", "method": "x"}))
            .await
            .unwrap();
        let mut reader = BufReader::new(&buf[..]);
        let first = read_message(&mut reader).await.unwrap().unwrap();
        assert_eq!(first["result"], "é");
        let second = read_message(&mut reader).await.unwrap().unwrap();
        assert_eq!(second["method"], "x");
        assert!(read_message(&mut reader).await.unwrap().is_none());

        let extra = b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nContent-Length: 2\r\n\r\n{}";
        let mut reader = BufReader::new(&extra[..]);
        assert_eq!(read_message(&mut reader).await.unwrap().unwrap(), json!({}));

        let missing = b"Content-Type: x\r\n\r\n{}";
        let err = read_message(&mut BufReader::new(&missing[..]))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("Content-Length"), "{err}");
        let huge = format!("Content-Length: {}\r\n\r\n", MAX_MESSAGE + 1);
        let err = read_message(&mut BufReader::new(huge.as_bytes()))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("limit"), "{err}");
    }
}
