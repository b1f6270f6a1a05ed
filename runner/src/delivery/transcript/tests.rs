//! The transcripts' tests: the queue's bounds, the writer's files and
//! rotation, and what a line says.

use super::*;
use std::borrow::Cow;
use std::path::Path;
use tokio::sync::mpsc::Receiver;

use super::files::OPEN_FILES;
use super::line::{
    ITEM_STATUSES, ITEM_TYPES, MAX_TEXT, NAMED, Names, THREAD_STATUSES, TURN_STATUSES, name,
};
use agent_runner_proto::runner::{ItemStatus, ItemType, TurnStatus};
use serde_json::Value;

/// Every variant of the enums a line names is in its table, under its
/// `Debug` name (what the lines have always said).
#[test]
fn enum_names_are_the_variants_debug_names() {
    fn check<T>(names: &'static Names)
    where
        T: Copy + std::fmt::Debug + TryFrom<i32>,
        i32: From<T>,
    {
        let mut seen = 0;
        for n in 0..4 * NAMED {
            if let Ok(v) = T::try_from(n) {
                assert!(n < NAMED, "{v:?} = {n} is past the table");
                assert_eq!(name(names, v).0, format!("{v:?}"));
                assert!(matches!(name(names, v).0, Cow::Borrowed(_)));
                seen += 1;
            }
        }
        assert!(seen >= 3, "no variants found");
    }
    check::<ItemType>(&ITEM_TYPES);
    check::<ItemStatus>(&ITEM_STATUSES);
    check::<TurnStatus>(&TURN_STATUSES);
    check::<ThreadStatus>(&THREAD_STATUSES);
    assert_eq!(name(&ITEM_TYPES, ItemType::McpToolCall).0, "McpToolCall");
}

fn wait_for(path: &Path, pred: impl Fn(&str) -> bool) -> String {
    for _ in 0..200 {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if pred(&text) {
            return text;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{} never matched", path.display());
}

#[tokio::test]
async fn appends_rotates_and_removes() {
    let dir = tempfile::tempdir().unwrap();
    let t = Transcripts::start(dir.path().to_path_buf()).unwrap();
    let msg = crate::delivery::messages::request_error(Some("r1".into()), "token refused");
    t.record("thr-1", &msg);
    let p = path(dir.path(), "thr-1").unwrap();
    let text = wait_for(&p, |t| t.contains("request_error"));
    assert!(text.contains("token refused"), "{text}");
    let line: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(line["request_id"], "r1");
    // Past MAX_BYTES it rotates: one old file, a fresh current one.
    let big = crate::delivery::messages::request_error(None, "x".repeat(MAX_TEXT));
    for _ in 0..(MAX_BYTES as usize / MAX_TEXT + 2) {
        t.record("thr-1", &big);
    }
    t.record("thr-1", &msg);
    wait_for(&rotated(&p), |t| !t.is_empty());
    t.remove("thr-1").await;
    for _ in 0..200 {
        if !p.exists() && !rotated(&p).exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("transcripts not removed");
}

#[test]
fn a_line_names_the_update_and_every_file_gets_its_lines() {
    use agent_runner_proto::runner::ItemUpdate;
    let dir = tempfile::tempdir().unwrap();
    let t = Transcripts::start(dir.path().to_path_buf()).unwrap();
    let item = |thread: &str, n: usize| ClientMessage {
        request_id: Some("r7".into()),
        payload: Some(Payload::ItemUpdate(ItemUpdate {
            thread_id: thread.into(),
            sdk_item_id: format!("i{n}"),
            status: ItemStatus::Completed.into(),
            item_type: ItemType::AgentMessage.into(),
            text: Some(format!("line \"{n}\"")),
            ..Default::default()
        })),
        ..Default::default()
    };
    // More threads than files kept open: the closed ones keep their
    // buffered lines.
    let threads: Vec<String> = (0..OPEN_FILES + 6).map(|i| format!("thr-{i}")).collect();
    for n in 0..3 {
        for thread in &threads {
            t.record(thread, &item(thread, n));
        }
    }
    for thread in &threads {
        let p = path(dir.path(), thread).unwrap();
        let text = wait_for(&p, |t| t.lines().count() == 3);
        for (n, line) in text.lines().enumerate() {
            let v: Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["kind"], "item_update");
            assert_eq!(v["request_id"], "r7");
            assert_eq!(v["item_type"], "AgentMessage");
            assert_eq!(v["status"], "Completed");
            assert_eq!(v["text"], format!("line \"{n}\""));
            assert!(v["ts_ms"].as_u64().unwrap() > 0);
            assert!(v.get("command").is_none(), "{line}");
        }
    }
}

#[test]
fn updates_naming_a_thread_are_told_apart() {
    use agent_runner_proto::runner::ThreadUpdate;
    let created = ClientMessage {
        request_id: Some("c".into()),
        payload: Some(Payload::ThreadUpdate(ThreadUpdate {
            thread_id: "thr-9".into(),
            ..Default::default()
        })),
        ..Default::default()
    };
    assert_eq!(thread_of(&created), Some("thr-9"));
    assert_eq!(
        thread_of(&crate::delivery::messages::request_error(
            Some("r".into()),
            "x"
        )),
        None
    );
}

fn said(thread: &str, text: &str) -> ClientMessage {
    crate::delivery::messages::item(
        Some("r".into()),
        thread,
        "u",
        sdk_adapter::ItemEvent {
            item_id: "i".into(),
            kind: sdk_adapter::ItemKind::AgentMessage,
            status: sdk_adapter::ItemStatus::Completed,
            text: Some(text.into()),
            command: None,
        },
    )
}

fn texts(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["text"].as_str().unwrap_or("-").to_owned()
        })
        .collect()
}

/// A burst is recorded per thread it names, in order; an update naming
/// none, and a thread's deletion, are not recorded.
#[test]
fn a_burst_goes_to_the_transcripts_of_the_threads_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let t = Transcripts::start(dir.path().to_path_buf()).unwrap();
    let deleted = crate::delivery::messages::thread(None, "thr-b", ThreadStatus::Deleted);
    t.record_all(&[
        said("thr-a", "a0"),
        said("thr-a", "a1"),
        crate::delivery::messages::request_error(None, "names no thread"),
        said("thr-b", "b0"),
        deleted,
        said("thr-a", "a2"),
    ]);
    let a = wait_for(&path(dir.path(), "thr-a").unwrap(), |t| {
        t.lines().count() == 3
    });
    assert_eq!(texts(&a), ["a0", "a1", "a2"]);
    let b = wait_for(&path(dir.path(), "thr-b").unwrap(), |t| {
        t.lines().count() == 1
    });
    assert_eq!(texts(&b), ["b0"]);
    assert!(!a.contains("names no thread") && !b.contains("names no thread"));
}

/// A queue no writer takes from yet (the test starts one, or none).
fn without_writer() -> (Transcripts, Receiver<Job>) {
    let (tx, rx) = tokio::sync::mpsc::channel(QUEUE_CAPACITY);
    let t = Transcripts {
        tx,
        dropped: Arc::new(AtomicU64::new(0)),
        queued: Arc::new(AtomicUsize::new(0)),
        queued_bytes: Arc::new(AtomicUsize::new(0)),
    };
    (t, rx)
}

/// The queue is bounded in lines, whatever the jobs hold: past
/// [`QUEUE_CAPACITY`] a burst is dropped whole, and the next line the
/// writer writes says how many were lost.
#[test]
fn a_full_queue_drops_lines_and_the_transcript_says_how_many() {
    let dir = tempfile::tempdir().unwrap();
    let (t, rx) = without_writer();
    // No writer yet: the queue fills.
    let burst_texts: Vec<String> = (0..16).map(|n| n.to_string()).collect();
    let burst: Vec<ClientMessage> = burst_texts.iter().map(|n| said("thr-f", n)).collect();
    for _ in 0..QUEUE_CAPACITY / 16 {
        t.record_all(&burst);
    }
    assert_eq!(t.queued.load(Ordering::Relaxed), QUEUE_CAPACITY);
    t.record_all(&burst[..3]);
    t.record("thr-f", &burst[0]);
    assert_eq!(t.dropped.load(Ordering::Relaxed), 4);
    assert_eq!(t.queued.load(Ordering::Relaxed), QUEUE_CAPACITY);
    let counts = Counts {
        dropped: t.dropped.clone(),
        queued: t.queued.clone(),
        queued_bytes: t.queued_bytes.clone(),
    };
    let root = dir.path().to_path_buf();
    std::thread::spawn(move || writer::run(root, rx, counts));
    let p = path(dir.path(), "thr-f").unwrap();
    // The writer learns of the loss as it takes the first job, so the
    // gap is said before the lines it took.
    let text = wait_for(&p, |text| text.lines().count() == QUEUE_CAPACITY + 1);
    assert_eq!(t.queued.load(Ordering::Relaxed), 0);
    assert_eq!(t.queued_bytes.load(Ordering::Relaxed), 0);
    let lines: Vec<&str> = text.lines().collect();
    let gap: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(gap["dropped"], 4, "{}", lines[0]);
    assert_eq!(texts(&lines[1..17].join("\n")), burst_texts);
    drop(t);
}

/// The queue is bounded in bytes too: lines of large updates (each text
/// clipped to [`MAX_TEXT`]) are dropped (counted) past [`QUEUE_BYTES`]
/// before the line bound.
#[test]
fn a_queue_of_large_updates_is_bounded_in_bytes() {
    let (t, _rx) = without_writer();
    let big = said("thr-b", &"x".repeat(1 << 20));
    let mut line = Vec::new();
    super::line::Entry::of(&big, unix_ms()).write(&mut line);
    let each = line.len() + 1;
    assert!(each > MAX_TEXT && each < 2 * MAX_TEXT, "clipped: {each}");
    let tries = QUEUE_CAPACITY - 1;
    for _ in 0..tries {
        t.record("thr-b", &big);
    }
    let fit = QUEUE_BYTES / each;
    assert!(fit < tries);
    assert_eq!(t.queued.load(Ordering::Relaxed), fit);
    assert_eq!(t.queued_bytes.load(Ordering::Relaxed), fit * each);
    assert_eq!(t.dropped.load(Ordering::Relaxed), (tries - fit) as u64);
}

/// Lines are dropped when the queue is full, a removal never: it waits
/// for room, and comes after the lines queued before it.
#[test]
fn a_removal_waits_for_room_in_a_full_queue() {
    use futures::FutureExt as _;
    let (t, mut rx) = without_writer();
    let update = said("thr-r", "s");
    for _ in 0..QUEUE_CAPACITY {
        t.record("thr-r", &update);
    }
    let mut removal = Box::pin(t.remove("thr-r"));
    assert!(
        (&mut removal).now_or_never().is_none(),
        "queued in a full queue"
    );
    assert!(matches!(rx.try_recv(), Ok(Job::Lines { .. })));
    assert!(
        removal.now_or_never().is_some(),
        "queued once there is room"
    );
    let mut last = None;
    while let Ok(job) = rx.try_recv() {
        last = Some(job);
    }
    assert!(matches!(last, Some(Job::Remove { thread }) if thread == "thr-r"));
}

#[test]
fn unsafe_ids_have_no_path() {
    for id in ["", "../x", "a/b", ".hidden"] {
        assert!(path(Path::new("/t"), id).is_none(), "{id}");
    }
}

/// The hand-written line is byte for byte what serde_json writes for the
/// derived `Serialize`: every kind of update a line describes, with and
/// without its optional parts, and text holding every ASCII byte,
/// quotes, backslashes, non-ASCII and a clipped tail.
#[test]
fn hand_written_lines_are_serde_jsons_bytes() {
    use agent_runner_proto::runner::client_message::Payload;
    use agent_runner_proto::runner::{
        ClientMessage, CommandExecutionItem, ItemUpdate, RequestError, ThreadNameUpdate,
        ThreadUpdate, TurnUpdate,
    };
    let every_ascii: String = (0u8..0x80).map(char::from).collect();
    let texts = [
        String::new(),
        "say line 1".to_owned(),
        every_ascii.clone(),
        format!("\"quoted\" \\ back\\slash é ü 日本 🎉 \u{7f} {every_ascii}"),
        "x".repeat(MAX_TEXT + 10),
        format!("{}é", "y".repeat(MAX_TEXT - 1)),
    ];
    let mut messages = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let rid = (i % 2 == 0).then(|| format!("req-{i}\n\"{text:.20}\""));
        let item = |command: Option<CommandExecutionItem>, text: Option<String>| ClientMessage {
            request_id: rid.clone(),
            payload: Some(Payload::ItemUpdate(ItemUpdate {
                sdk_item_id: "item".into(),
                status: 2,
                item_type: i as i32,
                text,
                command_execution_item: command,
                thread_id: "t".into(),
                sdk_turn_id: "u".into(),
            })),
            sequence: 0,
        };
        messages.push(item(None, Some(text.clone())));
        messages.push(item(None, None));
        messages.push(item(
            Some(CommandExecutionItem {
                command: text.clone(),
                output: (i % 3 != 0).then(|| text.repeat(2)),
                ..Default::default()
            }),
            None,
        ));
        messages.push(ClientMessage {
            request_id: rid.clone(),
            payload: Some(Payload::RequestError(RequestError {
                error_message: text.clone(),
            })),
            sequence: 0,
        });
        messages.push(ClientMessage {
            request_id: rid.clone(),
            payload: Some(Payload::ThreadNameUpdate(ThreadNameUpdate {
                thread_id: "t".into(),
                thread_name: (i % 2 == 1).then(|| text.clone()),
            })),
            sequence: 0,
        });
        messages.push(ClientMessage {
            request_id: rid.clone(),
            payload: Some(Payload::TurnUpdate(TurnUpdate {
                thread_id: "t".into(),
                status: i as i32,
                ..Default::default()
            })),
            sequence: 0,
        });
        messages.push(ClientMessage {
            request_id: rid,
            payload: Some(Payload::ThreadUpdate(ThreadUpdate {
                thread_id: "t".into(),
                status: i as i32,
            })),
            sequence: 0,
        });
    }
    messages.push(ClientMessage::default());
    for (n, msg) in messages.iter().enumerate() {
        for ts_ms in [0, 7, u64::MAX] {
            let entry = super::line::Entry::of(msg, ts_ms);
            let mut hand = Vec::new();
            entry.write(&mut hand);
            let serde = serde_json::to_vec(&entry).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&hand),
                String::from_utf8_lossy(&serde),
                "message {n}: {msg:?}"
            );
        }
    }
}
