//! Every outbound `ClientMessage` fits in what any gRPC peer accepts by
//! default, by construction: the caps the builders in
//! [`crate::delivery::messages`] apply to each field an agent, an SDK or a
//! request can make long.
//!
//! Why: gRPC implementations refuse a received message over 4 MiB
//! (4,194,304 bytes) unless told otherwise, and refusing one ends the
//! stream. The runner then re-sends the same update after every reconnect
//! (and after a restart, if it was journaled), so one echoed 5 MiB user
//! message held back every other thread's updates for good.
//!
//! The choice: fixed caps per field whose sum, with the framing of every
//! field and the sequence number, is under [`MESSAGE_LIMIT`] for every kind
//! of message (checked at compile time below), rather than one budget per
//! message shared by its fields. A control plane then knows what each field
//! can hold whatever else the message carries, and nothing has to be
//! encoded to be measured.
//!
//! | field | cap |
//! |---|---|
//! | `ItemUpdate.text` (messages, reasoning, user message, diffs, tool calls) | [`TEXT_CAP`] |
//! | `CommandExecutionItem.output`, its end marker included | [`OUTPUT_CAP`] |
//! | `CommandExecutionItem.command` | [`COMMAND_CAP`] |
//! | `CommandExecutionItem.cwd` | [`CWD_CAP`] |
//! | `RequestError.error_message` | [`ERROR_CAP`] |
//! | `ThreadNameUpdate.thread_name` | [`NAME_CAP`] |
//! | `AgentSdk.error_message` | [`SDK_ERROR_CAP`] |
//! | every id, `request_id`, `package_name`, `device_code` | [`ID_CAP`] |
//! | `ApprovalRequest.title` | [`NAME_CAP`]; `command` [`COMMAND_CAP`]; `cwd` [`CWD_CAP`]; `reason` [`REASON_CAP`] |
//! | `ApprovalRequest.paths`, `options` | [`MAX_APPROVAL_ENTRIES`] entries of at most [`CWD_CAP`] |
//! | `AgentSdk.models` | [`MAX_MODELS`] models, names ≤ [`MODEL_NAME_CAP`], ≤ [`MAX_LEVELS`] levels of ≤ [`LEVEL_CAP`] |
//!
//! A text over its cap keeps its start, cut on a character boundary, and
//! ends with the note `\n… [truncated: 5,242,880 bytes, 1,048,576 shown]`
//! (the whole text's size, then what was kept); the note counts within the
//! cap. Before the cut, what is kept and the [`SECRET_WINDOW`] bytes after
//! it are masked with the process's redactor, so a secret the cut falls
//! inside is masked whole rather than left half there for the outbox's
//! masking to miss.
//!
//! An id over [`ID_CAP`] (never in practice: the control plane's ids are
//! checked to be at most 128 characters, the SDKs' are short) keeps its
//! start and ends with `…#` and 16 hex digits of its SHA-256: distinct ids
//! stay distinct and one id always becomes the same. A model whose name or
//! a reasoning level longer than its cap is left out of an SDK's
//! description: a name the runner cannot send whole cannot be asked for.

use std::fmt::Write as _;

use agent_runner_proto::runner::AgentSdk;

use crate::util::redact::Redactor;

/// The most bytes one encoded `ClientMessage` takes, sequence number
/// included: gRPC's default receive limit (4 MiB) less 64 KiB, so a peer's
/// own framing never tips it over.
pub const MESSAGE_LIMIT: usize = 4 * 1024 * 1024 - 64 * 1024;

/// An item's text: agent and user messages, reasoning, plans, diffs, tool
/// calls with their arguments and results.
pub const TEXT_CAP: usize = 1024 * 1024;
/// A command's output, with the marker saying how it ended.
pub const OUTPUT_CAP: usize = 1024 * 1024;
/// A command line.
pub const COMMAND_CAP: usize = 512 * 1024;
/// A command's working directory.
pub const CWD_CAP: usize = 4 * 1024;
/// A `RequestError`'s text (a failed turn's reason may quote its output).
pub const ERROR_CAP: usize = 1024 * 1024;
/// A thread's name.
pub const NAME_CAP: usize = 4 * 1024;
/// Why an SDK is not ready.
pub const SDK_ERROR_CAP: usize = 64 * 1024;
/// Any id (request, agent, thread, turn, item, process), a skill package's
/// name, a device code.
pub const ID_CAP: usize = 1024;
/// Models one SDK description carries.
pub const MAX_MODELS: usize = 256;
/// A model's name.
pub const MODEL_NAME_CAP: usize = 256;
/// Reasoning levels one model carries.
pub const MAX_LEVELS: usize = 16;
/// A reasoning level's name.
pub const LEVEL_CAP: usize = 64;

/// What an agent said about why it asks for an approval.
pub const REASON_CAP: usize = 64 * 1024;
/// Paths, or choices, one approval request carries.
pub const MAX_APPROVAL_ENTRIES: usize = 64;

/// Masked beyond the cut before cutting: longer than any secret the runner
/// masks (tokens, bearer tokens, header values).
pub const SECRET_WINDOW: usize = 64 * 1024;

/// Room for the marker a finished command's output ends with.
pub const MARKER_ROOM: usize = 64;

/// Every tag, length prefix, enum and nested header of one message plus its
/// sequence number (at most 12 bytes), with room to spare: no message has
/// more than 16 fields, and none of them takes 16 bytes of framing.
const FRAMING: usize = 1024;
/// The framing of one repeated entry (a model, a level, a path).
const ENTRY_FRAMING: usize = 16;

/// The largest `ItemUpdate` message: five ids (request, item, thread, turn,
/// process), the text, the command, its directory and output.
const ITEM_MAX: usize = 5 * ID_CAP + TEXT_CAP + COMMAND_CAP + CWD_CAP + OUTPUT_CAP + FRAMING;
/// The largest `agent_sdk_update` message.
const SDK_MAX: usize = 2 * ID_CAP
    + SDK_ERROR_CAP
    + MAX_MODELS * (MODEL_NAME_CAP + ENTRY_FRAMING + MAX_LEVELS * (LEVEL_CAP + ENTRY_FRAMING))
    + FRAMING;
/// The largest `RequestError` message.
const ERROR_MAX: usize = ID_CAP + ERROR_CAP + FRAMING;
/// The largest `ThreadNameUpdate` message.
const NAME_MAX: usize = 2 * ID_CAP + NAME_CAP + FRAMING;
/// The largest of the rest (agent, thread, turn, skill, token usage,
/// device code, heartbeat): ids, enums and numbers only.
const IDS_MAX: usize = 4 * ID_CAP + FRAMING;

/// The largest `ApprovalRequest` message: four ids, the title, command,
/// cwd, reason, and its paths and options.
const APPROVAL_MAX: usize = 5 * ID_CAP
    + NAME_CAP
    + COMMAND_CAP
    + CWD_CAP
    + REASON_CAP
    + 2 * MAX_APPROVAL_ENTRIES * (CWD_CAP + ENTRY_FRAMING)
    + FRAMING;

const _: () = assert!(APPROVAL_MAX <= MESSAGE_LIMIT);
const _: () = assert!(ITEM_MAX <= MESSAGE_LIMIT);
const _: () = assert!(SDK_MAX <= MESSAGE_LIMIT);
const _: () = assert!(ERROR_MAX <= MESSAGE_LIMIT);
const _: () = assert!(NAME_MAX <= MESSAGE_LIMIT);
const _: () = assert!(IDS_MAX <= MESSAGE_LIMIT);
// A registration carries one description per SDK the runner has (four).
const _: () = assert!(4 * SDK_MAX <= MESSAGE_LIMIT);
// The longest note (two 26-character numbers) fits in every text cap.
const NOTE_MAX: usize = 128;
const _: () = assert!(NAME_CAP > NOTE_MAX && CWD_CAP > NOTE_MAX);
const _: () = assert!(OUTPUT_CAP > MARKER_ROOM + NOTE_MAX);

/// What replaces a long id's end: `…#` and 16 hex digits.
const ID_SUFFIX: usize = "…#".len() + 16;

/// Cuts `text` to at most `cap` bytes, the truncation note included
/// (`cap` is one of this module's text caps, over [`NOTE_MAX`]).
pub fn cap_text(text: &mut String, cap: usize) {
    if text.len() <= cap {
        return;
    }
    let total = text.len();
    // The note with `shown = cap` is the longest it can be.
    let room = cap.saturating_sub(note(total, cap).len());
    let window = floor_boundary(text, room.saturating_add(SECRET_WINDOW));
    let masked = Redactor::process().redact(&text[..window]).into_owned();
    let keep = floor_boundary(&masked, room);
    let mut capped = masked;
    capped.truncate(keep);
    capped.push_str(&note(total, keep));
    *text = capped;
}

/// [`cap_text`] of a text that may be absent.
pub fn cap_opt(text: &mut Option<String>, cap: usize) {
    if let Some(text) = text {
        cap_text(text, cap);
    }
}

/// `id`, at most [`ID_CAP`] bytes (see the module doc).
pub fn id(id: &str) -> String {
    let mut id = id.to_owned();
    cap_id(&mut id);
    id
}

/// Caps `id` at [`ID_CAP`] bytes in place (see the module doc).
pub fn cap_id(id: &mut String) {
    if id.len() <= ID_CAP {
        return;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, id.as_bytes());
    id.truncate(floor_boundary(id, ID_CAP - ID_SUFFIX));
    id.push_str("…#");
    for byte in digest.as_ref().iter().take(8) {
        let _ = write!(id, "{byte:02x}");
    }
}

/// An SDK's description within its caps (see the module doc).
pub fn fit_sdk(sdk: &mut AgentSdk) {
    cap_id(&mut sdk.name);
    cap_opt(&mut sdk.error_message, SDK_ERROR_CAP);
    let described = sdk.models.len();
    sdk.models.retain(|m| m.name.len() <= MODEL_NAME_CAP);
    sdk.models.truncate(MAX_MODELS);
    let mut levels_left_out = 0;
    for model in &mut sdk.models {
        let levels = model.reasoning.len();
        model.reasoning.retain(|l| l.len() <= LEVEL_CAP);
        model.reasoning.truncate(MAX_LEVELS);
        levels_left_out += levels - model.reasoning.len();
    }
    let models_left_out = described - sdk.models.len();
    if models_left_out > 0 || levels_left_out > 0 {
        tracing::warn!(
            sdk = %sdk.name,
            models_left_out,
            levels_left_out,
            "an SDK described more models or longer names than a control plane is sent"
        );
    }
}

/// `\n… [truncated: TOTAL bytes, SHOWN shown]`.
fn note(total: usize, shown: usize) -> String {
    format!(
        "\n… [truncated: {} bytes, {} shown]",
        grouped(total),
        grouped(shown)
    )
}

/// `n` with a comma between groups of three digits: `5,242,880`.
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The largest character boundary of `text` at or below `index`.
fn floor_boundary(text: &str, index: usize) -> usize {
    let mut cut = index.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    cut
}

#[cfg(test)]
mod tests {
    use agent_runner_proto::runner::LlmModel;

    use super::*;

    #[test]
    fn a_text_within_its_cap_is_untouched() {
        let mut text = "x".repeat(NAME_CAP);
        cap_text(&mut text, NAME_CAP);
        assert_eq!(text, "x".repeat(NAME_CAP));
    }

    #[test]
    fn a_long_text_keeps_its_start_and_says_how_much_was_cut() {
        let mut text = "a".repeat(5 * 1024 * 1024);
        cap_text(&mut text, TEXT_CAP);
        assert!(text.len() <= TEXT_CAP, "{}", text.len());
        let (_, note) = text.rsplit_once('\n').expect("a note");
        let shown = text.len() - note.len() - 1;
        assert_eq!(
            note,
            format!("… [truncated: 5,242,880 bytes, {} shown]", grouped(shown))
        );
        assert!(text[..shown].bytes().all(|b| b == b'a'));
        assert!(shown > TEXT_CAP - NOTE_MAX, "{shown}");
    }

    #[test]
    fn the_cut_falls_on_a_character_boundary() {
        // Four-byte characters: whatever the room, a cut byte-wise would
        // split one.
        for cap in NAME_CAP..NAME_CAP + 4 {
            let mut text = "😀".repeat(NAME_CAP);
            cap_text(&mut text, cap);
            assert!(text.len() <= cap);
            let (kept, _) = text.rsplit_once('\n').expect("a note");
            assert!(!kept.is_empty() && kept.chars().all(|c| c == '😀'), "{cap}");
        }
    }

    #[test]
    fn a_secret_the_cut_falls_inside_is_masked_whole() {
        let secret = "ghs_fit_cut_straddling_secret_0123456789";
        Redactor::process().add(secret);
        let room = NAME_CAP - note(NAME_CAP * 2, NAME_CAP).len();
        // The secret starts 10 bytes before the cut.
        let mut text = "x".repeat(room - 10) + secret + &"y".repeat(NAME_CAP);
        cap_text(&mut text, NAME_CAP);
        assert!(!text.contains("ghs_"), "{}", &text[room - 20..]);
        assert!(text.contains("***"), "{}", &text[room - 20..]);
    }

    #[test]
    fn a_long_id_stays_distinct_and_stable() {
        let a = "i".repeat(5 * ID_CAP) + "a";
        let b = "i".repeat(5 * ID_CAP) + "b";
        assert_eq!(id("thr-1"), "thr-1");
        assert!(id(&a).len() <= ID_CAP);
        assert_ne!(id(&a), id(&b));
        assert_eq!(id(&a), id(&a));
        assert!(id(&a).contains("…#"), "{}", id(&a));
        // Three-byte characters: the cut backs off to a boundary.
        let euros = id(&"€".repeat(ID_CAP));
        assert!(euros.len() <= ID_CAP && euros.starts_with('€'), "{euros}");
    }

    #[test]
    fn an_sdk_keeps_what_it_can_send_whole() {
        let model = |name: String, levels: Vec<String>| LlmModel {
            name,
            reasoning: levels,
        };
        let mut sdk = AgentSdk {
            name: "s".into(),
            models: std::iter::once(model("m".repeat(MODEL_NAME_CAP + 1), vec![]))
                .chain((0..MAX_MODELS + 10).map(|i| {
                    model(
                        format!("m{i}"),
                        vec!["low".into(), "l".repeat(LEVEL_CAP + 1), "high".into()],
                    )
                }))
                .collect(),
            status: 2,
            error_message: None,
        };
        fit_sdk(&mut sdk);
        assert_eq!(sdk.models.len(), MAX_MODELS);
        assert_eq!(sdk.models[0].name, "m0");
        assert_eq!(sdk.models[0].reasoning, ["low", "high"]);
    }

    #[test]
    fn numbers_are_grouped_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(grouped(1_048_576), "1,048,576");
        assert!(note(usize::MAX, usize::MAX).len() <= NOTE_MAX);
    }
}
