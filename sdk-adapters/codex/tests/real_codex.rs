//! The adapter against the real `codex app-server` (`@openai/codex`, pinned
//! in `sdk_codex::testing`), offline: codex talks to a mock Responses API on
//! loopback (see `sdk_codex::testing` for what the mock answers).
//!
//! The pinned package is installed once with npm into
//! `<target>/codex-npm/<version>` and reused. Without npm (or when the
//! install fails) the test prints why and passes, unless
//! `AGENT_RUNNER_REQUIRE_REAL_CODEX` is set (then it fails).

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use sdk_adapter::testing::{completed, create, input, thread_spec, usages};
use sdk_adapter::{
    ItemKind, ItemStatus, SdkAdapter, SdkStatus, ThreadSpec, TurnEvent, TurnOutcome,
};
use sdk_codex::testing::{MockResponses, install_codex, write_config};
use sdk_codex::{CodexAdapter, CodexConfig};

const PATIENCE: Duration = Duration::from_secs(120);

fn skip(reason: &str) {
    if std::env::var_os("AGENT_RUNNER_REQUIRE_REAL_CODEX").is_some() {
        panic!("the real codex test cannot run: {reason}");
    }
    test_kit::skip_this_test(&format!("real codex test: {reason}"));
}

async fn turn_events(adapter: &CodexAdapter, spec: &ThreadSpec, text: &str) -> Vec<TurnEvent> {
    let mut turn = adapter
        .start_turn(spec, input(spec, text))
        .await
        .expect("start_turn");
    let mut events = Vec::new();
    loop {
        let event = tokio::time::timeout(PATIENCE, turn.events.recv())
            .await
            .unwrap_or_else(|_| panic!("no event in time; seen {events:#?}"))
            .unwrap_or_else(|| panic!("stream ended early; seen {events:#?}"));
        let done = matches!(event, TurnEvent::Finished(_));
        events.push(event);
        if done {
            return events;
        }
    }
}

fn check_turn(events: &[TurnEvent], spec: &ThreadSpec, text: &str) {
    assert_eq!(
        events.last(),
        Some(&TurnEvent::Finished(TurnOutcome::Completed)),
        "{events:#?}"
    );
    let completed = completed(events);
    let user = completed
        .iter()
        .find(|i| i.kind == ItemKind::UserMessage)
        .expect("a user message item");
    assert_eq!(user.text.as_deref(), Some(text));
    let command = completed
        .iter()
        .find_map(|i| i.command.clone())
        .expect("a completed command item");
    assert!(command.command.contains("proof.txt"), "{command:?}");
    assert!(
        command.output.as_deref().unwrap_or("").contains("done"),
        "{command:?}"
    );
    assert_eq!(command.exit_code, Some(0), "{command:?}");
    assert_eq!(Path::new(&command.cwd), spec.workspace.as_path());
    assert!(
        events.iter().any(|e| matches!(e, TurnEvent::Item(i) if i.command.is_some() && i.status == ItemStatus::Running)),
        "the command was reported RUNNING first: {events:#?}"
    );
    let message = completed
        .iter()
        .find(|i| i.kind == ItemKind::AgentMessage)
        .expect("an agent message");
    assert_eq!(message.text.as_deref(), Some("All done."));
    let usage = *usages(events).last().expect("token usage");
    assert_eq!(usage.last.total_tokens, 120);
    assert_eq!(usage.last.cached_input_tokens, 10);
    assert_eq!(usage.last.reasoning_output_tokens, 5);
    assert!(usage.total.total_tokens >= 240, "{usage:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_codex_runs_a_command_and_resumes_after_a_restart() {
    let bin = match install_codex() {
        Ok(bin) => bin,
        Err(reason) => return skip(&reason),
    };
    let mock = MockResponses::start().await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    write_config(&home, mock.port).unwrap();
    let config = CodexConfig {
        bin,
        approval_policy: Some("never".into()),
        sandbox: Some("danger-full-access".into()),
        env: vec![("CODEX_HOME".into(), home.to_string_lossy().into_owned())],
        request_timeout: PATIENCE,
        describe_timeout: PATIENCE,
        probe_sandbox: sdk_adapter::testing::sandbox(&dir.path().join("probe")),
        ..CodexConfig::default()
    };
    let adapter = CodexAdapter::new(config.clone());
    let description = adapter.describe().await;
    assert_eq!(description.status, SdkStatus::Ready, "{description:?}");
    assert!(
        description.models.iter().any(|m| m.name == "mock-model"),
        "the configured model is advertised: {description:?}"
    );

    let spec = create(
        &adapter,
        ThreadSpec {
            reasoning_level: None,
            ..thread_spec(dir.path(), "mock-model")
        },
    )
    .await;
    let events = turn_events(&adapter, &spec, "please run the proof command").await;
    check_turn(&events, &spec, "please run the proof command");
    let proof = std::fs::read_to_string(spec.workspace.join("proof.txt")).unwrap();
    assert_eq!(proof, "hello-from-codex\n");
    {
        let requests = mock.requests();
        assert_eq!(requests.len(), 2);
        let output = requests[1]["input"]
            .as_array()
            .and_then(|items| items.iter().find(|i| i["type"] == "function_call_output"))
            .expect("the follow-up request carries the command's output");
        assert!(output["output"].as_str().unwrap_or("").contains("done"));
    }

    // A runner restart: a new adapter re-opens the thread and resumes it.
    drop(adapter);
    let adapter = CodexAdapter::new(config);
    let reopened = adapter.create_thread(&spec).await.unwrap();
    assert_eq!(Some(reopened.sdk_thread_id), spec.sdk_thread_id);
    let events = turn_events(&adapter, &spec, "once more").await;
    check_turn(&events, &spec, "once more");
    let proof = std::fs::read_to_string(spec.workspace.join("proof.txt")).unwrap();
    assert_eq!(proof, "hello-from-codex\nhello-from-codex\n");
    // The resumed thread sent its history: the first turn's message is in it.
    let history = mock.requests()[2]["input"].to_string();
    assert!(
        history.contains("please run the proof command"),
        "{history}"
    );
}
