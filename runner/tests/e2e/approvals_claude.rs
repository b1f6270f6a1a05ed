//! `approvals/1` with the real Claude Code CLI (pinned) through the runner
//! binary: claude runs in `default` permission mode (`--claude-permission-mode
//! default`), offline against the scripted mock Messages API
//! (`sdk_claude_code::testing`), and the mock control plane accepts the
//! extension. The model asks for `Bash`; claude's `can_use_tool` prompt
//! reaches the control plane as an `ApprovalRequest` (the command, the
//! workspace, the agent's description, the gated item). Approved, the
//! command runs (its file appears in the workspace) and its output goes
//! back to the model; denied, it does not run and the model is told the
//! person's message. Claude's clarifying question (`AskUserQuestion`)
//! reaches it as a `QUESTION` with the choices, and the answer text is what
//! the model reads. A control plane that did not accept the extension
//! sees none of it: claude's prompt is denied by the adapter's policy, as
//! before.
//!
//! Needs npm to install the pinned `@anthropic-ai/claude-code` (cached
//! under the target directory); without it the test records a skip and
//! passes, unless `AGENT_RUNNER_REQUIRE_REAL_CLAUDE` is set.

use std::time::Duration;

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use mock_control_plane::MockControlPlane;
use sdk_claude_code::testing::{MockMessages, Reply, tool_results};

use crate::claude::{claude_opts, claude_or_skip};
use crate::real_sdk::ready_sdk;
use crate::support::*;

/// Claude starts, calls the model and runs a command: slower than a fake.
const CLAUDE_WAIT: Duration = Duration::from_secs(120);

/// A control plane that accepts `approvals/1` (if `accept`), a runner on
/// the claude at `bin` in `default` permission mode pointed at `api`,
/// agent `a` and a thread (its id).
async fn deciding(
    bin: &std::path::Path,
    api: &MockMessages,
    accept: bool,
) -> (MockControlPlane, RunnerProc, String) {
    let cp = mock().await;
    cp.accept_approvals(accept);
    let opts = claude_opts(RunnerOpts::new(cp.url()), bin, api.port, "default");
    let runner = RunnerProc::start(opts);
    ready_sdk(&cp, &runner, "claude-code", CLAUDE_WAIT).await;
    create_sdk_agent(&cp, "a", "claude-code").await;
    send(
        &cp,
        "ct",
        Request::CreateThreadRequest(CreateThreadRequest {
            agent_id: "a".into(),
            model: "sonnet".into(),
            ..Default::default()
        }),
    )
    .await;
    let ready = cp
        .wait_for(|m| rid_is(m, "ct"), CLAUDE_WAIT)
        .await
        .unwrap_or_else(|e| panic!("the thread is created: {e:?}\n{}", runner.logs()));
    let thread = match payload(&ready) {
        Some(Payload::ThreadUpdate(u)) if u.status == ThreadStatus::Ready as i32 => {
            u.thread_id.clone()
        }
        _ => panic!(
            "expected ThreadUpdate READY, got {ready:?}\n{}",
            runner.logs()
        ),
    };
    (cp, runner, thread)
}

/// The `ApprovalRequest` of the turn started by `rid`.
async fn request_of(cp: &MockControlPlane, runner: &RunnerProc, rid: &str) -> ApprovalRequest {
    let r = rid.to_owned();
    let m = cp
        .wait_for(
            move |m| rid_is(m, &r) && matches!(payload(m), Some(Payload::ApprovalRequest(_))),
            CLAUDE_WAIT,
        )
        .await
        .unwrap_or_else(|e| panic!("claude asks in {rid}: {e:?}\n{}", runner.logs()));
    match m.payload {
        Some(Payload::ApprovalRequest(a)) => a,
        _ => unreachable!(),
    }
}

/// Sends the decision `outcome` (with `message`, and `answer` for a
/// question) for `asked` as `rid` and waits for its `ApprovalResolved`,
/// then for the turn of `turn` to end.
async fn decide(
    cp: &MockControlPlane,
    runner: &RunnerProc,
    asked: &ApprovalRequest,
    (rid, outcome, message, answer): (&str, ApprovalOutcome, Option<&str>, Option<&str>),
    turn: &str,
) {
    let decision = Request::ApprovalDecision(ApprovalDecision {
        approval_id: asked.approval_id.clone(),
        outcome: outcome.into(),
        answer: answer.map(str::to_owned),
        message: message.map(str::to_owned),
    });
    send(cp, rid, decision).await;
    let id = asked.approval_id.clone();
    let end = cp
        .wait_for(
            move |m| matches!(payload(m), Some(Payload::ApprovalResolved(r)) if r.approval_id == id),
            CLAUDE_WAIT,
        )
        .await
        .unwrap_or_else(|e| panic!("the request is resolved: {e:?}\n{}", runner.logs()));
    assert_eq!(end.request_id.as_deref(), Some(rid));
    match payload(&end) {
        Some(Payload::ApprovalResolved(r)) => {
            assert_eq!(r.outcome, outcome as i32);
            assert_eq!(r.resolved_by, ApprovalResolver::ControlPlane as i32);
        }
        _ => unreachable!(),
    }
    let wanted = turn.to_owned();
    cp.wait_for(
        move |m| rid_is(m, &wanted) && is_turn(m, TurnStatus::Completed),
        CLAUDE_WAIT,
    )
    .await
    .unwrap_or_else(|e| panic!("turn {turn} completes: {e:?}\n{}", runner.logs()));
    let msgs = replies(cp, turn);
    assert!(
        !msgs.iter().any(|m| error_text(m).is_some()),
        "no RequestError: {msgs:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_claude_asks_the_control_plane_before_bash_runs() {
    let Some(bin) = claude_or_skip() else {
        return;
    };
    let api = MockMessages::start().await.expect("mock Messages API");
    let (cp, runner, thread) = deciding(&bin, &api, true).await;
    let workspace = runner.thread_workspace("a", &thread);

    // Approved: the command runs after the decision, not before.
    api.push(Reply::bash("touch approved-by-cp.txt && echo made"));
    api.push(Reply::text("Made it."));
    send(
        &cp,
        "m1",
        user_message("a", &thread, "make the file", false),
    )
    .await;
    let asked = request_of(&cp, &runner, "m1").await;
    assert_eq!(asked.thread_id, thread);
    assert_eq!(asked.kind, ApprovalKind::CommandExecution as i32);
    assert_eq!(
        asked.command.as_deref(),
        Some("touch approved-by-cp.txt && echo made")
    );
    assert_eq!(asked.cwd.as_deref(), Some(&*workspace.to_string_lossy()));
    assert_eq!(asked.reason.as_deref(), Some("run the command"));
    assert!(asked.title.contains("approved-by-cp.txt"), "{asked:?}");
    assert!(
        asked.sdk_item_id.is_some(),
        "it gates the Bash item: {asked:?}"
    );
    assert!(
        !workspace.join("approved-by-cp.txt").exists(),
        "nothing runs before the decision"
    );
    decide(
        &cp,
        &runner,
        &asked,
        ("d1", ApprovalOutcome::Approve, None, None),
        "m1",
    )
    .await;
    assert!(
        workspace.join("approved-by-cp.txt").exists(),
        "the command ran\n{}",
        runner.logs()
    );
    let calls = api.model_calls();
    assert_eq!(tool_results(&calls[1]), ["made"], "{}", runner.logs());
    assert_eq!(said(&replies(&cp, "m1")), ["Made it."]);

    // Denied: it never runs, and the model hears the person's message.
    api.push(Reply::bash("touch denied-by-cp.txt"));
    api.push(Reply::text("Understood."));
    send(&cp, "m2", user_message("a", &thread, "make another", false)).await;
    let asked = request_of(&cp, &runner, "m2").await;
    assert_eq!(asked.command.as_deref(), Some("touch denied-by-cp.txt"));
    let why = "MARKER-denied: not in this workspace";
    decide(
        &cp,
        &runner,
        &asked,
        ("d2", ApprovalOutcome::Deny, Some(why), None),
        "m2",
    )
    .await;
    assert!(
        !workspace.join("denied-by-cp.txt").exists(),
        "the denied command ran"
    );
    let calls = api.model_calls();
    let told = tool_results(calls.last().expect("a model call"));
    assert!(
        told.iter().any(|t| t.contains(why)),
        "the model hears why: {told:?}\n{}",
        runner.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_claudes_question_is_answered_at_the_control_plane() {
    let Some(bin) = claude_or_skip() else {
        return;
    };
    let api = MockMessages::start().await.expect("mock Messages API");
    let (cp, runner, thread) = deciding(&bin, &api, true).await;
    let questions = serde_json::json!({"questions": [
        {"question": "Which database should the service use?", "header": "Database",
         "multiSelect": false,
         "options": [{"label": "Postgres", "description": "a server"},
                     {"label": "SQLite", "description": "a file"}]},
        {"question": "Which extras should it have?", "header": "Extras", "multiSelect": true,
         "options": [{"label": "Cache", "description": "in memory"},
                     {"label": "Search", "description": "full text"}]}
    ]});
    api.push(Reply::tool("AskUserQuestion", questions));
    api.push(Reply::text("SQLite, with a cache and search."));
    send(&cp, "m1", user_message("a", &thread, "set it up", false)).await;
    let asked = request_of(&cp, &runner, "m1").await;
    assert_eq!(asked.kind, ApprovalKind::Question as i32, "{asked:?}");
    assert_eq!(
        asked.title,
        "Which database should the service use? / Which extras should it have?"
    );
    assert_eq!(asked.reason.as_deref(), Some("Database"));
    assert_eq!(asked.options, ["Postgres", "SQLite"]);
    assert!(
        asked.command.is_none() && asked.paths.is_empty(),
        "{asked:?}"
    );
    let answer =
        r#"{"Which database should the service use?": "SQLite", "Extras": ["Cache", "Search"]}"#;
    decide(
        &cp,
        &runner,
        &asked,
        ("d1", ApprovalOutcome::Approve, None, Some(answer)),
        "m1",
    )
    .await;
    let calls = api.model_calls();
    let told = tool_results(calls.last().expect("a model call"));
    let heard = told.join("\n");
    assert!(
        heard.contains(r#""Which database should the service use?"="SQLite""#)
            && heard.contains(r#""Which extras should it have?"="Cache, Search""#),
        "the model reads the answers: {told:?}\n{}",
        runner.logs()
    );
    assert_eq!(
        said(&replies(&cp, "m1")),
        ["SQLite, with a cache and search."]
    );
}

/// `CANCEL_TURN` on claude's prompt: the command never runs, claude's turn
/// is interrupted and ends with the decision's `request_id` on its
/// `TurnUpdate COMPLETED`, and the session takes the next turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_turn_interrupts_a_real_claude_and_the_session_goes_on() {
    let Some(bin) = claude_or_skip() else {
        return;
    };
    let api = MockMessages::start().await.expect("mock Messages API");
    let (cp, runner, thread) = deciding(&bin, &api, true).await;
    let workspace = runner.thread_workspace("a", &thread);
    api.push(Reply::bash("touch cancelled.txt"));
    send(&cp, "m1", user_message("a", &thread, "make it", false)).await;
    let asked = request_of(&cp, &runner, "m1").await;
    let decision = Request::ApprovalDecision(ApprovalDecision {
        approval_id: asked.approval_id.clone(),
        outcome: ApprovalOutcome::CancelTurn.into(),
        answer: None,
        message: Some("stop here".into()),
    });
    send(&cp, "d1", decision).await;
    cp.wait_for(
        |m| rid_is(m, "d1") && is_turn(m, TurnStatus::Completed),
        CLAUDE_WAIT,
    )
    .await
    .unwrap_or_else(|e| panic!("the cancelled turn ends: {e:?}\n{}", runner.logs()));
    let id = asked.approval_id.clone();
    let resolved = cp.received().into_iter().find_map(|m| match m.payload {
        Some(Payload::ApprovalResolved(r)) if r.approval_id == id => Some(r),
        _ => None,
    });
    let resolved = resolved.expect("the request is resolved");
    assert_eq!(resolved.outcome, ApprovalOutcome::CancelTurn as i32);
    assert_eq!(resolved.resolved_by, ApprovalResolver::ControlPlane as i32);
    assert!(
        !workspace.join("cancelled.txt").exists(),
        "a cancelled command never runs"
    );

    api.push(Reply::text("Still here."));
    send(
        &cp,
        "m2",
        user_message("a", &thread, "are you there?", false),
    )
    .await;
    cp.wait_for(
        |m| rid_is(m, "m2") && is_turn(m, TurnStatus::Completed),
        CLAUDE_WAIT,
    )
    .await
    .unwrap_or_else(|e| panic!("the next turn completes: {e:?}\n{}", runner.logs()));
    assert_eq!(
        said(&replies(&cp, "m2")),
        ["Still here."],
        "{}",
        runner.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_extension_a_real_claudes_prompt_is_denied_as_before() {
    let Some(bin) = claude_or_skip() else {
        return;
    };
    let api = MockMessages::start().await.expect("mock Messages API");
    let (cp, runner, thread) = deciding(&bin, &api, false).await;
    api.push(Reply::bash("touch unasked.txt"));
    api.push(Reply::text("Could not."));
    send(&cp, "m1", user_message("a", &thread, "make it", false)).await;
    cp.wait_for(
        |m| rid_is(m, "m1") && is_turn(m, TurnStatus::Completed),
        CLAUDE_WAIT,
    )
    .await
    .unwrap_or_else(|e| panic!("the turn completes: {e:?}\n{}", runner.logs()));
    let asked = cp.received().iter().any(|m| {
        matches!(
            payload(m),
            Some(Payload::ApprovalRequest(_) | Payload::ApprovalResolved(_))
        )
    });
    assert!(!asked, "no approval message without the extension");
    let workspace = runner.thread_workspace("a", &thread);
    assert!(!workspace.join("unasked.txt").exists(), "the command ran");
    let calls = api.model_calls();
    let told = tool_results(calls.last().expect("a model call"));
    assert!(
        told.iter().any(|t| t.contains("agent-runner denies")),
        "the adapter's policy answered: {told:?}\n{}",
        runner.logs()
    );
}
