//! The engine (`--sdk code-agent`, embedded) asks before the tools
//! `--code-agent-approve-tools` names: the runner binary, a mock control
//! plane that accepted `approvals/1`, and the engine's model a scripted
//! mock on loopback (`code_agent_engine::testing::MockLlm`) that calls
//! `bash` to create a file. The engine's confirmation reaches the control
//! plane as a command approval with the command and the workspace; while
//! it waits the file does not exist; approved, the command runs; denied, it
//! does not and the denial's message reaches the model as the tool's
//! result. Approved for the thread, the same command runs again without
//! asking; one nobody decides is denied at `--approval-timeout`. A control
//! plane that did not accept the extension sees no request, and the
//! runner's `--approval-policy` (deny) decides.

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use code_agent_engine::testing::{MockLlm, MockReply};
use mock_control_plane::MockControlPlane;
use serde_json::json;

use crate::code_agent::model_env;
use crate::real_sdk::ready_sdk;
use crate::support::*;

const MODEL: &str = "mock-model";

fn bash(call: &str, command: &str) -> MockReply {
    MockReply::tool_call(call, "bash", json!({ "command": command }))
}

/// A runner with the engine asking before `bash`, against `mock`, and a
/// control plane accepting approvals or not; agent `a`'s thread.
async fn engine_runner(mock: &MockLlm, accept: bool) -> (MockControlPlane, RunnerProc, String) {
    engine_runner_with(mock, accept, &[]).await
}

/// [`engine_runner`] with more runner arguments.
async fn engine_runner_with(
    mock: &MockLlm,
    accept: bool,
    args: &[&str],
) -> (MockControlPlane, RunnerProc, String) {
    let cp = crate::support::mock().await;
    cp.accept_approvals(accept);
    let mut opts = RunnerOpts::new(cp.url())
        .arg("--sdk")
        .arg("code-agent")
        .arg("--code-agent-approve-tools")
        .arg("bash,write");
    for a in args {
        opts = opts.arg(a);
    }
    for (k, v) in model_env(mock) {
        opts = opts.env(&k, &v);
    }
    let runner = RunnerProc::start(opts);
    ready_sdk(&cp, &runner, "code-agent", WAIT).await;
    create_sdk_agent(&cp, "a", "code-agent").await;
    let thread = try_create_thread(&cp, "a", "ct", MODEL, WAIT)
        .await
        .unwrap_or_else(|m| panic!("a code-agent thread, got {m:?}\n{}", runner.logs()));
    (cp, runner, thread)
}

/// The `ApprovalRequest` of the turn started by `rid`.
async fn asked(cp: &MockControlPlane, runner: &RunnerProc, rid: &str) -> ApprovalRequest {
    let r = rid.to_owned();
    let m = cp
        .wait_for(
            move |m| rid_is(m, &r) && matches!(payload(m), Some(Payload::ApprovalRequest(_))),
            WAIT,
        )
        .await
        .unwrap_or_else(|e| panic!("the engine asks: {e:?}\n{}", runner.logs()));
    match m.payload {
        Some(Payload::ApprovalRequest(a)) => a,
        _ => unreachable!(),
    }
}

async fn decide(cp: &MockControlPlane, rid: &str, id: &str, outcome: ApprovalOutcome, why: &str) {
    let request = Request::ApprovalDecision(ApprovalDecision {
        approval_id: id.to_owned(),
        outcome: outcome.into(),
        answer: None,
        message: Some(why.to_owned()),
    });
    send(cp, rid, request).await;
}

async fn completed(cp: &MockControlPlane, runner: &RunnerProc, rid: &str) -> Vec<ClientMessage> {
    cp.wait_for(
        |m| rid_is(m, rid) && is_turn(m, TurnStatus::Completed),
        WAIT,
    )
    .await
    .unwrap_or_else(|e| panic!("turn completes: {e:?}\n{}", runner.logs()));
    replies(cp, rid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_asks_before_bash_and_runs_it_only_if_approved() {
    let mock = MockLlm::start(vec![
        bash("call_1", "echo approved > approved.txt"),
        MockReply::text("All done."),
        bash("call_2", "echo denied > denied.txt"),
        MockReply::text("Understood."),
    ])
    .await;
    let (cp, runner, thread) = engine_runner(&mock, true).await;
    let workspace = runner.thread_workspace("a", &thread);

    send(&cp, "m1", user_message("a", &thread, "write it", false)).await;
    let request = asked(&cp, &runner, "m1").await;
    assert_eq!(request.kind, ApprovalKind::CommandExecution as i32);
    assert_eq!(request.thread_id, thread);
    assert_eq!(
        request.command.as_deref(),
        Some("echo approved > approved.txt")
    );
    assert_eq!(
        request.cwd.as_deref(),
        Some(workspace.to_string_lossy().as_ref())
    );
    assert!(request.title.contains("approved.txt"), "{request:?}");
    assert_eq!(request.sdk_item_id.as_deref(), Some("call_1"));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !workspace.join("approved.txt").exists(),
        "nothing runs before the decision"
    );
    decide(
        &cp,
        "d1",
        &request.approval_id,
        ApprovalOutcome::Approve,
        "ok",
    )
    .await;
    let m1 = completed(&cp, &runner, "m1").await;
    assert_eq!(said(&m1), ["All done."]);
    assert_eq!(
        std::fs::read_to_string(workspace.join("approved.txt")).unwrap_or_default(),
        "approved\n",
        "{}",
        runner.logs()
    );

    send(
        &cp,
        "m2",
        user_message("a", &thread, "write another", false),
    )
    .await;
    let request = asked(&cp, &runner, "m2").await;
    decide(
        &cp,
        "d2",
        &request.approval_id,
        ApprovalOutcome::Deny,
        "not in this repo",
    )
    .await;
    let m2 = completed(&cp, &runner, "m2").await;
    assert_eq!(said(&m2), ["Understood."]);
    assert!(
        !workspace.join("denied.txt").exists(),
        "a denied command never runs"
    );
    let resolved: Vec<(i32, i32)> = cp
        .received()
        .iter()
        .filter_map(|m| match payload(m) {
            Some(Payload::ApprovalResolved(r)) => Some((r.outcome, r.resolved_by)),
            _ => None,
        })
        .collect();
    let by_cp = ApprovalResolver::ControlPlane as i32;
    assert_eq!(
        resolved,
        [
            (ApprovalOutcome::Approve as i32, by_cp),
            (ApprovalOutcome::Deny as i32, by_cp)
        ]
    );
    let last = mock.requests().pop().expect("the model was asked again");
    assert!(
        last.to_string().contains("not in this repo"),
        "the denial's message reaches the model: {last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_extension_the_engine_is_denied_by_policy() {
    let mock = MockLlm::start(vec![
        bash("call_1", "echo ran > ran.txt"),
        MockReply::text("Could not."),
    ])
    .await;
    let (cp, runner, thread) = engine_runner(&mock, false).await;
    send(&cp, "m1", user_message("a", &thread, "write it", false)).await;
    let m1 = completed(&cp, &runner, "m1").await;
    assert_eq!(said(&m1), ["Could not."]);
    assert!(
        !runner
            .thread_workspace("a", &thread)
            .join("ran.txt")
            .exists(),
        "the policy denied it"
    );
    assert!(
        !cp.received().iter().any(|m| matches!(
            payload(m),
            Some(Payload::ApprovalRequest(_) | Payload::ApprovalResolved(_))
        )),
        "nothing about approvals is sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_for_thread_is_remembered_and_an_undecided_call_times_out() {
    let again = "echo again >> again.txt";
    let mock = MockLlm::start(vec![
        bash("call_1", again),
        MockReply::text("One."),
        bash("call_2", again),
        MockReply::text("Two."),
        bash("call_3", "echo late > late.txt"),
        MockReply::text("Three."),
    ])
    .await;
    let (cp, runner, thread) = engine_runner_with(&mock, true, &["--approval-timeout", "2s"]).await;
    let workspace = runner.thread_workspace("a", &thread);
    send(&cp, "m1", user_message("a", &thread, "one", false)).await;
    let request = asked(&cp, &runner, "m1").await;
    decide(
        &cp,
        "d1",
        &request.approval_id,
        ApprovalOutcome::ApproveForThread,
        "",
    )
    .await;
    completed(&cp, &runner, "m1").await;
    send(&cp, "m2", user_message("a", &thread, "two", false)).await;
    let m2 = completed(&cp, &runner, "m2").await;
    assert!(
        !m2.iter()
            .any(|m| matches!(payload(m), Some(Payload::ApprovalRequest(_)))),
        "the same command is not asked again: {m2:#?}"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("again.txt")).unwrap_or_default(),
        "again\nagain\n"
    );

    send(&cp, "m3", user_message("a", &thread, "three", false)).await;
    let request = asked(&cp, &runner, "m3").await;
    let m3 = completed(&cp, &runner, "m3").await;
    assert_eq!(said(&m3), ["Three."]);
    assert!(!workspace.join("late.txt").exists(), "timed out: denied");
    let id = request.approval_id.clone();
    let timed_out = cp.received().iter().any(|m| {
        matches!(payload(m),
        Some(Payload::ApprovalResolved(r)) if r.approval_id == id
            && r.resolved_by == ApprovalResolver::Timeout as i32
            && r.outcome == ApprovalOutcome::Deny as i32)
    });
    assert!(timed_out, "{:#?}", cp.received());
}

/// `CANCEL_TURN` on an engine's request: the command never runs, the turn
/// ends at once with the decision's `request_id` on its `TurnUpdate
/// COMPLETED` (as an interrupt's carries the interrupt's), the model is not
/// asked again in that turn, and the thread's next turn runs as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_turn_ends_the_engines_turn_and_the_thread_goes_on() {
    let mock = MockLlm::start(vec![
        bash("call_1", "echo cancelled > cancelled.txt"),
        MockReply::text("Next."),
    ])
    .await;
    let (cp, runner, thread) = engine_runner(&mock, true).await;
    let workspace = runner.thread_workspace("a", &thread);
    send(&cp, "m1", user_message("a", &thread, "write it", false)).await;
    let request = asked(&cp, &runner, "m1").await;
    decide(
        &cp,
        "d1",
        &request.approval_id,
        ApprovalOutcome::CancelTurn,
        "stop here",
    )
    .await;
    let ended = completed(&cp, &runner, "d1").await;
    assert!(
        ended.iter().any(|m| matches!(payload(m),
            Some(Payload::ApprovalResolved(r)) if r.approval_id == request.approval_id
                && r.outcome == ApprovalOutcome::CancelTurn as i32
                && r.resolved_by == ApprovalResolver::ControlPlane as i32)),
        "resolved as cancelled by the control plane: {ended:#?}"
    );
    assert!(
        !workspace.join("cancelled.txt").exists(),
        "a cancelled command never runs"
    );
    assert!(
        said(&replies(&cp, "m1")).is_empty(),
        "nothing more is said in the cancelled turn"
    );
    assert_eq!(mock.requests().len(), 1, "the model is not asked again");

    send(&cp, "m2", user_message("a", &thread, "go on", false)).await;
    let m2 = completed(&cp, &runner, "m2").await;
    assert_eq!(said(&m2), ["Next."], "{}", runner.logs());
}
