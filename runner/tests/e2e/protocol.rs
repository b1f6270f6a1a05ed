//! Every rule of the protocol (docs/protocol.md), request by request.

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;

use crate::support::*;

#[tokio::test]
async fn registration_advertises_scripted_models() {
    let (cp, _r) = connected().await;
    let regs = cp.registrations();
    let sdk = regs[0]
        .request
        .agent_sdks
        .iter()
        .find(|s| s.name == "scripted")
        .expect("scripted advertised");
    assert_eq!(sdk.status, AgentSdkStatus::Ready as i32);
    let fast = sdk
        .models
        .iter()
        .find(|m| m.name == "scripted-fast")
        .unwrap();
    assert_eq!(fast.reasoning, vec!["low", "high"]);
    let slow = sdk
        .models
        .iter()
        .find(|m| m.name == "scripted-slow")
        .unwrap();
    assert!(slow.reasoning.is_empty());
}

#[tokio::test]
async fn create_agent_is_idempotent_and_checks_the_sdk() {
    let (cp, _r) = connected().await;
    create_agent(&cp, "a1").await;
    create_agent(&cp, "a1").await; // same SDK again: READY, not an error
    send(
        &cp,
        "bad-sdk",
        Request::CreateAgentRequest(CreateAgentRequest {
            agent_id: "a2".into(),
            agent_sdk: "no-such-sdk".into(),
        }),
    )
    .await;
    let text = expect_error(&cp, "bad-sdk").await;
    assert!(text.contains("no-such-sdk"), "{text}");
}

#[tokio::test]
async fn create_thread_checks_agent_model_and_level() {
    let (cp, r) = connected().await;
    create_agent(&cp, "a").await;
    let t = create_thread(&cp, "a", "t1").await;
    assert!(r.workspace_root().join("a/threads").join(&t).is_dir());

    let cases = [
        (
            "unknown-agent",
            "nobody",
            "scripted-fast",
            None,
            "unknown agent",
        ),
        ("bad-model", "a", "gpt-0", None, "gpt-0"),
        ("bad-level", "a", "scripted-fast", Some("max"), "max"),
        ("no-levels", "a", "scripted-slow", Some("low"), "low"),
    ];
    for (rid, agent, model, level, needle) in cases {
        send(
            &cp,
            rid,
            Request::CreateThreadRequest(CreateThreadRequest {
                agent_id: agent.into(),
                model: model.into(),
                reasoning_level: level.map(str::to_owned),
                ..Default::default()
            }),
        )
        .await;
        let text = expect_error(&cp, rid).await;
        assert!(text.contains(needle), "{rid}: {text}");
    }
    // A valid level is accepted.
    send(
        &cp,
        "ok-level",
        Request::CreateThreadRequest(CreateThreadRequest {
            agent_id: "a".into(),
            model: "scripted-fast".into(),
            reasoning_level: Some("high".into()),
            ..Default::default()
        }),
    )
    .await;
    let m = reply(&cp, "ok-level").await;
    assert!(
        matches!(payload(&m), Some(Payload::ThreadUpdate(_))),
        "{m:?}"
    );
}

#[tokio::test]
async fn user_message_runs_a_turn_with_ordered_items() {
    let (cp, r, t) = thread_ready().await;
    let script = "say hello\nthink hmm\nrun echo out; echo err 1>&2; pwd\nusage 10 5\nwhat";
    send(&cp, "m1", user_message("a", &t, script, false)).await;
    turn_completed(&cp, "m1").await;
    let msgs = replies(&cp, "m1");
    // First the turn starts, last it completes.
    assert!(is_turn(&msgs[0], TurnStatus::Running), "{:?}", msgs[0]);
    assert!(is_turn(msgs.last().unwrap(), TurnStatus::Completed));
    let turn_id = match payload(&msgs[0]) {
        Some(Payload::TurnUpdate(u)) => u.sdk_turn_id.clone(),
        _ => unreachable!(),
    };
    let got = items(&msgs);
    let completed: Vec<_> = got
        .iter()
        .filter(|(_, s, _)| *s == ItemStatus::Completed)
        .map(|(t, _, text)| (*t, text.clone()))
        .collect();
    assert_eq!(completed[0], (ItemType::UserMessage, Some(script.into())));
    assert_eq!(completed[1], (ItemType::AgentMessage, Some("hello".into())));
    assert_eq!(completed[2], (ItemType::Reasoning, Some("hmm".into())));
    assert_eq!(completed[3].0, ItemType::CommandExecution);
    assert_eq!(
        completed[4],
        (ItemType::AgentMessage, Some("echo: what".into()))
    );
    // Each item RUNNING before COMPLETED, and every item update names thread and turn.
    for m in &msgs {
        if let Some(Payload::ItemUpdate(i)) = payload(m) {
            assert_eq!(i.thread_id, t);
            assert_eq!(i.sdk_turn_id, turn_id);
        }
    }
    // The command really ran in the thread's workspace.
    let cmd = msgs
        .iter()
        .find_map(|m| match payload(m) {
            Some(Payload::ItemUpdate(i))
                if i.status == ItemStatus::Completed as i32
                    && i.command_execution_item.is_some() =>
            {
                i.command_execution_item.clone()
            }
            _ => None,
        })
        .expect("command item");
    let ws = r
        .workspace_root()
        .join("a/threads")
        .join(&t)
        .canonicalize()
        .unwrap();
    assert_eq!(cmd.cwd, ws.to_string_lossy());
    let output = cmd.output.unwrap();
    assert!(output.contains("out") && output.contains("err"), "{output}");
    assert!(output.contains(&*ws.to_string_lossy()), "{output}");
    assert!(!cmd.process_id.is_empty());
    // Usage.
    let usage = msgs
        .iter()
        .find_map(|m| match payload(m) {
            Some(Payload::ThreadTokenUsageUpdate(u)) => Some(u.clone()),
            _ => None,
        })
        .expect("usage update");
    let last = usage.last_usage.unwrap();
    assert_eq!(
        (last.input_tokens, last.output_tokens, last.total_tokens),
        (10, 5, 15)
    );
    assert!(
        cp.invalid_received().is_empty(),
        "{:?}",
        cp.invalid_received()
    );
}

#[tokio::test]
async fn failing_turn_reports_error_then_completed() {
    let (cp, _r, t) = thread_ready().await;
    send(
        &cp,
        "m",
        user_message("a", &t, "say before\nfail it broke\nsay never", false),
    )
    .await;
    turn_completed(&cp, "m").await;
    let msgs = replies(&cp, "m");
    let n = msgs.len();
    assert_eq!(error_text(&msgs[n - 2]), Some("it broke"), "{msgs:?}");
    assert_no_item_says(&msgs, "never");
}

#[tokio::test]
async fn steering_joins_the_running_turn_and_refusal_leaves_it_alone() {
    let (cp, _r, t) = thread_ready().await;
    let started = start_turn(&cp, "m1", "a", &t, "sleep 1500\nsay original").await;
    // Not allowed to steer: an error, the turn goes on.
    send(&cp, "m2", user_message("a", &t, "say nope", false)).await;
    let text = expect_error(&cp, "m2").await;
    assert!(text.contains("allow_steer"), "{text}");
    // Allowed: same turn id, RUNNING, with the new request id.
    send(&cp, "m3", user_message("a", &t, "say steered", true)).await;
    let steer = reply(&cp, "m3").await;
    assert_eq!(
        payload(&steer),
        payload(&started),
        "the steer reply is TurnUpdate RUNNING of the same turn"
    );
    // The turn completes once; its steered items carry m3.
    turn_completed(&cp, "m3").await;
    let m3 = replies(&cp, "m3");
    let texts = texts(&m3);
    assert!(texts.contains(&"say steered".to_owned()), "{texts:?}");
    assert!(texts.contains(&"steered".to_owned()), "{texts:?}");
    assert!(texts.contains(&"original".to_owned()), "{texts:?}");
    let all = cp.received();
    let completions = all
        .iter()
        .filter(|m| is_turn(m, TurnStatus::Completed))
        .count();
    assert_eq!(completions, 1);
    assert_no_item_says(&all, "nope");
}

#[tokio::test]
async fn model_override_is_checked() {
    let (cp, _r, t) = thread_ready().await;
    let mut req = user_message("a", &t, "say hi", false);
    if let Request::CreateUserMessageRequest(r) = &mut req {
        r.model = Some("nope-model".into());
    }
    send(&cp, "bad", req).await;
    assert!(expect_error(&cp, "bad").await.contains("nope-model"));
    let mut req = user_message("a", &t, "say hi", false);
    if let Request::CreateUserMessageRequest(r) = &mut req {
        r.model = Some("scripted-slow".into());
    }
    send(&cp, "ok", req).await;
    turn_completed(&cp, "ok").await;
}

#[tokio::test]
async fn interrupt_stops_a_running_turn_and_is_idempotent() {
    let (cp, _r, t) = thread_ready().await;
    let interrupt = |rid: &str| {
        (
            rid.to_owned(),
            Request::InterruptTurnRequest(InterruptTurnRequest {
                agent_id: "a".into(),
                thread_id: t.clone(),
            }),
        )
    };
    // No turn yet: ThreadUpdate READY.
    let (rid, req) = interrupt("i0");
    send(&cp, &rid, req).await;
    let m = reply(&cp, "i0").await;
    assert!(
        matches!(payload(&m), Some(Payload::ThreadUpdate(u)) if u.status == ThreadStatus::Ready as i32),
        "{m:?}"
    );
    let running = start_turn(&cp, "m", "a", &t, "say a\nsleep 60000\nsay never").await;
    // Two interrupts back to back: the second reaches the thread while the
    // first is still stopping the turn, and is answered all the same.
    let (rid, req) = interrupt("i1");
    send(&cp, &rid, req).await;
    let (rid, req) = interrupt("i1b");
    send(&cp, &rid, req).await;
    let done = turn_completed(&cp, "i1").await;
    let (Some(Payload::TurnUpdate(a)), Some(Payload::TurnUpdate(b))) =
        (payload(&running), payload(&done))
    else {
        unreachable!()
    };
    assert_eq!(a.sdk_turn_id, b.sdk_turn_id);
    let also = turn_completed(&cp, "i1b").await;
    assert_eq!(payload(&also), payload(&done));
    // Again, with nothing running: COMPLETED for the last turn.
    let (rid, req) = interrupt("i2");
    send(&cp, &rid, req).await;
    let again = turn_completed(&cp, "i2").await;
    assert_eq!(payload(&again), payload(&done));
    assert_no_item_says(&cp.received(), "never");
}

#[tokio::test]
async fn delete_thread_and_agent_remove_workspaces_and_are_idempotent() {
    let (cp, r) = connected().await;
    create_agent(&cp, "a").await;
    let t1 = create_thread(&cp, "a", "t1").await;
    let t2 = create_thread(&cp, "a", "t2").await;
    let ws = r.workspace_root();
    start_turn(&cp, "m", "a", &t2, "sleep 60000").await;

    let del_thread = |rid: &str, thread: &str| {
        (
            rid.to_owned(),
            Request::DeleteThreadRequest(DeleteThreadRequest {
                agent_id: "a".into(),
                thread_id: thread.into(),
            }),
        )
    };
    let (rid, req) = del_thread("d1", &t1);
    send(&cp, &rid, req).await;
    let m = reply(&cp, "d1").await;
    assert!(
        matches!(payload(&m), Some(Payload::ThreadUpdate(u)) if u.status == ThreadStatus::Deleted as i32 && u.thread_id == t1)
    );
    assert!(!ws.join("a/threads").join(&t1).exists());
    let (rid, req) = del_thread("d2", &t1);
    send(&cp, &rid, req).await;
    let m = reply(&cp, "d2").await;
    assert!(
        matches!(payload(&m), Some(Payload::ThreadUpdate(u)) if u.status == ThreadStatus::Deleted as i32)
    );
    // Messages to a deleted thread are errors.
    send(&cp, "late", user_message("a", &t1, "say x", false)).await;
    assert!(expect_error(&cp, "late").await.contains("unknown thread"));

    // Deleting the agent interrupts t2's turn, deletes it, then the agent.
    send(
        &cp,
        "da",
        Request::DeleteAgentRequest(DeleteAgentRequest {
            agent_id: "a".into(),
        }),
    )
    .await;
    cp.wait_for(
        |m| rid_is(m, "da") && matches!(payload(m), Some(Payload::AgentUpdate(u)) if u.status == AgentStatus::Deleted as i32),
        WAIT,
    )
    .await
    .unwrap();
    let da = replies(&cp, "da");
    let kinds: Vec<_> = da
        .iter()
        .map(|m| match payload(m) {
            Some(Payload::TurnUpdate(_)) => "turn",
            Some(Payload::ThreadUpdate(_)) => "thread",
            Some(Payload::AgentUpdate(_)) => "agent",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, vec!["turn", "thread", "agent"], "{da:?}");
    assert!(!ws.join("a").exists());
    // Unknown agent: DELETED too.
    send(
        &cp,
        "da2",
        Request::DeleteAgentRequest(DeleteAgentRequest {
            agent_id: "ghost".into(),
        }),
    )
    .await;
    let m = reply(&cp, "da2").await;
    assert!(
        matches!(payload(&m), Some(Payload::AgentUpdate(u)) if u.status == AgentStatus::Deleted as i32)
    );
}

#[tokio::test]
async fn invalid_and_unknown_requests_get_errors_naming_fields() {
    let (cp, _r) = connected().await;
    // buf.validate violation.
    send(
        &cp,
        "v1",
        Request::CreateAgentRequest(CreateAgentRequest {
            agent_id: String::new(),
            agent_sdk: String::new(),
        }),
    )
    .await;
    let text = expect_error(&cp, "v1").await;
    assert!(text.contains("create_agent_request.agent_id"), "{text}");
    assert!(text.contains("create_agent_request.agent_sdk"), "{text}");
    // No request at all.
    cp.send(ServerMessage {
        request_id: "v2".into(),
        request: None,
        acked_sequence: 0,
    })
    .await
    .unwrap();
    assert!(expect_error(&cp, "v2").await.contains("request"));
    // Path-traversal and odd ids.
    for (i, bad) in ["../x", "/etc", "..", "a/b", &"x".repeat(200)]
        .iter()
        .enumerate()
    {
        let rid = format!("p{i}");
        send(
            &cp,
            &rid,
            Request::CreateAgentRequest(CreateAgentRequest {
                agent_id: (*bad).into(),
                agent_sdk: "scripted".into(),
            }),
        )
        .await;
        let text = expect_error(&cp, &rid).await;
        assert!(text.contains("create_agent_request.agent_id"), "{text}");
    }
    send(
        &cp,
        "p-thread",
        user_message("a", "../../etc", "say x", false),
    )
    .await;
    assert!(
        expect_error(&cp, "p-thread")
            .await
            .contains("create_user_message_request.thread_id")
    );
    // Unknown thread.
    send(&cp, "u1", user_message("a", "thr-nope", "say x", false)).await;
    assert!(expect_error(&cp, "u1").await.contains("unknown thread"));
    // Skill installs need a known agent.
    send(
        &cp,
        "s1",
        Request::InstallSkillsMpRequest(InstallSkillsMpRequest {
            agent_id: "a".into(),
            package_name: "owner/repo".into(),
        }),
    )
    .await;
    assert!(expect_error(&cp, "s1").await.contains("unknown agent"));
    // The channel is still open and working.
    send(&cp, "hb", Request::HeartbeatRequest(HeartbeatRequest {})).await;
    let m = reply(&cp, "hb").await;
    assert!(matches!(payload(&m), Some(Payload::HeartbeatResponse(_))));
    assert_eq!(cp.registrations().len(), 1, "no reconnect happened");
}

#[tokio::test]
async fn heartbeat_is_answered_while_a_request_is_slow() {
    let (cp, _r, t) = thread_ready().await;
    send(&cp, "slow", user_message("a", &t, "run sleep 3", false)).await;
    cp.wait_for(
        |m| rid_is(m, "slow") && is_turn(m, TurnStatus::Running),
        WAIT,
    )
    .await
    .unwrap();
    send(&cp, "hb", Request::HeartbeatRequest(HeartbeatRequest {})).await;
    reply(&cp, "hb").await;
    // Ordering, not timing: the heartbeat answer came before the slow turn ended.
    let all = cp.received();
    let hb = all.iter().position(|m| rid_is(m, "hb")).unwrap();
    let done = all
        .iter()
        .position(|m| rid_is(m, "slow") && is_turn(m, TurnStatus::Completed));
    assert!(done.is_none() || done.unwrap() > hb);
    turn_completed(&cp, "slow").await;
}

#[tokio::test]
async fn request_without_id_gets_replies_without_id() {
    let (cp, _r) = connected().await;
    let before = cp.received_count();
    send(&cp, "", Request::HeartbeatRequest(HeartbeatRequest {})).await;
    let (_, m) = cp
        .wait_for_after(
            before,
            |m| matches!(payload(m), Some(Payload::HeartbeatResponse(_))),
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(m.request_id, None);
}

/// The protocol has no exit status: a command that failed, was killed or
/// was interrupted ends its output with a marker saying so; one that
/// exited 0 has none (docs/protocol.md, "How a command ended").
#[tokio::test]
async fn command_outputs_say_how_the_command_ended() {
    let (cp, _r, t) = thread_ready().await;
    start_turn(
        &cp,
        "m",
        "a",
        &t,
        "run echo fine\nrun echo before; exit 3\nrun printf partial; kill -9 $$",
    )
    .await;
    turn_completed(&cp, "m").await;
    assert_eq!(
        command_outputs(&replies(&cp, "m")),
        [
            "fine\n",
            "before\n[exit status 3]",
            "partial\n[killed by signal 9]"
        ]
    );
}
