//! The real CLIs through the runner in protocol 0.7: the runner binary with
//! `--protocol 0.7`, the mock control plane serving 0.7 (its service built
//! from the 0.7 definitions, every message the runner sends checked by
//! 0.7's rules), and the pinned `codex` and Claude Code CLIs offline against
//! their scripted model APIs on loopback. A thread named only by its model
//! and carrying a `cli_secret` runs a turn whose command really runs in the
//! thread's workspace; items, turn and usage carry the thread and turn ids,
//! nothing 0.7 does not know is sent, and the secret reaches the agent's
//! environment (`AGENT_API_TOKEN`) but no update.
//!
//! Needs npm for the pinned packages (as `e2e::codex` and `e2e::claude`);
//! without it each test records a skip and passes, unless CI requires them.

use std::path::PathBuf;
use std::time::Duration;

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::{ClientMessage, ItemStatus, ThreadStatus, TurnStatus};
use agent_runner_proto::runner_v07 as v07;
use mock_control_plane::{MockConfig, MockControlPlane, Protocol};

use crate::real_sdk::{first_command, ready_sdk};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(120);
const CLI_SECRET: &str = "cli-secret-v07-real-3b9f";

async fn mock_v07() -> MockControlPlane {
    MockControlPlane::start(MockConfig {
        protocol: Protocol::V07,
        ..MockConfig::default()
    })
    .await
    .expect("mock starts")
}

/// Creates thread `thread` on `model` with [`CLI_SECRET`], runs `text` as
/// its first turn and returns the turn's messages (none a RequestError).
async fn v07_turn(
    cp: &MockControlPlane,
    runner: &RunnerProc,
    thread: &str,
    model: &str,
    text: &str,
) -> Vec<ClientMessage> {
    cp.send(v07::ServerMessage {
        request_id: "ct".into(),
        request: Some(v07::server_message::Request::CreateThreadRequest(
            v07::CreateThreadRequest {
                thread_id: thread.into(),
                model: model.into(),
                cli_secret: CLI_SECRET.into(),
                ..Default::default()
            },
        )),
        acked_sequence: 0,
    })
    .await
    .expect("sends");
    let ready = cp
        .wait_for(|m| rid_is(m, "ct"), WAIT)
        .await
        .unwrap_or_else(|e| panic!("the thread is created: {e:?}\n{}", runner.logs()));
    assert!(
        matches!(payload(&ready), Some(Payload::ThreadUpdate(u))
            if u.status == ThreadStatus::Ready as i32 && u.thread_id == thread),
        "{ready:?}\n{}",
        runner.logs()
    );
    cp.send(v07::ServerMessage {
        request_id: "m1".into(),
        request: Some(v07::server_message::Request::CreateUserMessageRequest(
            v07::CreateUserMessageRequest {
                thread_id: thread.into(),
                text: text.into(),
                ..Default::default()
            },
        )),
        acked_sequence: 0,
    })
    .await
    .expect("sends");
    cp.wait_for(
        |m| rid_is(m, "m1") && is_turn(m, TurnStatus::Completed),
        WAIT,
    )
    .await
    .unwrap_or_else(|e| panic!("turn completes: {e:?}\n{}", runner.logs()));
    let msgs = replies(cp, "m1");
    assert!(
        !msgs.iter().any(|m| error_text(m).is_some()),
        "no RequestError: {msgs:#?}"
    );
    msgs
}

/// What every 0.7 turn must show: items and usage with their thread and
/// turn ids, nothing invalid by 0.7's rules, no 0.2-only message, the secret
/// in no update, and the command's file proving the agent had it.
fn assert_07_turn(
    cp: &MockControlPlane,
    runner: &RunnerProc,
    thread: &str,
    msgs: &[ClientMessage],
) {
    for m in msgs {
        if let Some(Payload::ItemUpdate(i)) = payload(m) {
            assert_eq!(i.thread_id, thread, "{m:?}");
            assert!(!i.sdk_turn_id.is_empty(), "{m:?}");
        }
    }
    let usage = token_usages(msgs).into_iter().last().expect("token usage");
    assert_eq!(usage.thread_id, thread);
    assert!(!usage.sdk_turn_id.is_empty(), "{usage:?}");
    assert_eq!(
        cp.invalid_received(),
        [],
        "every message valid by 0.7's rules"
    );
    let all = cp.received();
    assert!(
        !all.iter().any(|m| matches!(
            payload(m),
            Some(Payload::AgentUpdate(_)) | Some(Payload::SkillMpUpdate(_))
        )),
        "{all:#?}"
    );
    assert!(
        !format!("{all:?}").contains(CLI_SECRET),
        "the cli_secret is in no update"
    );
    let command = first_command(msgs, runner);
    let token =
        std::fs::read_to_string(PathBuf::from(&command.cwd).join("token.txt")).unwrap_or_default();
    assert_eq!(token.trim(), CLI_SECRET, "the agent's AGENT_API_TOKEN");
    assert!(
        msgs.iter()
            .any(|m| matches!(payload(m), Some(Payload::ItemUpdate(i))
            if i.status == ItemStatus::Completed as i32)),
        "{msgs:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_codex_runs_a_07_thread() {
    let bin = match sdk_codex::testing::install_codex() {
        Ok(bin) => bin,
        Err(reason) => {
            if std::env::var_os("AGENT_RUNNER_REQUIRE_REAL_CODEX").is_some() {
                panic!("the real codex 0.7 test cannot run: {reason}");
            }
            test_kit::skip_this_test(&format!("codex 0.7 e2e test: {reason}"));
            return;
        }
    };
    let responses = sdk_codex::testing::MockResponses::start()
        .await
        .expect("mock Responses API");
    responses.set_command("printenv AGENT_API_TOKEN > token.txt; echo done");
    let home = tempfile::tempdir().expect("tempdir");
    sdk_codex::testing::write_config(home.path(), responses.port).expect("codex config");
    let cp = mock_v07().await;
    let runner = RunnerProc::start(
        RunnerOpts::new(cp.url())
            .arg("--protocol")
            .arg("0.7")
            .arg("--sdk")
            .arg("codex")
            .arg("--codex-bin")
            .arg(&bin.to_string_lossy())
            .arg("--codex-approval-policy")
            .arg("never")
            .arg("--codex-sandbox")
            .arg("danger-full-access")
            .env("CODEX_HOME", &home.path().to_string_lossy()),
    );
    ready_sdk(&cp, &runner, "codex", WAIT).await;
    let msgs = v07_turn(&cp, &runner, "t-codex-07", "mock-model", "run the proof").await;
    assert_07_turn(&cp, &runner, "t-codex-07", &msgs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_claude_runs_a_07_thread() {
    use sdk_claude_code::testing::{MockMessages, Reply, install_claude};
    let bin = match install_claude() {
        Ok(bin) => bin,
        Err(reason) => {
            if std::env::var_os("AGENT_RUNNER_REQUIRE_REAL_CLAUDE").is_some() {
                panic!("the real Claude Code 0.7 test cannot run: {reason}");
            }
            test_kit::skip_this_test(&format!("Claude Code 0.7 e2e test: {reason}"));
            return;
        }
    };
    let api = MockMessages::start().await.expect("mock Messages API");
    api.push(Reply::bash(
        "printenv AGENT_API_TOKEN > token.txt; echo done",
    ));
    api.push(Reply::text("All done."));
    let cp = mock_v07().await;
    let opts = crate::claude::claude_opts(
        RunnerOpts::new(cp.url()).arg("--protocol").arg("0.7"),
        &bin,
        api.port,
        "bypassPermissions",
    );
    let runner = RunnerProc::start(opts);
    ready_sdk(&cp, &runner, "claude-code", WAIT).await;
    let msgs = v07_turn(&cp, &runner, "t-claude-07", "sonnet", "run the proof").await;
    assert_07_turn(&cp, &runner, "t-claude-07", &msgs);
    assert_eq!(said(&msgs), ["All done."]);
}
