//! Log set-up: text or JSON lines on stderr, filtered by `--log-level`.
//!
//! Every line passes through the process-wide [`Redactor`] on its way out,
//! so an installation token quoted in a log line (an agent's stderr, a
//! failed turn's reason) is written as `***`, whichever crate logged it.

use std::borrow::Cow;
use std::io::{self, IsTerminal, Write};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use crate::config::LogFormat;
use crate::util::redact::Redactor;

/// Install the global subscriber. `level` is a level (`info`) or a filter
/// (`agent_runner=debug,tonic=warn`).
pub fn init(format: LogFormat, level: &str) -> Result<(), String> {
    let filter = EnvFilter::try_new(level).map_err(|e| format!("log_level: {e}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour_wanted(
            io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .with_writer(RedactingStderr::new(Redactor::process()));
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    result.map_err(|e| format!("logging: {e}"))
}

/// Colour codes only on a terminal, and not when `NO_COLOR` is set to
/// anything non-empty (no-color.org): redirected logs stay plain text.
fn colour_wanted(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Makes one [`EventWriter`] per log event.
pub struct RedactingStderr {
    redactor: Redactor,
}

impl RedactingStderr {
    /// A log layer masking `redactor`'s secrets.
    pub fn new(redactor: Redactor) -> Self {
        Self { redactor }
    }
}

impl<'a> MakeWriter<'a> for RedactingStderr {
    type Writer = EventWriter<'a, io::Stderr>;

    fn make_writer(&'a self) -> Self::Writer {
        EventWriter::new(&self.redactor, io::stderr())
    }
}

/// Collects one event's formatted text and writes it, redacted, when
/// dropped (so a secret split across several `write` calls is still found).
pub struct EventWriter<'a, W: Write> {
    redactor: &'a Redactor,
    buf: Vec<u8>,
    out: W,
}

impl<'a, W: Write> EventWriter<'a, W> {
    /// A writer masking `redactor`'s secrets before `out`.
    pub fn new(redactor: &'a Redactor, out: W) -> Self {
        Self {
            redactor,
            buf: Vec::new(),
            out,
        }
    }
}

impl<W: Write> Write for EventWriter<'_, W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<W: Write> Drop for EventWriter<'_, W> {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.buf);
        let clean = match self.redactor.redact(&text) {
            Cow::Borrowed(_) => Cow::Borrowed(&self.buf[..]),
            Cow::Owned(clean) => Cow::Owned(clean.into_bytes()),
        };
        // Nowhere to report a failure to write a log line.
        let _ = self.out.write_all(&clean);
        let _ = self.out.flush();
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(super::colour_wanted(true, None));
        assert!(super::colour_wanted(true, Some(OsStr::new(""))));
        assert!(!super::colour_wanted(true, Some(OsStr::new("1"))));
        assert!(!super::colour_wanted(false, None));
    }

    use super::*;

    #[test]
    fn secrets_are_masked_even_across_writes() {
        let redactor = Redactor::new();
        redactor.add("ghs_logged_secret_42");
        let mut out = Vec::new();
        {
            let mut w = EventWriter::new(&redactor, &mut out);
            w.write_all(b"agent said ghs_logged").unwrap();
            w.write_all(b"_secret_42 here\n").unwrap();
        }
        assert_eq!(String::from_utf8(out).unwrap(), "agent said *** here\n");
        let mut out = Vec::new();
        {
            let mut w = EventWriter::new(&redactor, &mut out);
            w.write_all(b"nothing \xff secret\n").unwrap();
        }
        assert_eq!(out, b"nothing \xff secret\n");
    }
}
