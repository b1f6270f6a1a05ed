//! Limits and formats the README promises: the runner-wide queue bound, a
//! thread addressed through the wrong agent, JSON log lines. (The
//! concurrent-turn cap, where messages wait for a slot: `turn_queue.rs`.)

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::{CreateThreadRequest, ThreadStatus};

use crate::support::*;

/// A control plane starting 200 tasks at once sends 200 thread creations
/// for one agent back to back: every one succeeds (a per-agent mailbox of
/// 64 used to refuse 135 of them).
#[tokio::test]
async fn a_burst_of_200_thread_creations_for_one_agent_all_succeed() {
    let (cp, _r) = connected().await;
    create_agent(&cp, "a").await;
    for i in 0..200 {
        send(
            &cp,
            &format!("c{i}"),
            Request::CreateThreadRequest(CreateThreadRequest {
                agent_id: "a".into(),
                model: "scripted-fast".into(),
                reasoning_level: None,
                ..Default::default()
            }),
        )
        .await;
    }
    for i in 0..200 {
        let rid = format!("c{i}");
        let m = reply(&cp, &rid).await;
        assert!(
            matches!(payload(&m), Some(Payload::ThreadUpdate(u)) if u.status == ThreadStatus::Ready as i32),
            "{rid}: {m:?}"
        );
    }
}

#[tokio::test]
async fn a_thread_addressed_through_another_agent_is_refused() {
    let (cp, _r) = connected().await;
    create_agent(&cp, "a").await;
    create_agent(&cp, "b").await;
    let t = create_thread(&cp, "a", "t").await;
    send(&cp, "wrong", user_message("b", &t, "say hi", false)).await;
    let text = expect_error(&cp, "wrong").await;
    assert!(text.contains("belongs to agent a"), "{text}");
}

#[tokio::test]
async fn json_log_format_writes_one_json_object_per_line() {
    let (_cp, r) = connected_with(|opts| opts.arg("--log-format").arg("json")).await;
    test_kit::wait::until(|| r.logs().contains("control channel open"), || r.logs()).await;
    let logs = r.logs();
    let lines: Vec<&str> = logs.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty());
    for line in &lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(
            v.get("level").is_some() && v.get("timestamp").is_some(),
            "{line}"
        );
    }
}
