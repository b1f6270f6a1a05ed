//! User messages beyond `--max-concurrent-turns` wait for a turn slot
//! instead of being refused: a burst for many threads all runs, never more
//! turns at once than the limit, each thread's messages in order; a thread
//! whose message waits stays responsive — an interrupt, a delete, the
//! admin socket's `interrupt` and the drain each answer the waiting
//! message — and the wait shows in `/status`, `/metrics` and
//! `agent-runner threads`.

use std::collections::HashSet;
use std::time::Duration;

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use serde_json::Value;

use crate::admin::admin;
use crate::health::{health_addr, wait_get, wait_metric_is};
use crate::support::*;

/// Threads of the burst: ten times the limit of 2 and more.
const THREADS: usize = 24;

fn interrupt(thread: &str) -> Request {
    Request::InterruptTurnRequest(InterruptTurnRequest {
        agent_id: "a".into(),
        thread_id: thread.into(),
    })
}

fn delete(thread: &str) -> Request {
    Request::DeleteThreadRequest(DeleteThreadRequest {
        agent_id: "a".into(),
        thread_id: thread.into(),
    })
}

/// Index in `log` of the first message answering `rid` that `is` accepts.
fn position(log: &[ClientMessage], rid: &str, is: impl Fn(&ClientMessage) -> bool) -> usize {
    log.iter()
        .position(|m| rid_is(m, rid) && is(m))
        .unwrap_or_else(|| panic!("nothing for {rid} in {log:#?}"))
}

/// The most turns running at once, as the control plane saw them: a turn
/// runs from its first RUNNING to its COMPLETED. The runner sends a turn's
/// COMPLETED before it frees the turn's slot, and a turn's RUNNING after it
/// took one, so the log never shows more than really ran.
fn most_at_once(log: &[ClientMessage]) -> usize {
    let (mut running, mut most) = (HashSet::new(), 0);
    for m in log {
        if let Some(Payload::TurnUpdate(t)) = payload(m) {
            if t.status == TurnStatus::Running as i32 {
                running.insert(t.sdk_turn_id.clone());
            } else if t.status == TurnStatus::Completed as i32 {
                running.remove(&t.sdk_turn_id);
            }
            most = most.max(running.len());
        }
    }
    most
}

/// 24 threads each get a message whose turn sleeps, and right behind it a
/// steering message, all at once, with 2 turn slots: every turn runs, no
/// message is refused, never more than 2 turns run at once, and on each
/// thread the steering message is answered only after the first message's
/// turn started (it joins it). Then each thread's second turn runs the
/// same way, after its first.
#[tokio::test]
async fn a_burst_beyond_the_turn_limit_waits_and_every_turn_runs_in_order() {
    let (cp, _r) = agent_with(|o| o.arg("--max-concurrent-turns").arg("2")).await;
    let threads = test_kit::runner::threads_of_a(&cp, THREADS).await;
    for (i, t) in threads.iter().enumerate() {
        let first = format!("sleep 200\nsay first {i}");
        send(
            &cp,
            &format!("first-{i}"),
            user_message("a", t, &first, false),
        )
        .await;
        let steer = format!("say steer {i}");
        send(
            &cp,
            &format!("steer-{i}"),
            user_message("a", t, &steer, true),
        )
        .await;
    }
    // A steered turn's COMPLETED carries the steering message's id.
    for i in 0..THREADS {
        turn_completed(&cp, &format!("steer-{i}")).await;
    }
    for (i, t) in threads.iter().enumerate() {
        let second = format!("sleep 100\nsay second {i}");
        send(
            &cp,
            &format!("second-{i}"),
            user_message("a", t, &second, false),
        )
        .await;
    }
    for i in 0..THREADS {
        turn_completed(&cp, &format!("second-{i}")).await;
    }

    let log = cp.received();
    let errors: Vec<&str> = log.iter().filter_map(error_text).collect();
    assert!(errors.is_empty(), "refused: {errors:#?}");
    let most = most_at_once(&log);
    assert!(most <= 2, "{most} turns ran at once with a limit of 2");
    let running = |m: &ClientMessage| is_turn(m, TurnStatus::Running);
    let completed = |m: &ClientMessage| is_turn(m, TurnStatus::Completed);
    for i in 0..THREADS {
        let (first, steer, second) = (
            format!("first-{i}"),
            format!("steer-{i}"),
            format!("second-{i}"),
        );
        let started = position(&log, &first, running);
        let steered = position(&log, &steer, |_| true);
        assert!(
            started < steered && running(&log[steered]),
            "thread {i}: the steering message was answered before the turn it joins started, or refused: {:?}",
            log[steered]
        );
        let first_done = position(&log, &steer, completed);
        assert!(
            first_done < position(&log, &second, running),
            "thread {i}: its second turn started before its first ended"
        );
        let mut said_in_thread = said(&replies(&cp, &first));
        said_in_thread.extend(said(&replies(&cp, &steer)));
        for text in [format!("first {i}"), format!("steer {i}")] {
            assert!(said_in_thread.contains(&text), "{text}: {said_in_thread:?}");
        }
        assert_eq!(said(&replies(&cp, &second)), [format!("second {i}")]);
    }
}

/// The `threads --json` entry of `thread`.
async fn thread_entry(runner: &RunnerProc, thread: &str) -> Value {
    let (ok, text) = admin(runner, &["threads", "--json"]).await;
    assert!(ok, "{text}");
    let v: Value = serde_json::from_str(text.trim()).unwrap();
    v["agents"][0]["threads"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["thread_id"] == thread)
        .cloned()
        .unwrap_or_else(|| panic!("no {thread} in {v:#}"))
}

/// Polls `threads --json` until `thread` has `messages` messages waiting.
async fn wait_waiting(runner: &RunnerProc, thread: &str, messages: u64) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let entry = thread_entry(runner, thread).await;
        if entry["waiting"]["messages"] == messages {
            return entry;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{thread} never had {messages} messages waiting: {entry:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `/status` until it counts `n` turns waiting; its body.
async fn status_waiting(addr: &str, n: u64) -> String {
    let (_, body) = wait_get(addr, "/status", |code, body| {
        code == 200 && serde_json::from_str::<Value>(body).is_ok_and(|v| v["waiting_turns"] == n)
    })
    .await;
    body
}

/// With the one turn slot held by a long turn, a thread's messages wait
/// (seen in `/status`, the gauge, `threads`); an interrupt of that thread
/// answers each waiting message and the interrupt itself, and so do a
/// delete and the admin socket's `interrupt`, all while the long turn goes
/// on; afterwards the slot serves the next message as before.
#[tokio::test]
async fn a_waiting_message_is_answered_when_its_thread_is_interrupted_or_deleted() {
    let (cp, r) = agent_with(|o| {
        o.arg("--max-concurrent-turns")
            .arg("1")
            .arg("--health-addr")
            .arg("127.0.0.1:0")
    })
    .await;
    let addr = health_addr(&r).await;
    let busy = create_thread(&cp, "a", "t-busy").await;
    let t = create_thread(&cp, "a", "t-wait").await;
    // Longer than every wait of this test: nothing here is answered by
    // this turn ending.
    start_turn(&cp, "busy", "a", &busy, "sleep 600000").await;

    send(&cp, "w1", user_message("a", &t, "say never", false)).await;
    send(&cp, "w2", user_message("a", &t, "say never either", true)).await;
    let entry = wait_waiting(&r, &t, 2).await;
    assert_eq!(entry["state"], "waiting", "{entry:#}");
    let status = status_waiting(&addr, 1).await;
    assert!(
        !status.contains(t.as_str()),
        "/status names a thread: {status}"
    );
    wait_metric_is(&addr, "agent_runner_waiting_turns{sdk=\"scripted\"}", 1.0).await;

    // The interrupt cancels both, then is answered as on an idle thread.
    send(&cp, "i", interrupt(&t)).await;
    let m = reply(&cp, "i").await;
    assert!(
        matches!(payload(&m), Some(Payload::ThreadUpdate(u)) if u.status == ThreadStatus::Ready as i32),
        "{m:?}"
    );
    for rid in ["w1", "w2"] {
        let text = expect_error(&cp, rid).await;
        assert!(
            text.contains("interrupted before its turn started"),
            "{rid}: {text}"
        );
    }
    status_waiting(&addr, 0).await;
    wait_metric_is(&addr, "agent_runner_waiting_turns{sdk=\"scripted\"}", 0.0).await;

    // A delete answers the waiting message, then deletes.
    send(&cp, "w3", user_message("a", &t, "say never", false)).await;
    wait_waiting(&r, &t, 1).await;
    send(&cp, "d", delete(&t)).await;
    let m = reply(&cp, "d").await;
    assert!(
        matches!(payload(&m), Some(Payload::ThreadUpdate(u)) if u.status == ThreadStatus::Deleted as i32),
        "{m:?}"
    );
    let text = expect_error(&cp, "w3").await;
    assert!(text.contains("deleted before"), "{text}");

    // The operator's `interrupt` cancels a waiting message too.
    let t2 = create_thread(&cp, "a", "t-wait-2").await;
    send(&cp, "w4", user_message("a", &t2, "say never", false)).await;
    wait_waiting(&r, &t2, 1).await;
    let (ok, text) = admin(&r, &["interrupt", &t2]).await;
    assert!(ok && text.contains("cancelled"), "{text}");
    let text = expect_error(&cp, "w4").await;
    assert!(
        text.contains("interrupted before its turn started"),
        "{text}"
    );

    // Nothing was left holding the slot: once the long turn ends, the
    // next message runs.
    send(&cp, "ib", interrupt(&busy)).await;
    turn_completed(&cp, "ib").await;
    send(&cp, "after", user_message("a", &t2, "say hi", false)).await;
    turn_completed(&cp, "after").await;
    assert_eq!(said(&replies(&cp, "after")), ["hi"]);
    assert!(
        replies(&cp, "w1").len() == 1 && replies(&cp, "w4").len() == 1,
        "a cancelled message was answered twice"
    );
}

/// The drain answers a message waiting for a slot at once, as it answers
/// one arriving during the drain ("runner is draining"), long before the
/// drain timeout (10 minutes here) would interrupt the turn holding the
/// slot.
#[tokio::test]
async fn the_drain_answers_a_waiting_message() {
    let (cp, r) = agent_with(|o| {
        o.arg("--max-concurrent-turns")
            .arg("1")
            .arg("--drain-timeout")
            .arg("10m")
    })
    .await;
    let busy = create_thread(&cp, "a", "t-busy").await;
    let t = create_thread(&cp, "a", "t-wait").await;
    start_turn(&cp, "busy", "a", &busy, "sleep 600000").await;
    send(&cp, "w", user_message("a", &t, "say never", false)).await;
    wait_waiting(&r, &t, 1).await;
    r.signal(libc::SIGTERM);
    assert_eq!(expect_error(&cp, "w").await, "runner is draining");
}
