//! Replicas: two runner processes, each with its own secret and state
//! directory (as the StatefulSet's pods `agent-runner-0` and
//! `agent-runner-1` are), against one control plane that knows a runner by
//! its secret. Both register, both serve a turn at the same time, and
//! neither takes the other's place: each keeps its one stream, gets only
//! the requests sent to it, and numbers its messages on its own without
//! the control plane taking one replica's numbers for the other's
//! duplicates.

use std::path::PathBuf;

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use mock_control_plane::{MockConfig, MockControlPlane, RunnerView, TimelineEvent};

use crate::support::*;

/// The replicas: pod name (the mock's name for the runner) and secret.
const REPLICAS: [(&str, &str); 2] = [
    ("agent-runner-0", "secret-of-replica-0"),
    ("agent-runner-1", "secret-of-replica-1"),
];

/// Writes `secret` into a file in `dirs` (the pod's mounted Secret key);
/// its path.
fn secret_file(dirs: &RunnerDirs, secret: &str) -> PathBuf {
    let path = dirs.path().join("bearer-secret");
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    path
}

/// Starts one replica: its own state and workspaces, its own secret.
fn start_replica(cp: &MockControlPlane, secret: &str) -> RunnerProc {
    let dirs = RunnerDirs::new();
    let file = secret_file(&dirs, secret);
    RunnerProc::start_in(
        RunnerOpts::new(cp.url())
            .arg("--secret-file")
            .arg(file.to_str().unwrap()),
        dirs,
    )
}

/// The first message of `runner` answering `rid`.
async fn reply_of(runner: &RunnerView<'_>, rid: &str) -> ClientMessage {
    let rid = rid.to_owned();
    runner
        .wait_for(move |m| rid_is(m, &rid), WAIT)
        .await
        .expect("a reply")
}

/// Creates agent `a` and a thread on `runner`; the thread's id.
async fn agent_and_thread(runner: &RunnerView<'_>) -> String {
    runner
        .send_request(
            "ca",
            Request::CreateAgentRequest(CreateAgentRequest {
                agent_id: "a".into(),
                agent_sdk: "scripted".into(),
            }),
        )
        .await
        .expect("sent");
    let m = reply_of(runner, "ca").await;
    assert!(
        matches!(payload(&m), Some(Payload::AgentUpdate(u)) if u.status == AgentStatus::Ready as i32),
        "{m:?}"
    );
    runner
        .send_request(
            "ct",
            Request::CreateThreadRequest(CreateThreadRequest {
                agent_id: "a".into(),
                model: "scripted-fast".into(),
                ..Default::default()
            }),
        )
        .await
        .expect("sent");
    match payload(&reply_of(runner, "ct").await) {
        Some(Payload::ThreadUpdate(u)) if u.status == ThreadStatus::Ready as i32 => {
            u.thread_id.clone()
        }
        other => panic!("expected ThreadUpdate READY, got {other:?}"),
    }
}

/// The position in the mock's whole log of `runner`'s first TurnUpdate
/// with `status` for request `rid`.
fn turn_index(cp: &MockControlPlane, runner: &str, rid: &str, status: TurnStatus) -> usize {
    cp.received_by_runner()
        .iter()
        .position(|(who, m)| who == runner && rid_is(m, rid) && is_turn(m, status))
        .unwrap_or_else(|| panic!("no {status:?} turn of {runner} for {rid}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_serve_side_by_side_without_displacing_each_other() {
    let config = REPLICAS
        .iter()
        .fold(MockConfig::default(), |c, (name, secret)| {
            c.with_runner(*name, *secret)
        });
    let cp = MockControlPlane::start(config).await.unwrap();
    let procs: Vec<RunnerProc> = REPLICAS
        .iter()
        .map(|(_, secret)| start_replica(&cp, secret))
        .collect();
    let views: Vec<RunnerView<'_>> = REPLICAS
        .iter()
        .map(|(name, _)| cp.runner(name).unwrap())
        .collect();
    for (view, proc) in views.iter().zip(&procs) {
        if let Err(e) = view.wait_connected(WAIT).await {
            panic!("{e:#}\n{}", proc.logs());
        }
    }

    // The same agent and thread names on both: two runners, two worlds.
    let mut threads = Vec::new();
    for view in &views {
        threads.push(agent_and_thread(view).await);
    }

    // A turn on each at once: each sleeps long enough for the other's to
    // start before it completes.
    let script = sleep_then_says(1500, 1);
    for (view, thread) in views.iter().zip(&threads) {
        view.send_request("turn", user_message("a", thread, &script, false))
            .await
            .unwrap();
    }
    for (view, proc) in views.iter().zip(&procs) {
        let done = view
            .wait_for(
                |m| rid_is(m, "turn") && is_turn(m, TurnStatus::Completed),
                WAIT,
            )
            .await;
        if let Err(e) = done {
            panic!("{e:#}\n{}", proc.logs());
        }
        let msgs: Vec<ClientMessage> = view
            .received()
            .into_iter()
            .filter(|m| rid_is(m, "turn"))
            .collect();
        assert_eq!(said(&msgs), ["s0"], "{msgs:#?}");
    }
    let (name0, name1) = (REPLICAS[0].0, REPLICAS[1].0);
    let running = |runner| turn_index(&cp, runner, "turn", TurnStatus::Running);
    let completed = |runner| turn_index(&cp, runner, "turn", TurnStatus::Completed);
    assert!(
        running(name0) < completed(name1) && running(name1) < completed(name0),
        "the two turns ran at the same time"
    );

    // Neither displaced the other: one registration and one stream each,
    // never a disconnection, both still live.
    for view in &views {
        assert!(view.is_connected(), "{view:?}");
        assert_eq!(view.connection_count(), 1, "{view:?}");
        assert_eq!(view.registrations().len(), 1, "{view:?}");
        let report = view.sequence_report();
        assert_eq!(report.duplicates, 0, "{view:?}: {report:?}");
        assert!(report.gaps.is_empty(), "{view:?}: {report:?}");
    }
    assert!(
        !cp.timeline()
            .iter()
            .any(|e| matches!(e, TimelineEvent::Disconnected { .. })),
        "no stream ended"
    );
    assert!(cp.dropped().is_empty(), "{:?}", cp.dropped());
    assert!(cp.invalid_received().is_empty());
    for reg in cp.registrations() {
        let (name, secret) = REPLICAS
            .iter()
            .find(|(name, _)| *name == reg.runner)
            .unwrap();
        assert_eq!(
            reg.metadata.get("authorization").map(String::as_str),
            Some(format!("Bearer {secret}").as_str()),
            "{name} registered with its own secret"
        );
    }
    // Each replica got its own three requests and answered each once.
    for view in &views {
        assert_eq!(view.sent().len(), 3, "{view:?}: ca, ct, turn");
        let received = view.received();
        let agents = received
            .iter()
            .filter(|m| rid_is(m, "ca") && matches!(payload(m), Some(Payload::AgentUpdate(_))))
            .count();
        let threads = received
            .iter()
            .filter(|m| rid_is(m, "ct") && matches!(payload(m), Some(Payload::ThreadUpdate(_))))
            .count();
        assert_eq!((agents, threads), (1, 1), "{view:?}");
    }
}
