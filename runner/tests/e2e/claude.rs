//! The real Claude Code CLI through the whole runner: the runner binary
//! with `--sdk claude-code`, the mock control plane, and claude pointed at
//! a scripted mock Anthropic Messages API on loopback
//! (`sdk_claude_code::testing`) by `--claude-base-url` (over an
//! `ANTHROPIC_BASE_URL` of the runner's own that points nowhere), with a
//! fake `ANTHROPIC_API_KEY` and its outside traffic off by the runner's
//! environment, under the default (best-effort) sandbox. A thread with
//! `additional_model_instructions` gets a user message; the model runs a
//! `Bash` command, which really runs in the thread's workspace, and
//! answers: the Item, Turn and token-usage updates reach the control plane
//! and the instructions reach the model's system prompt. A second user
//! message with `allow_steer` while a command runs reaches the model in
//! the same turn, and an `InterruptTurnRequest` while a `sleep` runs ends
//! the turn.
//!
//! Needs npm to install the pinned `@anthropic-ai/claude-code` (cached
//! under the target directory); without it the test records a skip and
//! passes, unless `AGENT_RUNNER_REQUIRE_REAL_CLAUDE` is set.

use std::path::PathBuf;
use std::time::Duration;

use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use sdk_claude_code::testing::{
    MockMessages, Reply, USAGE_CACHE_READ, USAGE_CACHE_WRITE, USAGE_INPUT, USAGE_OUTPUT,
    install_claude, message_texts, offline_env, system_text, tool_results,
};

use mock_control_plane::MockControlPlane;

use crate::real_sdk::{assert_workspace_file, first_command, ready_sdk};
use crate::support::*;

/// Claude starts, calls the model and runs a command: slower than a fake.
const CLAUDE_WAIT: Duration = Duration::from_secs(120);

const INSTRUCTIONS: &str = "Sign every answer as MARKER-e2e-instructions.";

/// The pinned claude, or `None` after recording why it cannot be had
/// (with `AGENT_RUNNER_REQUIRE_REAL_CLAUDE` set, a failure instead).
pub(crate) fn claude_or_skip() -> Option<PathBuf> {
    match install_claude() {
        Ok(bin) => Some(bin),
        Err(reason) => {
            if std::env::var_os("AGENT_RUNNER_REQUIRE_REAL_CLAUDE").is_some() {
                panic!("the real Claude Code e2e test cannot run: {reason}");
            }
            test_kit::skip_this_test(&format!("Claude Code e2e test: {reason}"));
            None
        }
    }
}

/// `opts` for a runner on the claude at `bin` in permission `mode`, kept
/// offline against the mock Messages API on `api_port`: the mock by the
/// setting (over a base URL in the runner's own environment, which points
/// nowhere), the rest by environment.
pub(crate) fn claude_opts(
    opts: RunnerOpts,
    bin: &std::path::Path,
    api_port: u16,
    mode: &str,
) -> RunnerOpts {
    let mut opts = opts
        .arg("--sdk")
        .arg("claude-code")
        .arg("--claude-bin")
        .arg(&bin.to_string_lossy())
        .arg("--claude-permission-mode")
        .arg(mode);
    for (key, value) in offline_env(api_port) {
        if key == sdk_claude_code::BASE_URL_ENV {
            opts = opts
                .arg("--claude-base-url")
                .arg(&value)
                .env(&key, "http://127.0.0.1:9");
        } else {
            opts = opts.env(&key, &value);
        }
    }
    opts
}

/// A runner on the claude at `bin`, pointed at `api`, with agent `a` and a
/// thread with [`INSTRUCTIONS`]: the control plane, the runner, the thread.
async fn runner_with_a_thread(
    bin: &std::path::Path,
    api: &MockMessages,
) -> (MockControlPlane, RunnerProc, String) {
    let cp = mock().await;
    let opts = claude_opts(
        RunnerOpts::new(cp.url()),
        bin,
        api.port,
        "bypassPermissions",
    );
    let runner = RunnerProc::start(opts);
    ready_sdk(&cp, &runner, "claude-code", CLAUDE_WAIT).await;

    create_sdk_agent(&cp, "a", "claude-code").await;
    send(
        &cp,
        "ct",
        Request::CreateThreadRequest(CreateThreadRequest {
            agent_id: "a".into(),
            model: "sonnet".into(),
            additional_model_instructions: Some(INSTRUCTIONS.into()),
            ..Default::default()
        }),
    )
    .await;
    let ready = cp
        .wait_for(|m| rid_is(m, "ct"), CLAUDE_WAIT)
        .await
        .unwrap_or_else(|e| panic!("the thread is created: {e:?}\n{}", runner.logs()));
    let thread = match payload(&ready) {
        Some(client_message::Payload::ThreadUpdate(u))
            if u.status == ThreadStatus::Ready as i32 =>
        {
            u.thread_id.clone()
        }
        _ => panic!(
            "expected ThreadUpdate READY, got {ready:?}\n{}",
            runner.logs()
        ),
    };
    (cp, runner, thread)
}

/// Waits for the turn of `rid` to complete; every message answering it,
/// none a RequestError.
async fn completed_turn(
    cp: &MockControlPlane,
    runner: &RunnerProc,
    rid: &str,
) -> Vec<ClientMessage> {
    let wanted = rid.to_owned();
    cp.wait_for(
        move |m| rid_is(m, &wanted) && is_turn(m, TurnStatus::Completed),
        CLAUDE_WAIT,
    )
    .await
    .unwrap_or_else(|e| panic!("turn {rid} completes: {e:?}\n{}", runner.logs()));
    let msgs = replies(cp, rid);
    assert!(
        !msgs.iter().any(|m| error_text(m).is_some()),
        "no RequestError: {msgs:#?}"
    );
    msgs
}

/// Waits until the turn of `rid` reports a command RUNNING.
async fn command_running(cp: &MockControlPlane, runner: &RunnerProc, rid: &str) {
    let wanted = rid.to_owned();
    cp.wait_for(
        move |m| {
            rid_is(m, &wanted)
                && matches!(payload(m), Some(client_message::Payload::ItemUpdate(i))
                    if i.item_type == ItemType::CommandExecution as i32
                        && i.status == ItemStatus::Running as i32)
        },
        CLAUDE_WAIT,
    )
    .await
    .unwrap_or_else(|e| panic!("a command of {rid} runs: {e:?}\n{}", runner.logs()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_turn_runs_a_command_and_reports_items_and_usage() {
    let Some(bin) = claude_or_skip() else {
        return;
    };
    let api = MockMessages::start().await.expect("mock Messages API");
    api.push(Reply::bash(
        "echo hello-from-claude >> proof.txt; echo done",
    ));
    api.push(Reply::text("All done."));
    let (cp, runner, thread) = runner_with_a_thread(&bin, &api).await;

    send(
        &cp,
        "m1",
        user_message("a", &thread, "run the proof", false),
    )
    .await;
    let msgs = completed_turn(&cp, &runner, "m1").await;
    assert!(
        items(&msgs).contains(&(
            ItemType::UserMessage,
            ItemStatus::Completed,
            Some("run the proof".into())
        )),
        "{msgs:#?}"
    );
    assert_eq!(said(&msgs), ["All done."]);
    let command = first_command(&msgs, &runner);
    assert!(command.command.contains("proof.txt"), "{command:?}");
    assert_eq!(command.output.as_deref(), Some("done"), "{command:?}");
    assert_workspace_file(&runner, &thread, "proof.txt", "hello-from-claude\n");

    let usage = token_usages(&msgs).into_iter().last().expect("token usage");
    assert_eq!(usage.thread_id, thread);
    let calls = 2;
    let last = usage.last_usage.expect("the turn's usage");
    assert_eq!(
        last.input_tokens,
        calls * (USAGE_INPUT + USAGE_CACHE_READ + USAGE_CACHE_WRITE)
    );
    assert_eq!(last.cached_input_tokens, calls * USAGE_CACHE_READ);
    assert_eq!(last.output_tokens, calls * USAGE_OUTPUT);

    let model_calls = api.model_calls();
    assert_eq!(model_calls.len(), 2, "{}", runner.logs());
    assert!(
        system_text(&model_calls[0]).contains(INSTRUCTIONS),
        "the thread's instructions reach the system prompt"
    );
    assert_eq!(tool_results(&model_calls[1]), ["done"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_turn_is_steered_and_another_interrupted_through_the_runner() {
    let Some(bin) = claude_or_skip() else {
        return;
    };
    let api = MockMessages::start().await.expect("mock Messages API");
    let (cp, runner, thread) = runner_with_a_thread(&bin, &api).await;

    // Steering: the second message joins the running turn.
    api.push(Reply::bash("sleep 3; echo slept"));
    api.push(Reply::text("Hello, as you asked."));
    send(&cp, "m1", user_message("a", &thread, "take a nap", false)).await;
    command_running(&cp, &runner, "m1").await;
    let steer = "MARKER-e2e-steer: also say hello";
    send(&cp, "m2", user_message("a", &thread, steer, true)).await;
    let msgs = completed_turn(&cp, &runner, "m2").await;
    // From the steer on, the turn's updates answer the steering message.
    assert_eq!(said(&msgs), ["Hello, as you asked."], "{msgs:#?}");
    let model_calls = api.model_calls();
    assert_eq!(model_calls.len(), 2, "{}", runner.logs());
    assert!(
        message_texts(&model_calls[1])
            .iter()
            .any(|(_, text)| text.contains(steer)),
        "the steer reached the model"
    );

    // Interrupt: the sleep does not run out.
    api.push(Reply::bash("sleep 60; echo finished > late.txt"));
    send(&cp, "m3", user_message("a", &thread, "sleep long", false)).await;
    command_running(&cp, &runner, "m3").await;
    let asked = std::time::Instant::now();
    send(
        &cp,
        "i1",
        Request::InterruptTurnRequest(InterruptTurnRequest {
            agent_id: "a".into(),
            thread_id: thread.clone(),
        }),
    )
    .await;
    // The interrupted turn's COMPLETED answers the interrupt.
    let msgs = completed_turn(&cp, &runner, "i1").await;
    assert!(
        msgs.iter().any(|m| is_turn(m, TurnStatus::Completed)),
        "{msgs:#?}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(30),
        "the turn ended {:?} after the interrupt",
        asked.elapsed()
    );
    let late = runner.thread_workspace("a", &thread).join("late.txt");
    assert!(!late.exists());
}
