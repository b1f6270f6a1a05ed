//! Large messages against a control plane with gRPC's default limits (the
//! mock's: it decodes at most 4 MiB): user messages far over that run their
//! turns with the whole text, and every update coming back fits, cut with a
//! note where it had to be — so the link never drops over an update's size
//! and other threads' replies are never stuck behind one
//! (docs/protocol.md, "Message sizes").

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::{ClientMessage, ItemStatus, ItemType};
use mock_control_plane::MockControlPlane;

use crate::support::*;

const MIB: usize = 1024 * 1024;

/// The documented outbound limit: 4 MiB − 64 KiB per `ClientMessage`.
const OUTBOUND_LIMIT: usize = 4_128_768;

/// `n` with a comma between groups of three digits, as the notes write it.
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The note ending an ASCII text of `total` bytes cut to the 1 MiB
/// item-text cap, which counts the note (its longest form) in.
fn text_note(total: usize) -> String {
    let note = |shown: usize| {
        format!(
            "\n… [truncated: {} bytes, {} shown]",
            grouped(total),
            grouped(shown)
        )
    };
    note(MIB - note(MIB).len())
}

/// The COMPLETED text of the first item of `kind` among `msgs`.
fn completed_text(msgs: &[ClientMessage], kind: ItemType) -> String {
    items(msgs)
        .into_iter()
        .find(|(k, s, _)| *k == kind && *s == ItemStatus::Completed)
        .and_then(|(_, _, text)| text)
        .unwrap_or_else(|| panic!("no COMPLETED {kind:?} item"))
}

/// Everything the mock received fits the documented limit and was valid;
/// the runner registered and connected once (an update the mock refused
/// would have ended the stream: the turns' later updates came after a
/// reconnect).
fn assert_one_connection_and_all_fit(cp: &MockControlPlane) {
    for m in cp.received() {
        let len = prost::Message::encoded_len(&m);
        assert!(
            len <= OUTBOUND_LIMIT,
            "{len} bytes, request {:?}",
            m.request_id
        );
    }
    assert!(
        cp.invalid_received().is_empty(),
        "{:?}",
        cp.invalid_received()
    );
    assert_eq!(cp.connection_count(), 1, "the link reconnected");
    assert_eq!(cp.registrations().len(), 1, "the runner registered again");
}

/// Sends `script` to `thread` (`rid`) and `say meanwhile` to `other`; both
/// turns complete, the other's with its reply. The big turn's messages.
async fn big_turn_beside_another(
    cp: &MockControlPlane,
    thread: &str,
    other: &str,
    script: &str,
) -> Vec<ClientMessage> {
    send(cp, "big", user_message("a", thread, script, false)).await;
    send(
        cp,
        "other",
        user_message("a", other, "say meanwhile", false),
    )
    .await;
    turn_completed(cp, "other").await;
    assert_eq!(said(&replies(cp, "other")), ["meanwhile"]);
    turn_completed(cp, "big").await;
    replies(cp, "big")
}

#[tokio::test]
async fn a_5_mib_user_message_runs_whole_and_its_echo_is_cut() {
    let (cp, _r) = agent_with(|opts| opts).await;
    let thread = create_thread(&cp, "a", "t-big").await;
    let other = create_thread(&cp, "a", "t-other").await;
    let long = "x".repeat(5 * MIB);
    let script = format!("say first\nsay {long}\nsay last\n");
    let msgs = big_turn_beside_another(&cp, &thread, &other, &script).await;

    let echo = completed_text(&msgs, ItemType::UserMessage);
    assert!(echo.starts_with("say first\nsay xxx"), "{echo:.40}");
    assert!(echo.ends_with(&text_note(script.len())), "{}", tail(&echo));
    // The agent had the whole message: its last line ran.
    let said = said(&msgs);
    assert_eq!(said.len(), 3, "{:?}", lengths(&said));
    assert_eq!((said[0].as_str(), said[2].as_str()), ("first", "last"));
    assert!(
        said[1].ends_with(&text_note(long.len())),
        "{}",
        tail(&said[1])
    );
    assert_one_connection_and_all_fit(&cp);
}

#[tokio::test]
async fn a_60_mib_user_message_runs_whole_and_every_update_of_it_fits() {
    let (cp, _r) = agent_with(|opts| opts).await;
    let thread = create_thread(&cp, "a", "t-big").await;
    let other = create_thread(&cp, "a", "t-other").await;
    let part = 20 * MIB;
    let script = format!(
        "say first\nthink {}\nname {}\nsay {}\nsay last\n",
        "t".repeat(part),
        "n".repeat(part),
        "s".repeat(part)
    );
    let msgs = big_turn_beside_another(&cp, &thread, &other, &script).await;

    let echo = completed_text(&msgs, ItemType::UserMessage);
    assert!(echo.starts_with("say first\nthink ttt"), "{echo:.40}");
    assert!(echo.ends_with(&text_note(script.len())), "{}", tail(&echo));
    let thinking = completed_text(&msgs, ItemType::Reasoning);
    assert!(thinking.ends_with(&text_note(part)), "{}", tail(&thinking));
    let name = msgs
        .iter()
        .find_map(|m| match payload(m) {
            Some(Payload::ThreadNameUpdate(u)) => u.thread_name.clone(),
            _ => None,
        })
        .expect("the thread was named");
    assert!(
        name.starts_with("nnn") && name.len() <= 4096,
        "{}",
        name.len()
    );
    assert!(
        name.contains("[truncated: 20,971,520 bytes,"),
        "{}",
        tail(&name)
    );
    let said = said(&msgs);
    assert_eq!(said.len(), 3, "{:?}", lengths(&said));
    assert_eq!((said[0].as_str(), said[2].as_str()), ("first", "last"));
    assert!(said[1].ends_with(&text_note(part)), "{}", tail(&said[1]));
    assert_one_connection_and_all_fit(&cp);
}

#[tokio::test]
async fn a_failure_quoting_5_mib_is_cut_and_the_turn_ends() {
    let (cp, _r, thread) = thread_ready().await;
    let reason = "f".repeat(5 * MIB);
    send(
        &cp,
        "fails",
        user_message("a", &thread, &format!("fail {reason}"), false),
    )
    .await;
    turn_completed(&cp, "fails").await;
    let error = replies(&cp, "fails")
        .iter()
        .find_map(|m| error_text(m).map(str::to_owned))
        .expect("a RequestError");
    assert!(error.len() <= MIB, "{}", error.len());
    assert!(error.contains("[truncated: "), "{}", tail(&error));
    assert_one_connection_and_all_fit(&cp);
}

#[tokio::test]
async fn a_command_printing_6_mb_has_its_output_capped() {
    let (cp, _r, thread) = thread_ready().await;
    let script = "run head -c 6000000 /dev/zero | tr '\\0' a";
    send(&cp, "loud", user_message("a", &thread, script, false)).await;
    turn_completed(&cp, "loud").await;
    let outputs = command_outputs(&replies(&cp, "loud"));
    assert_eq!(outputs.len(), 1, "{:?}", lengths(&outputs));
    let output = &outputs[0];
    assert!(output.len() <= MIB, "{}", output.len());
    assert!(output.starts_with("aaaa"), "{output:.40}");
    assert!(output.contains("truncated"), "{}", tail(output));
    assert_one_connection_and_all_fit(&cp);
}

/// The lengths of `texts` (whole texts would drown a failure's message).
fn lengths(texts: &[String]) -> Vec<usize> {
    texts.iter().map(String::len).collect()
}

/// The last 120 bytes of `text` (ASCII in these tests), for messages.
fn tail(text: &str) -> &str {
    let mut start = text.len().saturating_sub(120);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}
