//! The helper's end of the credential socket: one blocking request/answer
//! exchange (the `git-credential` subcommand is a short-lived process that
//! needs no async runtime).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use super::protocol::{Answer, MAX_ANSWER_BYTES, Request};
use super::server::CONNECTION_TIMEOUT;

/// How long the helper waits for the runner (a little longer than the
/// runner gives itself, so the runner's own timeout speaks first).
pub const ASK_TIMEOUT: Duration = CONNECTION_TIMEOUT.saturating_add(Duration::from_secs(5));

/// Send `request` to the runner at `socket` and read its answer.
pub fn ask(socket: &Path, request: &Request, timeout: Duration) -> io::Result<Answer> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut line = serde_json::to_vec(request).map_err(io::Error::other)?;
    line.push(b'\n');
    stream.write_all(&line)?;
    let limit = u64::try_from(MAX_ANSWER_BYTES + 1).unwrap_or(u64::MAX);
    let mut reader = BufReader::new(stream.take(limit));
    let mut answer = Vec::new();
    reader.read_until(b'\n', &mut answer)?;
    if answer.len() > MAX_ANSWER_BYTES {
        return Err(io::Error::other(format!(
            "the runner's answer is over {MAX_ANSWER_BYTES} bytes"
        )));
    }
    if answer.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the runner closed the connection without answering",
        ));
    }
    serde_json::from_slice(&answer)
        .map_err(|e| io::Error::other(format!("the runner's answer is malformed: {e}")))
}
