//! One transcript line: an update's kind, request id and what it says, as
//! JSON, borrowed from the update; long text clipped, enum values written
//! as their variants' names.
//!
//! The writer thread formats every update the runner sends, so the line
//! is written by hand ([`Entry::write`]): through serde_json's serializer,
//! the call overhead of each short field was most of the writer's CPU in
//! the throughput bench. The `Serialize` derive is kept for the tests
//! only: the reference they hold the hand-written bytes to.

use std::borrow::Cow;
use std::sync::OnceLock;

use agent_runner_proto::runner::{ClientMessage, client_message::Payload};
#[cfg(test)]
use serde::Serialize;

/// Longest text (item text, command output) kept per line, in bytes.
pub(super) const MAX_TEXT: usize = 16 * 1024;

/// Text kept whole up to [`MAX_TEXT`] bytes, cut with its length after.
fn clip(text: &str) -> Cow<'_, str> {
    if text.len() <= MAX_TEXT {
        return Cow::Borrowed(text);
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}… ({} bytes)", &text[..end], text.len()))
}

/// A protocol enum's value written as its variant's name (its `Debug`
/// text), looked up in a table made once per enum: formatting the name for
/// every line (`collect_str` over `Debug`) was, after string escaping,
/// the writer's largest cost.
#[cfg_attr(test, derive(Serialize))]
#[cfg_attr(test, serde(transparent))]
pub(super) struct Named(pub(super) Cow<'static, str>);

/// One enum's variant names by number, for [`name`].
pub(super) type Names = OnceLock<Vec<Option<Box<str>>>>;

/// The numbers [`name`] keeps names for: every variant of the enums a line
/// names is below this (a test checks).
pub(super) const NAMED: i32 = 64;

pub(super) static ITEM_TYPES: Names = OnceLock::new();
pub(super) static TURN_STATUSES: Names = OnceLock::new();
pub(super) static THREAD_STATUSES: Names = OnceLock::new();
pub(super) static ITEM_STATUSES: Names = OnceLock::new();

/// The name of `value`, from `names` (filled on first use).
pub(super) fn name<T>(names: &'static Names, value: T) -> Named
where
    T: Copy + std::fmt::Debug + TryFrom<i32>,
    i32: From<T>,
{
    let table = names.get_or_init(|| {
        (0..NAMED)
            .map(|n| T::try_from(n).ok().map(|v| format!("{v:?}").into()))
            .collect()
    });
    let known = usize::try_from(i32::from(value))
        .ok()
        .and_then(|n| table.get(n))
        .and_then(Option::as_deref);
    // A variant numbered past the table (none today) is formatted as before.
    Named(known.map_or_else(|| Cow::Owned(format!("{value:?}")), Cow::Borrowed))
}

/// One transcript line: the update's kind, request id and what it says,
/// borrowed from the update (the writer formats it; nothing is copied but
/// text past [`MAX_TEXT`]). Written straight out (no `Value` tree), its
/// fields in alphabetical order, as the lines have always been.
#[cfg_attr(test, derive(Serialize))]
pub(super) struct Entry<'a> {
    #[cfg_attr(test, serde(skip_serializing_if = "Option::is_none"))]
    command: Option<Cow<'a, str>>,
    #[cfg_attr(test, serde(skip_serializing_if = "Option::is_none"))]
    error: Option<Cow<'a, str>>,
    #[cfg_attr(test, serde(skip_serializing_if = "Option::is_none"))]
    item_type: Option<Named>,
    kind: &'static str,
    #[cfg_attr(test, serde(skip_serializing_if = "Option::is_none"))]
    name: Option<&'a str>,
    #[cfg_attr(test, serde(skip_serializing_if = "Option::is_none"))]
    output: Option<Cow<'a, str>>,
    #[cfg_attr(test, serde(skip_serializing_if = "Option::is_none"))]
    request_id: Option<&'a str>,
    #[cfg_attr(test, serde(skip_serializing_if = "Option::is_none"))]
    status: Option<Named>,
    #[cfg_attr(test, serde(skip_serializing_if = "Option::is_none"))]
    text: Option<Cow<'a, str>>,
    ts_ms: u64,
}

impl<'a> Entry<'a> {
    /// The line for `msg`, sent at `ts_ms`.
    pub(super) fn of(msg: &'a ClientMessage, ts_ms: u64) -> Self {
        let clipped = |text: &'a str| clip(text);
        let mut entry = Entry {
            command: None,
            error: None,
            item_type: None,
            kind: crate::observe::message_kind::kind(msg),
            name: None,
            output: None,
            request_id: msg.request_id.as_deref(),
            status: None,
            text: None,
            ts_ms,
        };
        match &msg.payload {
            Some(Payload::TurnUpdate(t)) => entry.status = Some(name(&TURN_STATUSES, t.status())),
            Some(Payload::ThreadUpdate(t)) => {
                entry.status = Some(name(&THREAD_STATUSES, t.status()));
            }
            Some(Payload::ItemUpdate(i)) => {
                entry.item_type = Some(name(&ITEM_TYPES, i.item_type()));
                entry.status = Some(name(&ITEM_STATUSES, i.status()));
                entry.text = i.text.as_deref().map(clipped);
                if let Some(c) = &i.command_execution_item {
                    entry.command = Some(clipped(&c.command));
                    entry.output = c.output.as_deref().map(clipped);
                }
            }
            Some(Payload::RequestError(e)) => entry.error = Some(clipped(&e.error_message)),
            Some(Payload::ThreadNameUpdate(n)) => entry.name = n.thread_name.as_deref(),
            _ => {}
        }
        entry
    }

    /// Appends the line's JSON (no newline) to `out`: exactly what
    /// serde_json writes for the derived `Serialize` (a test compares
    /// them), fields in the same alphabetical order, absent ones left out.
    pub(super) fn write(&self, out: &mut Vec<u8>) {
        let mut first = true;
        let mut key = |out: &mut Vec<u8>, name: &str| {
            out.extend_from_slice(if first { b"{\"" } else { b",\"" });
            first = false;
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b"\":");
        };
        let mut text = |out: &mut Vec<u8>, name: &str, value: Option<&str>| {
            if let Some(value) = value {
                key(out, name);
                string(out, value);
            }
        };
        text(out, "command", self.command.as_deref());
        text(out, "error", self.error.as_deref());
        text(out, "item_type", self.item_type.as_ref().map(|n| &*n.0));
        text(out, "kind", Some(self.kind));
        text(out, "name", self.name);
        text(out, "output", self.output.as_deref());
        text(out, "request_id", self.request_id);
        text(out, "status", self.status.as_ref().map(|n| &*n.0));
        text(out, "text", self.text.as_deref());
        key(out, "ts_ms");
        out.extend_from_slice(itoa::Buffer::new().format(self.ts_ms).as_bytes());
        out.push(b'}');
    }
}

/// Appends `s` as a JSON string, escaped as serde_json escapes it: `"`,
/// `\\` and the control characters below U+0020 (`\b \f \n \r \t` by
/// name, the rest as `\u00XX`, lowercase); everything else as it is.
/// Runs without an escape are copied whole. (serde_json's own escaper is
/// private to it; through its serializer it wrote each fragment through
/// `io::Write`, and was the writer's hottest symbol.)
fn string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b >= 0x20 && b != b'"' && b != b'\\' {
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        start = i + 1;
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]),
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}
