//! The outbox's tests: order, the bound and its rules for making room,
//! masking, journaling and bursts, and the indexed queue against a plain
//! scan.

use super::*;
use crate::delivery::messages;
use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::{ItemStatus, ThreadStatus, TurnStatus};
use sdk_adapter::{ItemEvent, ItemKind};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// The rules of the outbox's module doc, written out on messages: the
/// reference the label-driven outbox is checked against.
fn is_intermediate(msg: &ClientMessage) -> bool {
    match &msg.payload {
        Some(Payload::ItemUpdate(i)) => i.status == ItemStatus::Running as i32,
        Some(Payload::ThreadTokenUsageUpdate(_)) => true,
        _ => false,
    }
}

/// [`is_intermediate`] `new` replacing the queued `old`: the same item of
/// the same thread, or the same thread's token usage.
fn supersedes(new: &ClientMessage, old: &ClientMessage) -> bool {
    match (&new.payload, &old.payload) {
        (Some(Payload::ItemUpdate(n)), Some(Payload::ItemUpdate(o))) => {
            is_intermediate(new)
                && is_intermediate(old)
                && (n.thread_id == o.thread_id && n.sdk_item_id == o.sdk_item_id)
        }
        (Some(Payload::ThreadTokenUsageUpdate(n)), Some(Payload::ThreadTokenUsageUpdate(o))) => {
            n.thread_id == o.thread_id
        }
        _ => false,
    }
}

fn item_update(item: &str, text: &str, status: sdk_adapter::ItemStatus) -> ClientMessage {
    messages::item(
        None,
        "t",
        "u",
        ItemEvent {
            item_id: item.into(),
            kind: ItemKind::AgentMessage,
            status,
            text: Some(text.into()),
            command: None,
        },
    )
}

fn running(item: &str, text: &str) -> ClientMessage {
    item_update(item, text, sdk_adapter::ItemStatus::Running)
}

fn item_done(item: &str, text: &str) -> ClientMessage {
    item_update(item, text, sdk_adapter::ItemStatus::Completed)
}

fn completed(turn: &str) -> ClientMessage {
    messages::turn(None, "t", turn, TurnStatus::Completed)
}

async fn drain(o: &Outbox) -> Vec<ClientMessage> {
    let mut out = vec![];
    while !o.is_empty() {
        out.push(o.pop().await);
    }
    out
}

#[tokio::test]
async fn order_kept_below_capacity() {
    let o = Outbox::new(16, Redactor::new());
    for i in 0..10 {
        o.push(completed(&i.to_string())).await;
    }
    let got = drain(&o).await;
    assert_eq!(
        got,
        (0..10)
            .map(|i| completed(&i.to_string()))
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn full_outbox_coalesces_then_drops_intermediate_never_terminal() {
    // Process-wide counters: other tests may add to them, never take away.
    let (dropped_before, coalesced_before) = crate::observe::metrics::outbox_totals();
    let o = Outbox::new(16, Redactor::new());
    o.push(running("i1", "a")).await;
    for i in 0..15 {
        o.push(completed(&i.to_string())).await;
    }
    // Same item: coalesced in place.
    o.push(running("i1", "ab")).await;
    assert_eq!(o.stats().coalesced, 1);
    // Another item: the oldest intermediate goes.
    o.push(running("i2", "x")).await;
    assert_eq!(o.stats().dropped, 1);
    // Terminal update with room only from intermediates: i2's snapshot goes.
    o.push(completed("last")).await;
    let got = drain(&o).await;
    assert_eq!(got.len(), 16);
    assert!(got.iter().all(|m| !is_intermediate(m)));
    assert_eq!(got.last(), Some(&completed("last")));
    assert_eq!(o.stats().dropped, 2);
    let (dropped, coalesced) = crate::observe::metrics::outbox_totals();
    assert!(dropped >= dropped_before + 2, "the metric counts drops");
    assert!(coalesced > coalesced_before, "the metric counts coalescing");
}

#[tokio::test]
async fn terminal_updates_wait_for_room_instead_of_dropping() {
    let o = Arc::new(Outbox::new(16, Redactor::new()));
    for i in 0..16 {
        o.push(completed(&i.to_string())).await;
    }
    let o2 = o.clone();
    let pusher = tokio::spawn(async move { o2.push(completed("16")).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !pusher.is_finished(),
        "a terminal update must wait, not drop"
    );
    assert_eq!(o.pop().await, completed("0"));
    pusher.await.unwrap();
    let got = drain(&o).await;
    assert_eq!(got.len(), 16);
    assert_eq!(got.last(), Some(&completed("16")));
    assert_eq!(o.stats().dropped, 0);
}

/// The indexed queue against the plain scan it replaced, on random
/// sequences of pushes (running/completed items, usage, terminal
/// updates, urgent replies), pops and batches through a small bound.
#[tokio::test]
async fn indexed_queue_matches_a_plain_scan() {
    fn reference_push(q: &mut VecDeque<ClientMessage>, cap: usize, msg: ClientMessage) -> bool {
        if q.len() < cap {
            q.push_back(msg);
            return true;
        }
        if let Some(slot) = q.iter_mut().rev().find(|o| supersedes(&msg, o)) {
            *slot = msg;
            return true;
        }
        if let Some(pos) = q.iter().position(is_intermediate) {
            q.remove(pos);
            q.push_back(msg);
            return true;
        }
        is_intermediate(&msg)
    }
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut rand = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for round in 0..200 {
        let cap = 1 + rand(12) as usize;
        let o = Outbox::new(cap, Redactor::new());
        let mut reference = VecDeque::new();
        for step in 0..300 {
            let item = format!("i{}", rand(6));
            let msg = match rand(7) {
                0 | 1 => running(&item, &format!("{round}-{step}")),
                2 => item_done(&item, &step.to_string()),
                3 => messages::token_usage(
                    None,
                    &format!("t{}", rand(2)),
                    "u",
                    sdk_adapter::TokenUsage::default(),
                ),
                4 => completed(&step.to_string()),
                5 => {
                    let hb = messages::heartbeat(Some(step.to_string()));
                    o.push_urgent(hb.clone());
                    reference.push_front(hb);
                    continue;
                }
                _ if rand(2) == 0 => {
                    let got = if o.is_empty() {
                        None
                    } else {
                        Some(o.pop().await)
                    };
                    assert_eq!(got, reference.pop_front(), "round {round} step {step}");
                    continue;
                }
                _ => {
                    // A batch: the urgent replies at the front alone
                    // (here every heartbeat is one), else up to `max`.
                    let max = 1 + rand(8) as usize;
                    let urgent = reference
                        .iter()
                        .take_while(|m| matches!(m.payload, Some(Payload::HeartbeatResponse(_))))
                        .count();
                    let n = match urgent {
                        0 => max.min(reference.len()),
                        urgent => max.min(urgent),
                    };
                    let got: Vec<ClientMessage> = o
                        .try_pop_many(max)
                        .into_iter()
                        .map(|t| decode(&t.encoded))
                        .collect();
                    let want: Vec<ClientMessage> = reference.drain(..n).collect();
                    assert_eq!(got, want, "round {round} step {step}");
                    continue;
                }
            };
            let mut slot = Some(msg.clone());
            let pushed = o.try_push(&mut slot);
            assert_eq!(pushed, reference_push(&mut reference, cap, msg));
            assert_eq!(o.stats().depth, reference.len());
        }
        let rest = drain(&o).await;
        assert_eq!(rest, Vec::from(reference), "round {round}");
    }
}

#[tokio::test]
async fn dropped_updates_leave_slots_that_stay_within_twice_the_bound() {
    // Disconnected: nothing is taken, every new snapshot drops the
    // oldest queued one. The empty slots are swept, not kept forever.
    let cap = 8;
    let o = Outbox::new(cap, Redactor::new());
    for i in 0..1_000 {
        let mut slot = Some(running(&format!("i{i}"), "x"));
        assert!(o.try_push(&mut slot));
        let queue = o.lock();
        assert!(queue.len() <= cap);
        assert!(
            queue.items.len() <= 2 * cap + 1,
            "{} slots",
            queue.items.len()
        );
    }
    let left: Vec<ClientMessage> = drain(&o).await;
    let want: Vec<ClientMessage> = (1_000 - cap..1_000)
        .map(|i| running(&format!("i{i}"), "x"))
        .collect();
    assert_eq!(left, want);
    assert_eq!(o.stats().depth, 0);
}

#[tokio::test]
async fn urgent_goes_first_and_replies_never_wait() {
    let o = Outbox::new(16, Redactor::new());
    for i in 0..16 {
        o.push(completed(&i.to_string())).await;
    }
    o.push_reply(messages::thread(None, "t", ThreadStatus::Ready));
    o.push_urgent(messages::heartbeat(Some("hb".into())));
    assert_eq!(o.pop().await, messages::heartbeat(Some("hb".into())));
    assert_eq!(o.stats().depth, 17);
}

#[tokio::test]
async fn urgent_replies_are_taken_alone() {
    let o = Outbox::new(16, Redactor::new());
    for i in 0..4 {
        o.push(completed(&i.to_string())).await;
    }
    o.push_urgent(messages::heartbeat(Some("a".into())));
    o.push_urgent(messages::heartbeat(Some("b".into())));
    let ids = |taken: Vec<Taken>| -> Vec<String> {
        taken
            .into_iter()
            .map(|t| decode(&t.encoded).request_id.unwrap_or_default())
            .collect()
    };
    assert_eq!(ids(o.try_pop_many(8)), ["b", "a"]);
    assert_eq!(o.try_pop_many(8).len(), 4);
}

fn text_of(msg: &ClientMessage) -> String {
    format!("{msg:?}")
}

/// An update is masked once, as it enters: what the journal, the
/// transcript and the link get is the masked update, whichever way it
/// came in (one push, a burst, a read-loop reply, a thread's request
/// error recorded for that thread).
#[tokio::test]
async fn every_update_is_masked_as_it_enters_for_journal_transcript_and_wire() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open(&dir.path().join("journal")).unwrap();
    let redactor = Redactor::new();
    let secret = "ghs_masked_on_entry_1234";
    redactor.add(secret);
    let o = Outbox::journaled(64, journal, redactor);
    let transcripts = dir.path().join("transcripts");
    o.set_transcripts(Transcripts::start(transcripts.clone()).unwrap());
    let says = |n: u32| format!("line {n} quotes {secret}");
    o.push(item_done("a", &says(0))).await;
    o.push_burst(vec![running("b", &says(1)), item_done("b", &says(2))])
        .await;
    o.push_reply(messages::thread_name(None, "t", Some(says(3))));
    o.push_for_thread("t", messages::request_error(Some("r".into()), says(4)))
        .await;
    let taken = o.try_pop_many(16);
    assert_eq!(taken.len(), 5);
    for t in &taken {
        let text = text_of(&decode(&t.encoded));
        assert!(
            !text.contains(secret) && text.contains("quotes ***"),
            "{text}"
        );
    }
    let journaled = taken.iter().filter(|t| t.journal.is_some()).count();
    assert_eq!(journaled, 4, "all but the RUNNING snapshot");
    // Every update carries its encoding (the journal's record of the
    // durable ones), which the wire writes as it is, and its label.
    for t in &taken {
        let update = decode(&t.encoded);
        assert_eq!(t.encoded[..], update.encode_to_vec()[..]);
        assert_eq!(t.label, Label::of(&update));
    }
    if let Some(journal) = &o.journal {
        journal.flush().await.unwrap();
    }
    drop(o);
    let (_, recovered) = Journal::open(&dir.path().join("journal")).unwrap();
    assert_eq!(recovered.entries.len(), 4);
    for e in &recovered.entries {
        let msg = ClientMessage::decode(&e.message[..]).unwrap();
        assert!(text_of(&msg).contains("quotes ***"), "{msg:?}");
    }
    let file = crate::delivery::transcript::path(&transcripts, "t").unwrap();
    let mut lines = String::new();
    for _ in 0..200 {
        lines = std::fs::read_to_string(&file).unwrap_or_default();
        if lines.lines().count() == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(lines.lines().count(), 5, "{lines}");
    assert!(!lines.contains(secret), "{lines}");
    assert!(lines.contains("request_error"), "{lines}");
}

/// An update that waited while a secret was added is masked again as
/// it is taken, whichever way it is taken, and encoded again: the bytes it
/// entered with (the journal's, which still hold the secret) are not what
/// the wire gets.
#[tokio::test]
async fn a_secret_added_while_an_update_waits_is_masked_as_it_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open(dir.path()).unwrap();
    let redactor = Redactor::new();
    let o = Outbox::journaled(16, journal, redactor.clone());
    let late = "ghs_added_while_queued_5678";
    o.push(running("a", &format!("saw {late}"))).await;
    o.push(item_done("a", &format!("saw {late} again"))).await;
    redactor.add(late);
    o.push(item_done("b", &format!("saw {late} after"))).await;
    let first = o.pop().await;
    let rest = o.try_pop_many(8);
    assert_eq!(rest.len(), 2);
    let rest_decoded = [decode(&rest[0].encoded), decode(&rest[1].encoded)];
    for text in [&first, &rest_decoded[0], &rest_decoded[1]].map(text_of) {
        assert!(!text.contains(late) && text.contains("saw ***"), "{text}");
    }
    assert!(rest[0].journal.is_some());
    // Masked again: encoded again for the wire, the secret gone from the
    // bytes too; the rest as they entered.
    for t in &rest {
        let decoded = ClientMessage::decode(&t.encoded[..]).unwrap();
        assert!(!text_of(&decoded).contains(late));
        assert_eq!(t.label, Label::of(&decoded));
    }
}

#[tokio::test]
async fn a_burst_is_queued_in_order_its_completed_items_journaled() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open(dir.path()).unwrap();
    let o = Outbox::journaled(64, journal, Redactor::new());
    o.push(running("a", "0")).await;
    let burst = vec![
        running("a", "1"),
        item_done("a", "2"),
        running("b", "3"),
        item_done("b", "4"),
    ];
    o.push_burst(burst.clone()).await;
    let taken = o.try_pop_many(16);
    let got: Vec<ClientMessage> = taken.iter().map(|t| decode(&t.encoded)).collect();
    let mut want = vec![running("a", "0")];
    want.extend(burst);
    assert_eq!(got, want, "in order, nothing coalesced below the bound");
    let journaled: Vec<bool> = taken.iter().map(|t| t.journal.is_some()).collect();
    assert_eq!(journaled, [false, false, true, false, true]);
    // Both completed items are in the journal, in order, once.
    let want_ids: Vec<u64> = taken.iter().filter_map(|t| t.journal).collect();
    if let Some(journal) = &o.journal {
        journal.flush().await.unwrap();
    }
    drop(o);
    let (_, recovered) = Journal::open(dir.path()).unwrap();
    let ids: Vec<u64> = recovered.entries.iter().map(|e| e.id).collect();
    assert_eq!(ids, want_ids);
}

#[tokio::test]
async fn a_burst_past_the_bound_makes_room_as_single_pushes_do() {
    let o = Outbox::new(3, Redactor::new());
    o.push(running("a", "0")).await;
    o.push(completed("1")).await;
    // Room for one: "b" queued under the lock; then "a" supersedes the
    // queued RUNNING "a", and "c" replaces the oldest RUNNING update.
    o.push_burst(vec![
        running("b", "2"),
        running("a", "3"),
        running("c", "4"),
    ])
    .await;
    let got = drain(&o).await;
    assert_eq!(got, [completed("1"), running("b", "2"), running("c", "4")]);
    assert_eq!(o.coalesced.load(Ordering::Relaxed), 1);
    assert_eq!(o.dropped.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn a_burst_into_a_full_outbox_sheds_its_own_outdated_snapshots_first() {
    let dir = tempfile::tempdir().unwrap();
    let o = Outbox::new(4, Redactor::new());
    o.set_transcripts(Transcripts::start(dir.path().to_path_buf()).unwrap());
    o.push(completed("0")).await;
    for x in ["x1", "x2", "x3"] {
        o.push(running(x, "queued")).await;
    }
    // Full. "a" 1 and 2 are outdated by "a"'s COMPLETED, "b" by its
    // own; "c" by nothing. Each of the three left makes room by
    // dropping the oldest queued snapshot.
    o.push_burst(vec![
        running("a", "shed 1"),
        running("a", "shed 2"),
        item_done("a", "3"),
        running("b", "shed 4"),
        item_done("b", "5"),
        running("c", "6"),
    ])
    .await;
    let got = drain(&o).await;
    assert_eq!(
        got,
        [
            completed("0"),
            item_done("a", "3"),
            item_done("b", "5"),
            running("c", "6")
        ]
    );
    assert_eq!(
        o.coalesced.load(Ordering::Relaxed),
        3,
        "shed from the burst"
    );
    assert_eq!(o.dropped.load(Ordering::Relaxed), 3, "x1, x2, x3");
    // Never sent, so never recorded: 4 lines before the burst, 3 of it.
    let file = crate::delivery::transcript::path(dir.path(), "t").unwrap();
    let read = || std::fs::read_to_string(&file).unwrap_or_default();
    for _ in 0..200 {
        if read().lines().count() >= 7 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Time for a line too many to show.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let lines = read();
    assert_eq!(lines.lines().count(), 7, "{lines}");
    assert!(!lines.contains("shed"), "{lines}");
}

#[tokio::test]
async fn a_burst_holding_a_turn_end_is_pushed_one_by_one() {
    let o = Outbox::new(8, Redactor::new());
    let burst = vec![running("a", "1"), completed("u"), running("b", "2")];
    o.push_burst(burst.clone()).await;
    assert_eq!(drain(&o).await, burst);
}

/// A durable update is on disk when its push returns, one at a time or in
/// a burst: a producer (the SDK's next step) goes on only once what it
/// produced survives a SIGKILL. Queued behind the writer, completed items
/// an SDK had long moved past were lost with the process.
#[tokio::test]
async fn a_durable_update_is_written_when_its_push_returns() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open(dir.path()).unwrap();
    let o = Outbox::journaled(64, journal, Redactor::new());
    let on_disk = |m: &ClientMessage| {
        let file = std::fs::read(dir.path().join(crate::delivery::journal::FILE)).unwrap();
        let bytes = m.encode_to_vec();
        file.windows(bytes.len()).any(|w| w == bytes)
    };
    let one = item_done("a", "said once");
    o.push(one.clone()).await;
    assert!(on_disk(&one));
    let burst = vec![running("b", "1"), item_done("b", "said in a burst")];
    o.push_burst(burst.clone()).await;
    assert!(on_disk(&burst[1]));
    assert!(!on_disk(&burst[0]), "a RUNNING snapshot is not journaled");
}

/// Token usage is journaled (a turn's last report may be its only one);
/// a full outbox still replaces a queued report by the thread's next, and
/// the replaced one's journal entry is forgotten: after a crash only the
/// newer is sent.
#[tokio::test]
async fn token_usage_is_journaled_and_a_replaced_report_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open(dir.path()).unwrap();
    let o = Outbox::journaled(2, journal, Redactor::new());
    let usage = |input_tokens: i64| {
        let total = sdk_adapter::TokenUsageBreakdown {
            input_tokens,
            ..Default::default()
        };
        let usage = sdk_adapter::TokenUsage {
            total,
            ..Default::default()
        };
        messages::token_usage(None, "t", "u", usage)
    };
    o.push(usage(1)).await;
    o.push(item_done("a", "x")).await;
    o.push(usage(2)).await;
    assert_eq!(o.stats().coalesced, 1, "{:?}", o.stats());
    let taken = o.try_pop_many(16);
    assert!(taken.iter().all(|t| t.journal.is_some()));
    if let Some(journal) = &o.journal {
        journal.flush().await.unwrap();
    }
    drop((o, taken));
    let (_, recovered) = Journal::open(dir.path()).unwrap();
    let live: Vec<ClientMessage> = recovered
        .entries
        .iter()
        .map(|e| ClientMessage::decode(&e.message[..]).unwrap())
        .collect();
    assert_eq!(live, vec![item_done("a", "x"), usage(2)]);
}

/// A burst's encodings are each what the update alone encodes to, laid
/// end to end in one allocation.
#[test]
fn a_bursts_updates_are_encoded_into_one_allocation() {
    let msgs = vec![
        running("a", "0"),
        item_done("a", &"x".repeat(5000)),
        completed("t1"),
        messages::heartbeat(None),
    ];
    let encoded = encode_all(&msgs);
    assert_eq!(encoded.len(), msgs.len());
    for (msg, bytes) in msgs.iter().zip(&encoded) {
        assert_eq!(bytes[..], encode(msg)[..]);
    }
    for pair in encoded.windows(2) {
        let end = pair[0].as_ptr().wrapping_add(pair[0].len());
        assert_eq!(end, pair[1].as_ptr(), "one allocation, end to end");
    }
}
