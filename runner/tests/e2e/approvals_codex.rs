//! The real, pinned `codex` CLI asks the control plane before it acts:
//! the runner binary with `--sdk codex --codex-approval-policy untrusted`,
//! a mock control plane that accepted `approvals/1`, and codex offline
//! against the scripted Responses API on loopback (`sdk_codex::testing`),
//! whose model asks to run a command that creates a file. The command's
//! approval request reaches the control plane carrying the command, the
//! thread's workspace as its cwd and the turn's request id; while it waits
//! the file does not exist; approved, the command runs; denied, it never
//! runs and the turn still completes. And codex's questions and MCP
//! elicitations (the fake app-server) answered by the control plane.
//!
//! Needs npm for the pinned package (as `e2e::codex`); without it the test
//! records a skip and passes, unless `AGENT_RUNNER_REQUIRE_REAL_CODEX` is
//! set.

use std::time::Duration;

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use mock_control_plane::MockControlPlane;
use sdk_codex::testing::{MockResponses, install_codex, write_config};

use crate::real_sdk::ready_sdk;
use crate::support::*;

/// Codex starts, thinks and asks: slower than the scripted SDK.
const CODEX_WAIT: Duration = Duration::from_secs(120);

/// The `ApprovalRequest` of the turn started by `rid`.
async fn asked(cp: &MockControlPlane, runner: &RunnerProc, rid: &str) -> ApprovalRequest {
    let r = rid.to_owned();
    let m = cp
        .wait_for(
            move |m| rid_is(m, &r) && matches!(payload(m), Some(Payload::ApprovalRequest(_))),
            CODEX_WAIT,
        )
        .await
        .unwrap_or_else(|e| panic!("codex asks: {e:?}\n{}", runner.logs()));
    match m.payload {
        Some(Payload::ApprovalRequest(a)) => a,
        _ => unreachable!(),
    }
}

/// Decides `approval_id` (request `rid`) and waits for its `ApprovalResolved`.
async fn decide(cp: &MockControlPlane, rid: &str, approval_id: &str, outcome: ApprovalOutcome) {
    let request = Request::ApprovalDecision(ApprovalDecision {
        approval_id: approval_id.to_owned(),
        outcome: outcome.into(),
        answer: None,
        message: Some("decided by the test".into()),
    });
    send(cp, rid, request).await;
    let id = approval_id.to_owned();
    let m = cp
        .wait_for(
            move |m| matches!(payload(m), Some(Payload::ApprovalResolved(r)) if r.approval_id == id),
            CODEX_WAIT,
        )
        .await
        .expect("the request is resolved");
    let Some(Payload::ApprovalResolved(end)) = m.payload else {
        unreachable!()
    };
    assert_eq!(m.request_id.as_deref(), Some(rid));
    assert_eq!(end.outcome, outcome as i32);
    assert_eq!(end.resolved_by, ApprovalResolver::ControlPlane as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_codex_runs_a_command_only_after_the_control_plane_approves() {
    let bin = match install_codex() {
        Ok(bin) => bin,
        Err(reason) => {
            if std::env::var_os("AGENT_RUNNER_REQUIRE_REAL_CODEX").is_some() {
                panic!("the real codex approvals test cannot run: {reason}");
            }
            test_kit::skip_this_test(&format!("codex approvals e2e test: {reason}"));
            return;
        }
    };
    let responses = MockResponses::start().await.expect("mock Responses API");
    responses.set_command("echo approved > approved.txt");
    let home = tempfile::tempdir().expect("tempdir");
    write_config(home.path(), responses.port).expect("codex config");
    let cp = mock().await;
    cp.accept_approvals(true);
    let runner = RunnerProc::start(
        RunnerOpts::new(cp.url())
            .arg("--sdk")
            .arg("codex")
            .arg("--codex-bin")
            .arg(&bin.to_string_lossy())
            .arg("--codex-approval-policy")
            .arg("untrusted")
            .arg("--codex-sandbox")
            .arg("danger-full-access")
            .env("CODEX_HOME", &home.path().to_string_lossy()),
    );
    ready_sdk(&cp, &runner, "codex", CODEX_WAIT).await;
    create_sdk_agent(&cp, "a", "codex").await;
    let thread = try_create_thread(&cp, "a", "ct", "mock-model", CODEX_WAIT)
        .await
        .unwrap_or_else(|m| panic!("a codex thread, got {m:?}\n{}", runner.logs()));
    let workspace = runner.thread_workspace("a", &thread);

    // Approved: nothing runs while the request waits; it runs after.
    send(&cp, "m1", user_message("a", &thread, "write it", false)).await;
    let request = asked(&cp, &runner, "m1").await;
    assert_eq!(
        request.kind,
        ApprovalKind::CommandExecution as i32,
        "{request:?}"
    );
    assert_eq!(request.thread_id, thread);
    let command = request.command.clone().unwrap_or_default();
    assert!(command.contains("approved.txt"), "{request:?}");
    assert!(request.title.contains("approved.txt"), "{request:?}");
    let cwd = std::fs::canonicalize(request.cwd.clone().unwrap_or_default()).ok();
    assert_eq!(cwd, std::fs::canonicalize(&workspace).ok(), "{request:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !workspace.join("approved.txt").exists(),
        "nothing runs before the decision"
    );
    decide(&cp, "d1", &request.approval_id, ApprovalOutcome::Approve).await;
    cp.wait_for(
        |m| rid_is(m, "m1") && is_turn(m, TurnStatus::Completed),
        CODEX_WAIT,
    )
    .await
    .unwrap_or_else(|e| panic!("turn completes: {e:?}\n{}", runner.logs()));
    assert_eq!(
        std::fs::read_to_string(workspace.join("approved.txt")).unwrap_or_default(),
        "approved\n",
        "the approved command ran\n{}",
        runner.logs()
    );

    // Denied: the command never runs, and the turn still ends.
    responses.set_command("echo denied > denied.txt");
    send(
        &cp,
        "m2",
        user_message("a", &thread, "write another", false),
    )
    .await;
    let request = asked(&cp, &runner, "m2").await;
    assert!(
        request
            .command
            .as_deref()
            .unwrap_or("")
            .contains("denied.txt"),
        "{request:?}"
    );
    decide(&cp, "d2", &request.approval_id, ApprovalOutcome::Deny).await;
    cp.wait_for(
        |m| rid_is(m, "m2") && is_turn(m, TurnStatus::Completed),
        CODEX_WAIT,
    )
    .await
    .unwrap_or_else(|e| panic!("turn completes: {e:?}\n{}", runner.logs()));
    assert!(
        !workspace.join("denied.txt").exists(),
        "a denied command never runs"
    );
    let m2 = replies(&cp, "m2");
    assert!(
        !m2.iter().any(|m| error_text(m).is_some()),
        "no RequestError: {m2:#?}"
    );
}

/// codex's questions and MCP elicitations (the fake app-server, approval
/// policy `untrusted`) reach the control plane too, and its answers reach
/// codex: the question's answer text, the elicitation's content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_questions_and_elicitations_are_answered_by_the_control_plane() {
    use mock_control_plane::approvals::Answer;
    let state = tempfile::tempdir().expect("tempdir");
    let cp = mock().await;
    cp.accept_approvals(true);
    let opts = RunnerOpts::new(cp.url())
        .arg("--codex-approval-policy")
        .arg("untrusted");
    let runner = RunnerProc::start(crate::fakes::with_fake_codex(opts, state.path()));
    cp.wait_connected(WAIT).await.expect("runner connects");
    sdk_probed(&cp, "codex").await;
    create_sdk_agent(&cp, "a", "codex").await;
    let thread = try_create_thread(&cp, "a", "t", "fake-fast", WAIT)
        .await
        .expect("a codex thread");
    let _answering = cp.answer_approvals(|a| {
        Some(match ApprovalKind::try_from(a.kind) {
            Ok(ApprovalKind::Question) => Answer::text("blue"),
            Ok(ApprovalKind::McpElicitation) => Answer::text(r#"{"env":"prod"}"#),
            _ => Answer::deny("unexpected"),
        })
    });
    send(&cp, "m1", user_message("a", &thread, "ask\nelicit", false)).await;
    turn_completed(&cp, "m1").await;
    let m1 = replies(&cp, "m1");
    assert_eq!(
        said(&m1),
        [
            r#"answers: {"q1":{"answers":["blue"]}}"#,
            r#"elicitation: accept {"env":"prod"}"#
        ],
        "{}",
        runner.logs()
    );
    let asked: Vec<ApprovalRequest> = m1
        .iter()
        .filter_map(|m| match &m.payload {
            Some(Payload::ApprovalRequest(a)) => Some(a.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert_eq!(asked[0].kind, ApprovalKind::Question as i32);
    assert_eq!(asked[0].title, "Which?");
    assert_eq!(asked[1].kind, ApprovalKind::McpElicitation as i32);
    assert!(asked[1].title.contains("Which env?"), "{:?}", asked[1]);
    assert_eq!(asked[1].options, ["dev", "prod"]);
}
