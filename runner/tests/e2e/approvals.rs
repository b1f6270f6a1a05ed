//! `approvals/1` through the real binary: the scripted agent's `approve`
//! and `ask` steps reach a control plane that accepted the extension as
//! `ApprovalRequest`s carrying the turn's request id, and its decisions
//! come back (approve: the command ran; deny: it did not, and the agent
//! was told why; approve for the thread; cancel the turn), or the request
//! times out or ends with its turn, each ending with one
//! `ApprovalResolved`; a decision for an id that is unknown or already
//! resolved is refused naming it. A control plane that did not accept the
//! extension sees none of this: the operator's policy decides. The
//! thread's transcript records both messages, and the mock's approvals
//! scenario (its `decide` steps) passes.

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use mock_control_plane::MockControlPlane;
use mock_control_plane::approvals::Answer;

use crate::support::*;

/// A mock that accepts `approvals/1`, a runner (with `args`) connected to
/// it, agent `a` and a thread; the thread's id.
async fn deciding(args: &[&str]) -> (MockControlPlane, RunnerProc, String) {
    let cp = mock().await;
    cp.accept_approvals(true);
    let mut opts = RunnerOpts::new(cp.url());
    for a in args {
        opts = opts.arg(a);
    }
    let r = RunnerProc::start(opts);
    cp.wait_connected(WAIT).await.expect("runner connects");
    create_agent(&cp, "a").await;
    let thread = create_thread(&cp, "a", "t").await;
    (cp, r, thread)
}

/// The `ApprovalRequest` of the turn started by `rid`.
async fn request_of(cp: &MockControlPlane, rid: &str) -> ApprovalRequest {
    let r = rid.to_owned();
    let m = cp
        .wait_for(
            move |m| rid_is(m, &r) && matches!(payload(m), Some(Payload::ApprovalRequest(_))),
            WAIT,
        )
        .await
        .expect("an approval request");
    match m.payload {
        Some(Payload::ApprovalRequest(a)) => a,
        _ => unreachable!(),
    }
}

/// The `ApprovalResolved` of `approval_id`, with its request id.
async fn resolved(cp: &MockControlPlane, approval_id: &str) -> (Option<String>, ApprovalResolved) {
    let id = approval_id.to_owned();
    let m = cp
        .wait_for(
            move |m| matches!(payload(m), Some(Payload::ApprovalResolved(r)) if r.approval_id == id),
            WAIT,
        )
        .await
        .expect("the request is resolved");
    match m.payload {
        Some(Payload::ApprovalResolved(r)) => (m.request_id, r),
        _ => unreachable!(),
    }
}

fn decision(approval_id: &str, outcome: ApprovalOutcome, message: Option<&str>) -> Request {
    Request::ApprovalDecision(ApprovalDecision {
        approval_id: approval_id.to_owned(),
        outcome: outcome.into(),
        answer: None,
        message: message.map(str::to_owned),
    })
}

fn approval_messages(cp: &MockControlPlane) -> usize {
    cp.received()
        .iter()
        .filter(|m| {
            matches!(
                payload(m),
                Some(Payload::ApprovalRequest(_) | Payload::ApprovalResolved(_))
            )
        })
        .count()
}

/// Approved: the request says what and where, the command runs only
/// after the decision, and the resolution carries the decision's request
/// id. A second decision for the same id, and one for an unknown id, are
/// refused naming the id.
#[tokio::test]
async fn an_approved_command_runs_and_a_second_decision_is_refused() {
    let (cp, r, thread) = deciding(&[]).await;
    let script = "approve touch approved.txt\nsay done";
    send(&cp, "m1", user_message("a", &thread, script, false)).await;
    let asked = request_of(&cp, "m1").await;
    assert_eq!(asked.thread_id, thread);
    assert_eq!(asked.kind, ApprovalKind::CommandExecution as i32);
    assert_eq!(asked.command.as_deref(), Some("touch approved.txt"));
    let workspace = r.thread_workspace("a", &thread);
    assert_eq!(
        asked.cwd.as_deref(),
        Some(workspace.to_string_lossy().as_ref())
    );
    assert!(asked.title.contains("touch approved.txt"), "{asked:?}");
    assert!(asked.expires_unix_ms > 0);
    assert!(!asked.sdk_turn_id.is_empty() && asked.approval_id.starts_with("apr-"));
    assert!(
        !workspace.join("approved.txt").exists(),
        "nothing runs before the decision"
    );
    send(
        &cp,
        "d1",
        decision(&asked.approval_id, ApprovalOutcome::Approve, None),
    )
    .await;
    let (rid, end) = resolved(&cp, &asked.approval_id).await;
    assert_eq!(rid.as_deref(), Some("d1"));
    assert_eq!(end.outcome, ApprovalOutcome::Approve as i32);
    assert_eq!(end.resolved_by, ApprovalResolver::ControlPlane as i32);
    assert_eq!(end.thread_id, thread);
    turn_completed(&cp, "m1").await;
    assert!(workspace.join("approved.txt").exists(), "the command ran");
    assert_eq!(said(&replies(&cp, "m1")), ["done"]);

    send(
        &cp,
        "d2",
        decision(&asked.approval_id, ApprovalOutcome::Deny, None),
    )
    .await;
    let text = expect_error(&cp, "d2").await;
    assert!(
        text.contains(&asked.approval_id) && text.contains("already resolved"),
        "{text}"
    );
    send(
        &cp,
        "d3",
        decision("apr-nobody-asked", ApprovalOutcome::Approve, None),
    )
    .await;
    let text = expect_error(&cp, "d3").await;
    assert!(text.contains("unknown approval apr-nobody-asked"), "{text}");
    assert!(
        cp.invalid_received().is_empty(),
        "{:?}",
        cp.invalid_received()
    );
}

/// Denied: the command never runs; its item says `[denied]` and the
/// person's message.
#[tokio::test]
async fn a_denied_command_does_not_run_and_the_agent_hears_why() {
    let (cp, r, thread) = deciding(&[]).await;
    send(
        &cp,
        "m1",
        user_message("a", &thread, "approve touch denied.txt", false),
    )
    .await;
    let asked = request_of(&cp, "m1").await;
    send(
        &cp,
        "d1",
        decision(&asked.approval_id, ApprovalOutcome::Deny, Some("not today")),
    )
    .await;
    let (_, end) = resolved(&cp, &asked.approval_id).await;
    assert_eq!(end.outcome, ApprovalOutcome::Deny as i32);
    turn_completed(&cp, "m1").await;
    assert_eq!(command_outputs(&replies(&cp, "m1")), ["[denied] not today"]);
    let workspace = r.thread_workspace("a", &thread);
    assert!(!workspace.join("denied.txt").exists(), "the command ran");
    // The thread's transcript records both messages, with the turn's and
    // the decision's request ids.
    let kinds = transcript_kinds(&r, &thread, 2).await;
    assert!(
        kinds.contains(&("approval_request".into(), Some("m1".into())))
            && kinds.contains(&("approval_resolved".into(), Some("d1".into()))),
        "{kinds:?}"
    );
}

/// The (kind, request id) of every line of `thread`'s transcript, once it
/// holds at least `approvals` approval lines.
async fn transcript_kinds(
    r: &RunnerProc,
    thread: &str,
    approvals: usize,
) -> Vec<(String, Option<String>)> {
    let file = r
        .dirs
        .path()
        .join("state/transcripts")
        .join(format!("{thread}.jsonl"));
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let kinds: Vec<(String, Option<String>)> = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|v| {
                let text = |k: &str| v[k].as_str().map(str::to_owned);
                (text("kind").unwrap_or_default(), text("request_id"))
            })
            .collect();
        let seen = kinds
            .iter()
            .filter(|(k, _)| k.starts_with("approval_"))
            .count();
        if seen >= approvals || tokio::time::Instant::now() > deadline {
            return kinds;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The mock's YAML scenario of approvals (its `decide` steps approve,
/// answer and deny the scripted agent's requests) passes against the real
/// runner.
#[tokio::test]
async fn the_approvals_scenario_passes_against_the_real_runner() {
    let yaml = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../mock-control-plane/scenarios/approvals.yaml"
    ))
    .unwrap();
    let parsed = mock_control_plane::scenario::parse(&yaml).unwrap();
    let cp = mock().await;
    parsed.apply(&cp);
    let r = RunnerProc::start(RunnerOpts::new(cp.url()));
    let mut out = Vec::new();
    let result =
        mock_control_plane::scenario::run(&cp, &parsed, Default::default(), &mut out).await;
    let progress = String::from_utf8_lossy(&out);
    result.unwrap_or_else(|e| panic!("{e:#}\n{progress}\n{}", r.logs()));
    let thread = cp
        .received()
        .iter()
        .find_map(|m| match payload(m) {
            Some(Payload::ThreadUpdate(u)) => Some(u.thread_id.clone()),
            _ => None,
        })
        .unwrap();
    let workspace = r.thread_workspace("agent-approvals", &thread);
    assert!(workspace.join("approved.txt").exists(), "{progress}");
    assert!(!workspace.join("denied.txt").exists(), "{progress}");
}

/// No decision within `--approval-timeout`: denied, resolved by timeout.
#[tokio::test]
async fn an_unanswered_request_times_out_denied() {
    let (cp, r, thread) = deciding(&["--approval-timeout", "300ms"]).await;
    send(
        &cp,
        "m1",
        user_message("a", &thread, "approve touch late.txt", false),
    )
    .await;
    let asked = request_of(&cp, "m1").await;
    let (rid, end) = resolved(&cp, &asked.approval_id).await;
    assert_eq!(rid.as_deref(), Some("m1"), "the turn's request id");
    assert_eq!(end.resolved_by, ApprovalResolver::Timeout as i32);
    assert_eq!(end.outcome, ApprovalOutcome::Deny as i32);
    turn_completed(&cp, "m1").await;
    let outputs = command_outputs(&replies(&cp, "m1"));
    assert!(outputs[0].starts_with("[denied]"), "{outputs:?}");
    assert!(!r.thread_workspace("a", &thread).join("late.txt").exists());
}

/// An interrupt while the agent waits ends the request with the turn.
#[tokio::test]
async fn an_interrupt_while_waiting_resolves_the_request_as_turn_ended() {
    let (cp, r, thread) = deciding(&[]).await;
    send(
        &cp,
        "m1",
        user_message("a", &thread, "approve touch never.txt\nsay after", false),
    )
    .await;
    let asked = request_of(&cp, "m1").await;
    send(
        &cp,
        "i1",
        Request::InterruptTurnRequest(InterruptTurnRequest {
            agent_id: "a".into(),
            thread_id: thread.clone(),
        }),
    )
    .await;
    let (_, end) = resolved(&cp, &asked.approval_id).await;
    assert_eq!(end.resolved_by, ApprovalResolver::TurnEnded as i32);
    assert_eq!(end.outcome, ApprovalOutcome::Deny as i32);
    turn_completed(&cp, "i1").await;
    assert!(!r.thread_workspace("a", &thread).join("never.txt").exists());
    // A decision that comes too late is refused.
    send(
        &cp,
        "d1",
        decision(&asked.approval_id, ApprovalOutcome::Approve, None),
    )
    .await;
    let text = expect_error(&cp, "d1").await;
    assert!(text.contains("already resolved"), "{text}");
}

/// `ask`: a question; the answer becomes the agent's message.
#[tokio::test]
async fn a_question_is_answered() {
    let (cp, _r, thread) = deciding(&[]).await;
    send(
        &cp,
        "m1",
        user_message("a", &thread, "ask Which branch?", false),
    )
    .await;
    let asked = request_of(&cp, "m1").await;
    assert_eq!(asked.kind, ApprovalKind::Question as i32);
    assert_eq!(asked.title, "Which branch?");
    send(
        &cp,
        "d1",
        Request::ApprovalDecision(ApprovalDecision {
            approval_id: asked.approval_id.clone(),
            outcome: ApprovalOutcome::Approve.into(),
            answer: Some("main".into()),
            message: None,
        }),
    )
    .await;
    turn_completed(&cp, "m1").await;
    assert_eq!(said(&replies(&cp, "m1")), ["main"]);
    resolved(&cp, &asked.approval_id).await;
}

/// Approved for the thread: the same command later in the thread runs
/// without asking; another command asks again. Cancel the turn: denied,
/// and the rest of the turn does not run. The mock's auto-answer rule
/// decides.
#[tokio::test]
async fn approve_for_thread_is_remembered_and_cancel_turn_interrupts() {
    let (cp, r, thread) = deciding(&[]).await;
    let _answering = cp.answer_approvals(|a| match a.command.as_deref() {
        Some("echo again >> log.txt") => Some(Answer::of(ApprovalOutcome::ApproveForThread)),
        _ => Some(Answer::of(ApprovalOutcome::CancelTurn)),
    });
    let script = "approve echo again >> log.txt\napprove echo again >> log.txt";
    send(&cp, "m1", user_message("a", &thread, script, false)).await;
    turn_completed(&cp, "m1").await;
    let workspace = r.thread_workspace("a", &thread);
    let log = std::fs::read_to_string(workspace.join("log.txt")).unwrap();
    assert_eq!(log, "again\nagain\n");
    assert_eq!(approval_messages(&cp), 2, "asked once, resolved once");

    send(
        &cp,
        "m2",
        user_message(
            "a",
            &thread,
            "approve echo again >> log.txt\napprove touch other.txt\nsay not reached",
            false,
        ),
    )
    .await;
    // Cancelled: the turn's end answers the decision, as an interrupt's does.
    cp.wait_for_count(|m| is_turn(m, TurnStatus::Completed), 2, WAIT)
        .await
        .expect("the cancelled turn ends");
    assert!(!workspace.join("other.txt").exists());
    let m2 = replies(&cp, "m2");
    assert!(said(&m2).is_empty(), "{m2:#?}");
    let ends: Vec<ApprovalResolved> = cp
        .received()
        .into_iter()
        .filter_map(|m| match m.payload {
            Some(Payload::ApprovalResolved(r)) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert_eq!(ends[1].outcome, ApprovalOutcome::CancelTurn as i32);
}

/// A control plane that did not accept the extension sees no approval
/// message: the operator's policy decides (deny by default; `approve`
/// when the operator says so).
#[tokio::test]
async fn without_the_extension_the_policy_decides() {
    let (cp, r, thread) = thread_ready().await;
    let regs = cp.registrations();
    assert!(
        regs.iter()
            .all(|g| g.request.features.iter().any(|f| f == "approvals/1")),
        "every registration offers approvals/1"
    );
    let script = "approve touch denied.txt\nask Anyone?";
    send(&cp, "m1", user_message("a", &thread, script, false)).await;
    turn_completed(&cp, "m1").await;
    let m1 = replies(&cp, "m1");
    let outputs = command_outputs(&m1);
    assert!(outputs[0].starts_with("[denied]"), "{outputs:?}");
    assert_eq!(said(&m1), ["(no answer)"]);
    assert!(!r.thread_workspace("a", &thread).join("denied.txt").exists());
    assert_eq!(approval_messages(&cp), 0);
    drop(r);

    let (cp, r) = agent_with(|o| o.arg("--approval-policy").arg("approve")).await;
    let thread = create_thread(&cp, "a", "t").await;
    send(
        &cp,
        "m1",
        user_message("a", &thread, "approve touch allowed.txt", false),
    )
    .await;
    turn_completed(&cp, "m1").await;
    assert!(
        r.thread_workspace("a", &thread)
            .join("allowed.txt")
            .exists()
    );
    assert_eq!(approval_messages(&cp), 0);
}

/// A runner killed while its turn waits: after the restart the turn is
/// reported ended and its request resolved `TURN_ENDED`.
#[tokio::test]
async fn a_restart_ends_the_waiting_turn_and_its_request() {
    let (cp, mut r, thread) = deciding(&[]).await;
    send(
        &cp,
        "m1",
        user_message("a", &thread, "approve touch lost.txt", false),
    )
    .await;
    let asked = request_of(&cp, "m1").await;
    r.signal(libc::SIGKILL);
    r.wait_exit(WAIT).await;
    let _r2 = r.start_again();
    let (rid, end) = resolved(&cp, &asked.approval_id).await;
    assert_eq!(rid.as_deref(), Some("m1"));
    assert_eq!(end.resolved_by, ApprovalResolver::TurnEnded as i32);
    assert_eq!(end.outcome, ApprovalOutcome::Deny as i32);
    turn_completed(&cp, "m1").await;
    assert!(!r.thread_workspace("a", &thread).join("lost.txt").exists());
}

/// Without acknowledged delivery, a request still waiting is sent again
/// on every new connection; the decision then applies once.
#[tokio::test]
async fn a_waiting_request_is_sent_again_after_a_reconnect() {
    let cp = MockControlPlane::start(mock_control_plane::MockConfig {
        ack_mode: mock_control_plane::AckMode::Refuse,
        ..Default::default()
    })
    .await
    .unwrap();
    cp.accept_approvals(true);
    let r = RunnerProc::start(RunnerOpts::new(cp.url()));
    cp.wait_connected(WAIT).await.unwrap();
    create_agent(&cp, "a").await;
    let thread = create_thread(&cp, "a", "t").await;
    send(
        &cp,
        "m1",
        user_message("a", &thread, "approve touch again.txt", false),
    )
    .await;
    let asked = request_of(&cp, "m1").await;
    assert!(cp.drop_stream());
    cp.wait_for_connections(2, WAIT).await.unwrap();
    let id = asked.approval_id.clone();
    cp.wait_for_count(
        move |m| matches!(payload(m), Some(Payload::ApprovalRequest(a)) if a.approval_id == id),
        2,
        WAIT,
    )
    .await
    .expect("sent again");
    send(
        &cp,
        "d1",
        decision(&asked.approval_id, ApprovalOutcome::Approve, None),
    )
    .await;
    turn_completed(&cp, "m1").await;
    assert!(r.thread_workspace("a", &thread).join("again.txt").exists());
}

/// Operators see a waiting request (`threads`, `ps`) with its age, and the
/// metrics count how requests ended.
#[tokio::test]
async fn operators_see_waiting_requests_and_their_outcomes() {
    let (cp, r, thread) = deciding(&["--health-addr", "127.0.0.1:0"]).await;
    let addr = crate::health::health_addr(&r).await;
    send(&cp, "m1", user_message("a", &thread, "ask Proceed?", false)).await;
    let asked = request_of(&cp, "m1").await;
    crate::health::wait_metric_is(&addr, "agent_runner_approvals_waiting", 1.0).await;
    let (ok, text) = crate::admin::admin(&r, &["threads"]).await;
    assert!(ok, "{text}");
    let shown = format!("awaiting approval {} (question,", asked.approval_id);
    assert!(text.contains(&shown), "{text}");
    let (ok, text) = crate::admin::admin(&r, &["ps", "--json"]).await;
    assert!(ok, "{text}");
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    let entry = &v["threads"][0]["approvals"][0];
    assert_eq!(entry["approval_id"], asked.approval_id.as_str(), "{v:#}");
    assert!(entry["waiting_for_ms"].as_u64().is_some(), "{v:#}");
    send(
        &cp,
        "d1",
        decision(&asked.approval_id, ApprovalOutcome::Deny, None),
    )
    .await;
    turn_completed(&cp, "m1").await;
    crate::health::wait_metric_is(&addr, "agent_runner_approvals_waiting", 0.0).await;
    crate::health::wait_metric_is(
        &addr,
        "agent_runner_approvals_total{kind=\"question\",resolver=\"control_plane\",outcome=\"deny\"}",
        1.0,
    )
    .await;
}

/// codex (the fake app-server, approval policy `untrusted`): its command
/// approval request reaches the control plane with the command, cwd and
/// reason; an approval lets it run, a denial declines it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_asks_the_control_plane_before_it_runs_a_command() {
    let state = tempfile::tempdir().unwrap();
    let cp = mock().await;
    cp.accept_approvals(true);
    let opts = RunnerOpts::new(cp.url())
        .arg("--codex-approval-policy")
        .arg("untrusted");
    let r = RunnerProc::start(crate::fakes::with_fake_codex(opts, state.path()));
    cp.wait_connected(WAIT).await.expect("runner connects");
    sdk_probed(&cp, "codex").await;
    create_sdk_agent(&cp, "a", "codex").await;
    let thread = try_create_thread(&cp, "a", "t", "fake-fast", WAIT)
        .await
        .expect("a codex thread");
    let _answering = cp.answer_approvals(|a| {
        Some(match a.command.as_deref() {
            Some("make ok") => Answer::approve(),
            _ => Answer::deny("no"),
        })
    });
    send(
        &cp,
        "m1",
        user_message("a", &thread, "approve make ok\napprove rm -rf /", false),
    )
    .await;
    turn_completed(&cp, "m1").await;
    let m1 = replies(&cp, "m1");
    assert_eq!(
        said(&m1),
        ["approval: accept", "approval: decline"],
        "{}",
        r.logs()
    );
    let asked: Vec<ApprovalRequest> = m1
        .iter()
        .filter_map(|m| match &m.payload {
            Some(Payload::ApprovalRequest(a)) => Some(a.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert_eq!(asked[0].kind, ApprovalKind::CommandExecution as i32);
    assert_eq!(asked[0].cwd.as_deref(), Some("/fake/cwd"));
    assert_eq!(asked[0].reason.as_deref(), Some("wants to write"));
    assert_eq!(asked[0].sdk_item_id.as_deref(), Some("call_approval"));
    let outcomes: Vec<i32> = cp
        .received()
        .iter()
        .filter_map(|m| match &m.payload {
            Some(Payload::ApprovalResolved(r)) => Some(r.outcome),
            _ => None,
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ApprovalOutcome::Approve as i32,
            ApprovalOutcome::Deny as i32
        ]
    );
}

/// The same round trip in protocol 0.7: the mock serves 0.7 (its service
/// built from the 0.7 definitions, every message checked by 0.7's rules),
/// accepts `approvals/1` and decides by a rule; the scripted `approve` and
/// `ask` steps ask at the same field numbers and get their decisions.
#[tokio::test]
async fn approvals_work_in_protocol_07() {
    use agent_runner_proto::runner_v07 as v07;
    let cp = MockControlPlane::start(mock_control_plane::MockConfig {
        protocol: mock_control_plane::Protocol::V07,
        ..Default::default()
    })
    .await
    .expect("mock starts");
    cp.accept_approvals(true);
    let _answering = cp.answer_approvals(|a| match a.kind {
        k if k == ApprovalKind::Question as i32 => Some(Answer::text("forty-two")),
        _ if a.command.as_deref() == Some("touch no.txt") => Some(Answer::deny("not that one")),
        _ => Some(Answer::approve()),
    });
    let _r = RunnerProc::start(RunnerOpts::new(cp.url()).arg("--protocol").arg("0.7"));
    cp.wait_connected(WAIT).await.expect("runner connects");
    cp.send(v07::ServerMessage {
        request_id: "ct".into(),
        request: Some(v07::server_message::Request::CreateThreadRequest(
            v07::CreateThreadRequest {
                thread_id: "t07".into(),
                model: "scripted-fast".into(),
                cli_secret: "approvals-07-secret".into(),
                ..Default::default()
            },
        )),
        acked_sequence: 0,
    })
    .await
    .expect("sends");
    cp.wait_for(|m| rid_is(m, "ct"), WAIT)
        .await
        .expect("thread ready");
    let script = "approve touch yes.txt\napprove touch no.txt\nask what is the answer?";
    cp.send(v07::ServerMessage {
        request_id: "m1".into(),
        request: Some(v07::server_message::Request::CreateUserMessageRequest(
            v07::CreateUserMessageRequest {
                thread_id: "t07".into(),
                text: script.into(),
                ..Default::default()
            },
        )),
        acked_sequence: 0,
    })
    .await
    .expect("sends");
    turn_completed(&cp, "m1").await;
    let msgs = replies(&cp, "m1");
    let outputs: Vec<String> = msgs
        .iter()
        .filter_map(|m| match payload(m) {
            Some(Payload::ItemUpdate(i)) if i.status == ItemStatus::Completed as i32 => i
                .command_execution_item
                .as_ref()
                .map(|c| format!("{} => {}", c.command, c.output.clone().unwrap_or_default())),
            _ => None,
        })
        .collect();
    assert!(
        outputs
            .iter()
            .any(|o| o.starts_with("touch no.txt => [denied] not that one")),
        "{outputs:?}"
    );
    assert!(said(&msgs).iter().any(|s| s == "forty-two"), "{msgs:#?}");
    let resolved: Vec<i32> = cp
        .received()
        .iter()
        .filter_map(|m| match payload(m) {
            Some(Payload::ApprovalResolved(r)) => Some(r.outcome),
            _ => None,
        })
        .collect();
    assert_eq!(
        resolved.len(),
        3,
        "one resolution per request: {resolved:?}"
    );
    assert!(resolved.contains(&(ApprovalOutcome::Deny as i32)));
    assert_eq!(cp.invalid_received(), [], "valid by 0.7's rules");
}
