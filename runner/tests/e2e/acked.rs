//! Acknowledged delivery and the durable outbox, through the real
//! binary over loopback: faults at random moments while threads stream,
//! with a control plane that acknowledges (exactly once, in order) and one
//! that does not (terminal updates at least once).
//!
//! Short by default (CI); `SOAK_ROUNDS=N` scales every fault count (the
//! issue's long form: `SOAK_ROUNDS=50 cargo test -p agent-runner --test e2e
//! acked -- --nocapture`, which gives 100 drops + restarts and 50 kills).
//! `SOAK_SEED` replays the random moments of an earlier run. No test
//! asserts a timing; each prints what it measured.

use std::collections::HashMap;
use std::time::Duration;

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use mock_control_plane::{AckMode, MockConfig, MockControlPlane};
use test_kit::faults::{
    BlackholeProxy, Fault, Faults, Plan, Rng, Settle, Waves, missing_before_marker,
    progress_script, rounds, take_progress,
};
use test_kit::runner::threads_of_a;

use crate::support::*;

async fn mock_with(mode: AckMode) -> MockControlPlane {
    MockControlPlane::start(MockConfig::default().with_ack_mode(mode))
        .await
        .expect("mock starts")
}

/// A turn streaming `lines` items, 10 ms apart.
fn streaming_script(lines: u32) -> String {
    (0..lines)
        .map(|i| format!("say s{i}\nsleep 10\n"))
        .collect()
}

/// A dropped stream after an even number of faults, a control-plane
/// restart (down up to 200 ms) after an odd one.
fn drop_then_restart(done: usize, rng: &mut Rng) -> Fault {
    if done.is_multiple_of(2) {
        Fault::Drop
    } else {
        Fault::Restart { down: rng.ms(200) }
    }
}

/// Every turn in `rids` arrived whole, each update exactly once and in
/// order, and the mock saw a gap-free, numbered sequence.
fn assert_exact(cp: &MockControlPlane, rids: &[String], items: u32, runner: &RunnerProc) {
    let all = by_rid(cp);
    let want = expected_shape(items);
    for rid in rids {
        let got: Vec<Step> = all
            .get(rid)
            .map_or(vec![], |v| v.iter().map(step).collect());
        assert_eq!(
            got,
            want,
            "{rid}: every update exactly once, in order\n{}",
            runner.logs()
        );
    }
    let report = cp.sequence_report();
    assert!(report.gaps.is_empty(), "sequence gaps: {report:?}");
    assert_eq!(report.unnumbered, 0, "{report:?}");
    assert!(
        cp.invalid_received().is_empty(),
        "{:?}",
        cp.invalid_received()
    );
}

/// Drops and control-plane restarts at random moments while 50 threads
/// stream items, against a control plane that acknowledges: every update
/// (RUNNING snapshots in flight included) is processed exactly once and in
/// order, with no gap in the sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acked_drops_and_restarts_while_streaming_lose_and_repeat_nothing() {
    const THREADS: usize = 50;
    const LINES: u32 = 20;
    let mut rng = Rng::new("acked_soak");
    let (cp, mut runner) = agent_with(|opts| opts).await;
    let threads = threads_of_a(&cp, THREADS).await;
    let script = streaming_script(LINES);
    // Two faults per wave at random moments while items stream: a dropped
    // stream, then a control-plane restart.
    let waves = Waves {
        agent: "a",
        threads: &threads,
        script: &script,
        prefix: "w",
        settle: Settle::Completed,
    };
    let plan = Plan {
        faults: 2 * rounds(),
        per_wave: 2,
        pause: Duration::from_millis(30),
        jitter_ms: 200,
        fault: drop_then_restart,
    };
    let mut faults = Faults::new(&cp, &mut runner);
    let rids = faults.during_waves(&waves, &plan, &mut rng, |_| {}).await;
    let done = faults.done();
    // A late duplicate would show up here.
    let hb = "late-hb";
    send(&cp, hb, Request::HeartbeatRequest(HeartbeatRequest {})).await;
    reply(&cp, hb).await;
    assert_exact(&cp, &rids, LINES + 1, &runner);
    let report = cp.sequence_report();
    println!(
        "acked_soak: {done} faults ({} drops, {} restarts) over {} turns of {} updates: 0 lost, 0 processed twice; {} re-sent updates dropped by the control plane as already processed; {} acknowledgements",
        done.div_ceil(2),
        done / 2,
        rids.len(),
        expected_shape(LINES + 1).len(),
        report.duplicates,
        report.acks_sent
    );
}

/// A connection that stalls (no bytes, no close) while items stream is
/// noticed by keepalive; after the reconnect nothing is lost, nothing
/// repeated: what went into the dead connection is re-sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acked_blackholed_connection_loses_nothing() {
    const THREADS: usize = 10;
    const LINES: u32 = 40;
    let mut rng = Rng::new("acked_blackhole");
    let stalls = (rounds() / 2).max(2);
    let cp = mock().await;
    let proxy = BlackholeProxy::start(cp.addr()).await;
    let mut runner = RunnerProc::start(
        RunnerOpts::new(proxy.url())
            .arg("--keepalive-interval")
            .arg("1s")
            .arg("--keepalive-timeout")
            .arg("1s"),
    );
    cp.wait_connected(WAIT)
        .await
        .expect("connects via the proxy");
    create_agent(&cp, "a").await;
    let threads = threads_of_a(&cp, THREADS).await;
    let script = streaming_script(LINES);
    // One stall per wave, noticed by keepalive.
    let waves = Waves {
        agent: "a",
        threads: &threads,
        script: &script,
        prefix: "b",
        settle: Settle::Completed,
    };
    let plan = Plan {
        faults: stalls,
        per_wave: 1,
        pause: Duration::from_millis(50),
        jitter_ms: 250,
        fault: |_, _| Fault::Blackhole,
    };
    let rids = Faults::new(&cp, &mut runner)
        .through(&proxy)
        .during_waves(&waves, &plan, &mut rng, |_| {})
        .await;
    assert_exact(&cp, &rids, LINES + 1, &runner);
    println!(
        "acked_blackhole: {stalls} stalls over {} streaming turns: 0 lost, 0 processed twice ({} re-sends dropped as already processed)",
        rids.len(),
        cp.sequence_report().duplicates
    );
}

/// What the control plane saw of one turn.
#[derive(Default, Debug)]
struct TurnSeen {
    started: bool,
    completed: usize,
    /// COMPLETED updates per item id.
    items: HashMap<String, usize>,
}

fn turns_seen(cp: &MockControlPlane, rids: &[String]) -> HashMap<String, TurnSeen> {
    let all = by_rid(cp);
    rids.iter()
        .map(|rid| {
            let mut seen = TurnSeen::default();
            for m in all.get(rid).into_iter().flatten() {
                match payload(m) {
                    Some(Payload::TurnUpdate(t)) if t.status == TurnStatus::Running as i32 => {
                        seen.started = true;
                    }
                    Some(Payload::TurnUpdate(t)) if t.status == TurnStatus::Completed as i32 => {
                        seen.started = true;
                        seen.completed += 1;
                    }
                    Some(Payload::ItemUpdate(i)) if i.status == ItemStatus::Completed as i32 => {
                        *seen.items.entry(i.sdk_item_id.clone()).or_default() += 1;
                    }
                    _ => {}
                }
            }
            (rid.clone(), seen)
        })
        .collect()
}

/// SIGKILLs at random moments while threads stream, the runner restarted
/// on the same state each time. Each turn alternates `say s<N>` and, 100 ms
/// later, a marker `N` written in its workspace ([`progress_script`]): per
/// turn, every `say` produced before its last marker must arrive as a
/// COMPLETED item, whatever the moment of the kill (before this, the
/// runner only queued a completed item for its journal and took the SDK's
/// next events: items a turn had moved past were lost). Returns (turns started, extra
/// COMPLETED turn updates, extra completed items, completed items that
/// arrived of those proved produced).
async fn sigkills_while_streaming(mode: AckMode, name: &str) -> (usize, usize, usize, usize) {
    const THREADS: usize = 10;
    const LINES: u32 = 20;
    let mut rng = Rng::new(name);
    let kills = rounds().max(3);
    let cp = mock_with(mode).await;
    let mut runner = RunnerProc::start_in(RunnerOpts::new(cp.url()), RunnerDirs::new());
    cp.wait_connected(WAIT).await.expect("runner connects");
    create_agent(&cp, "a").await;
    let threads = threads_of_a(&cp, THREADS).await;
    let workspaces: Vec<_> = threads
        .iter()
        .map(|t| runner.thread_workspace("a", t))
        .collect();
    let script = progress_script(LINES, 100);
    // Every killed turn is over after its wave (completed or reported): the
    // threads take new turns.
    let waves = Waves {
        agent: "a",
        threads: &threads,
        script: &script,
        prefix: "k",
        settle: Settle::FollowUp,
    };
    let plan = Plan {
        faults: kills,
        per_wave: 1,
        pause: Duration::from_millis(100),
        jitter_ms: 2000,
        fault: |_, _| Fault::Kill,
    };
    // Per turn, after its wave: the `say`s proved produced that are missing.
    let (mut proved, mut lost) = (0usize, Vec::new());
    let rids = Faults::new(&cp, &mut runner)
        .during_waves(&waves, &plan, &mut rng, |rids| {
            let all = by_rid(&cp);
            for (rid, ws) in rids.iter().zip(&workspaces) {
                let last = take_progress(ws);
                let said = said(all.get(rid).map_or(&[][..], Vec::as_slice));
                let missing = missing_before_marker(last, &said);
                proved += last.map_or(0, |l| l as usize + 1);
                if !missing.is_empty() {
                    lost.push(format!("{rid}: marker {last:?}, missing {missing:?}"));
                }
            }
        })
        .await;
    assert!(
        lost.is_empty(),
        "completed items produced before a kill never arrived:\n{}\n{}",
        lost.join("\n"),
        runner.logs()
    );
    let seen = turns_seen(&cp, &rids);
    let (mut started, mut extra_turn, mut extra_items) = (0, 0, 0);
    for (rid, s) in &seen {
        if !s.started && s.completed == 0 {
            // The message was still in a mailbox at the kill: it never
            // reached the runner's store, and no turn exists.
            continue;
        }
        started += 1;
        assert!(
            s.completed >= 1,
            "{rid}: its turn never ended for the control plane: {s:?}\n{}",
            runner.logs()
        );
        extra_turn += s.completed - 1;
        extra_items += s.items.values().map(|n| n - 1).sum::<usize>();
    }
    assert!(started > 0, "no turn started before the kills");
    assert!(cp.invalid_received().is_empty());
    (started, extra_turn, extra_items, proved)
}

/// With acknowledgements: every turn's end arrives exactly once and no
/// completed item twice, across SIGKILLs (the journal is sent first after
/// the restart, with the sequence numbers it was sent with).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acked_sigkills_while_streaming_deliver_every_terminal_update_once() {
    let (started, extra_turn, extra_items, proved) =
        sigkills_while_streaming(AckMode::Immediate, "acked_sigkill").await;
    println!(
        "acked_sigkill: {started} turns killed or finished around kills: every COMPLETED arrived, and all {proved} completed items proved produced before a kill; {extra_turn} turn ends and {extra_items} items processed twice"
    );
    assert_eq!((extra_turn, extra_items), (0, 0), "exactly once");
}

/// Without acknowledgements: every turn's end arrives at least once;
/// duplicates are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_sigkills_while_streaming_deliver_every_terminal_update() {
    let (started, extra_turn, extra_items, proved) =
        sigkills_while_streaming(AckMode::Refuse, "legacy_sigkill").await;
    println!(
        "legacy_sigkill: {started} turns killed or finished around kills: every COMPLETED arrived, and all {proved} completed items proved produced before a kill; duplicates: {extra_turn} turn ends, {extra_items} completed items"
    );
}

/// A slow control plane without acknowledgements (each message costs it
/// 100 µs, as a Python grpcio one would: what the runner sends piles up in
/// HTTP/2 buffers): stream drops at random moments while threads stream;
/// every turn's COMPLETED and every completed item arrives at least once
/// (terminal updates handed to a dead connection are re-sent); no message
/// carries a sequence number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_drops_while_streaming_deliver_every_terminal_update() {
    const THREADS: usize = 20;
    const LINES: u32 = 30;
    let mut rng = Rng::new("legacy_drops");
    let drops = rounds();
    let cp = MockControlPlane::start(
        MockConfig::default()
            .with_ack_mode(AckMode::Refuse)
            .with_read_delay(Duration::from_micros(100)),
    )
    .await
    .expect("mock starts");
    let mut runner = RunnerProc::start(RunnerOpts::new(cp.url()));
    cp.wait_connected(WAIT).await.expect("runner connects");
    create_agent(&cp, "a").await;
    let threads = threads_of_a(&cp, THREADS).await;
    let script = streaming_script(LINES);
    // The turn's COMPLETED must arrive (re-sent if it died in flight).
    let waves = Waves {
        agent: "a",
        threads: &threads,
        script: &script,
        prefix: "l",
        settle: Settle::Completed,
    };
    let plan = Plan {
        faults: drops,
        per_wave: 2,
        pause: Duration::from_millis(30),
        jitter_ms: 200,
        fault: |_, _| Fault::Drop,
    };
    let mut faults = Faults::new(&cp, &mut runner);
    let rids = faults.during_waves(&waves, &plan, &mut rng, |_| {}).await;
    let done = faults.done();
    // Let the last re-sends land before counting.
    let hb = "late-hb";
    send(&cp, hb, Request::HeartbeatRequest(HeartbeatRequest {})).await;
    reply(&cp, hb).await;
    let seen = turns_seen(&cp, &rids);
    let (mut extra_turn, mut extra_items) = (0, 0);
    for (rid, s) in &seen {
        assert!(s.completed >= 1, "{rid}: {s:?}");
        assert_eq!(
            s.items.len(),
            LINES as usize + 1,
            "{rid}: every completed item at least once: {s:?}"
        );
        extra_turn += s.completed - 1;
        extra_items += s.items.values().map(|n| n - 1).sum::<usize>();
    }
    assert!(
        cp.received().iter().all(|m| m.sequence == 0),
        "a legacy control plane gets no sequence numbers"
    );
    let regs = cp.registrations();
    assert!(
        regs.iter()
            .all(|r| r.request.features == ["acked-delivery/1", "approvals/1"]),
        "every registration offers the feature"
    );
    println!(
        "legacy_drops: {done} drops over {} streaming turns: every terminal update arrived; duplicates: {extra_turn} turn ends, {extra_items} completed items",
        rids.len()
    );
}

/// A control plane that accepts acknowledged delivery but never
/// acknowledges: the runner sends at most its outbox capacity (memory
/// stays bounded), says so in its log, still answers heartbeats, and drops
/// no terminal update; once acknowledgements come, every turn finishes and
/// every terminal update arrives exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_acking_control_plane_bounds_what_is_kept() {
    const CAPACITY: usize = 64;
    const THREADS: usize = 4;
    const LINES: u32 = 40;
    let cp = mock_with(AckMode::Never).await;
    let runner = RunnerProc::start(
        RunnerOpts::new(cp.url())
            .arg("--outbox-capacity")
            .arg(&CAPACITY.to_string()),
    );
    cp.wait_connected(WAIT).await.expect("runner connects");
    create_agent(&cp, "a").await;
    let mut threads = Vec::new();
    for i in 0..THREADS {
        threads.push(create_thread(&cp, "a", &format!("t{i}")).await);
    }
    let script: String = (0..LINES).map(|i| format!("say s{i}\n")).collect();
    let rids: Vec<String> = (0..THREADS).map(|i| format!("n-t{i}")).collect();
    for (rid, t) in rids.iter().zip(&threads) {
        send(&cp, rid, user_message("a", t, &script, false)).await;
    }
    runner
        .wait_log("the control plane is not acknowledging")
        .await;
    // Still answering while full.
    send(&cp, "hb", Request::HeartbeatRequest(HeartbeatRequest {})).await;
    reply(&cp, "hb").await;
    let sent_unacked = cp.received_count();
    assert!(
        sent_unacked <= CAPACITY + 2,
        "{sent_unacked} updates sent without an acknowledgement (capacity {CAPACITY})"
    );
    // Acknowledgements resume: everything kept is settled, turns finish.
    cp.set_ack_mode(AckMode::Immediate);
    for rid in &rids {
        turn_completed(&cp, rid).await;
    }
    let seen = turns_seen(&cp, &rids);
    for (rid, s) in &seen {
        assert_eq!(s.completed, 1, "{rid}: {s:?}");
        assert_eq!(s.items.len(), LINES as usize + 1, "{rid}: {s:?}");
        assert!(s.items.values().all(|n| *n == 1), "{rid}: {s:?}");
    }
    let report = cp.sequence_report();
    assert!(report.gaps.is_empty(), "{report:?}");
    let all = by_rid(&cp);
    let running_items = rids
        .iter()
        .flat_map(|r| all.get(r).into_iter().flatten())
        .filter(|m| matches!(payload(m), Some(Payload::ItemUpdate(i)) if i.status == ItemStatus::Running as i32))
        .count();
    println!(
        "never_acking: capacity {CAPACITY}: {sent_unacked} updates sent before acknowledgements resumed; {} of {} RUNNING snapshots given up while full; every terminal update exactly once",
        THREADS * (LINES as usize + 1) - running_items,
        THREADS * (LINES as usize + 1)
    );
}

/// A control plane that ends the stream every time one update arrives (a
/// thread's COMPLETED item saying `unwanted`), without processing it: after
/// three connections in a row end so, the runner sets that update aside —
/// a `RequestError` with its request id, in its place, says so — and
/// everything behind it flows: that turn completes, and another thread's
/// turn, queued behind it, arrives whole. The warning names the update's
/// kind and thread, never its content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_the_control_plane_keeps_rejecting_is_set_aside() {
    let (cp, runner) = agent_with(|opts| opts).await;
    let threads = threads_of_a(&cp, 2).await;
    cp.reject_matching(|m: &ClientMessage| {
        matches!(payload(m), Some(Payload::ItemUpdate(i))
            if i.status == ItemStatus::Completed as i32 && i.text.as_deref() == Some("unwanted"))
    });
    let script = "say before\nsay unwanted\nsay after";
    send(&cp, "rej", user_message("a", &threads[0], script, false)).await;
    send(
        &cp,
        "other",
        user_message("a", &threads[1], "say fine", false),
    )
    .await;
    turn_completed(&cp, "rej").await;
    turn_completed(&cp, "other").await;
    let got = replies(&cp, "rej");
    let errors: Vec<&str> = got.iter().filter_map(error_text).collect();
    assert!(
        errors.len() == 1 && errors[0].contains("set aside"),
        "{errors:?}\n{}",
        runner.logs()
    );
    assert_eq!(said(&got), ["before", "after"]);
    assert_eq!(said(&replies(&cp, "other")), ["fine"]);
    let rejected = cp.rejected_count();
    assert!(rejected >= 3, "rejected {rejected} times");
    let report = cp.sequence_report();
    assert!(
        report.gaps.is_empty(),
        "the error took its number: {report:?}"
    );
    runner.wait_log("update set aside").await;
    let logs = runner.logs();
    let warning = logs
        .lines()
        .find(|l| l.contains("update set aside"))
        .unwrap_or_default();
    assert!(
        warning.contains("item_update") && !warning.contains("unwanted"),
        "{warning}"
    );
    println!(
        "set_aside: the control plane ended the stream {rejected} times on one update; set aside, the error in its place, the rest delivered"
    );
}
