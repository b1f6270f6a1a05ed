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
//! and the instructions reach the model's system prompt.
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
    install_claude, offline_env, system_text, tool_results,
};

use crate::real_sdk::{assert_workspace_file, first_command, ready_sdk};
use crate::support::*;

/// Claude starts, calls the model and runs a command: slower than a fake.
const CLAUDE_WAIT: Duration = Duration::from_secs(120);

const INSTRUCTIONS: &str = "Sign every answer as MARKER-e2e-instructions.";

/// The pinned claude, or `None` after recording why it cannot be had.
fn claude_or_skip() -> Option<PathBuf> {
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

    let cp = mock().await;
    let mut opts = RunnerOpts::new(cp.url())
        .arg("--sdk")
        .arg("claude-code")
        .arg("--claude-bin")
        .arg(&bin.to_string_lossy())
        .arg("--claude-permission-mode")
        .arg("bypassPermissions");
    // The mock by the setting (over a base URL in the runner's own
    // environment, which points nowhere); the rest by environment.
    for (key, value) in offline_env(api.port) {
        if key == sdk_claude_code::BASE_URL_ENV {
            opts = opts
                .arg("--claude-base-url")
                .arg(&value)
                .env(&key, "http://127.0.0.1:9");
        } else {
            opts = opts.env(&key, &value);
        }
    }
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

    send(
        &cp,
        "m1",
        user_message("a", &thread, "run the proof", false),
    )
    .await;
    cp.wait_for(
        |m| rid_is(m, "m1") && is_turn(m, TurnStatus::Completed),
        CLAUDE_WAIT,
    )
    .await
    .unwrap_or_else(|e| panic!("turn completes: {e:?}\n{}", runner.logs()));
    let msgs = replies(&cp, "m1");
    assert!(
        !msgs.iter().any(|m| error_text(m).is_some()),
        "no RequestError: {msgs:#?}"
    );
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
