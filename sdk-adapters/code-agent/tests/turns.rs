//! The adapter against the real engine and a mock model on loopback: every
//! scenario runs twice, with the engine in-process (in-memory pipes) and
//! remote (served on 127.0.0.1:0) — the same adapter code path both times.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use code_agent_engine::testing::{MockChunk, MockReply};
use sdk_adapter::testing::{
    check_item_lifecycles, completed, completed_of, outcome, rest, texts, until, updates_of, usage,
    usages, wait_until_dead,
};
use sdk_adapter::{ItemKind, ItemStatus, SdkAdapter, SdkStatus, TurnEvent, TurnOutcome};
use serde_json::json;

use support::*;

/// One `#[tokio::test]` per mode for each scenario.
macro_rules! both_modes {
    ($($name:ident),* $(,)?) => {
        mod in_process {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Mode::InProcess).await;
                }
            )*
        }
        mod remote {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Mode::Remote).await;
                }
            )*
        }
    };
}

both_modes!(
    describe_advertises_the_default_providers_models,
    text_streams_into_an_agent_message_with_usage,
    reasoning_and_the_reasoning_level_reach_the_model,
    bash_becomes_a_command_execution_with_pid_and_output,
    edit_becomes_a_file_change_and_changes_the_file,
    the_threads_env_reaches_its_commands,
    steering_joins_the_running_generation,
    interrupt_kills_the_running_command,
    a_model_error_fails_the_turn,
    delete_thread_destroys_the_session,
    a_plan_becomes_a_plan_item,
);

/// A model that calls `tool` with `args` once, then answers `answer`.
fn tool_then(id: &str, tool: &str, args: serde_json::Value, answer: &str) -> Vec<MockReply> {
    vec![
        MockReply::tool_call(id, tool, args),
        MockReply::text(answer),
    ]
}

async fn describe_advertises_the_default_providers_models(mode: Mode) {
    let h = harness(mode, vec![]).await;
    let d = h.adapter.describe().await;
    assert_eq!(d.name, "code-agent");
    assert_eq!(d.status, SdkStatus::Ready, "{d:?}");
    let names: Vec<&str> = d.models.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, [MODEL, REASONING_MODEL]);
    assert!(d.models[0].reasoning_levels.is_empty());
    assert_eq!(d.models[1].reasoning_levels, ["low", "medium", "high"]);
}

async fn text_streams_into_an_agent_message_with_usage(mode: Mode) {
    let long = "The quick brown fox jumps over the lazy dog and keeps on running far away";
    let h = harness(
        mode,
        vec![
            MockReply::text(long).with_usage(12, 5),
            MockReply::text("again").with_usage(30, 2),
        ],
    )
    .await;
    h.adapter.describe().await;
    let spec = h.thread(h.spec("thr-text")).await;
    let mut turn = h.turn(&spec, "say something").await;
    let events = rest(&mut turn).await;
    assert_eq!(outcome(&events), TurnOutcome::Completed, "{events:#?}");
    check_item_lifecycles(&events);
    assert_eq!(texts(&events, ItemKind::UserMessage), ["say something"]);
    assert_eq!(texts(&events, ItemKind::AgentMessage), [long]);
    // Every RUNNING snapshot is the text so far.
    let message = completed_of(&events, ItemKind::AgentMessage);
    let updates = updates_of(&events, &message.item_id);
    assert!(updates.len() >= 2, "{updates:#?}");
    for update in &updates {
        let text = update.text.as_deref().unwrap_or("");
        assert!(!text.is_empty() && long.starts_with(text), "{update:?}");
    }
    let reported = usages(&events);
    assert_eq!(reported.len(), 1, "{events:#?}");
    assert_eq!(
        (
            reported[0].last.input_tokens,
            reported[0].last.output_tokens,
            reported[0].last.total_tokens
        ),
        (12, 5, 17)
    );
    assert_eq!(reported[0].total, reported[0].last);
    assert_eq!(reported[0].model_context_window, Some(32_000));

    // The next turn continues the session and the thread's totals.
    let mut turn = h.turn(&spec, "more").await;
    let events = rest(&mut turn).await;
    assert_eq!(texts(&events, ItemKind::AgentMessage), ["again"]);
    let usage = usage(&events);
    assert_eq!(usage.last.total_tokens, 32);
    assert_eq!(usage.total.total_tokens, 49);
    let second = &h.mock.requests()[1];
    let sent = second["messages"].to_string();
    assert!(
        sent.contains("say something") && sent.contains(long),
        "{sent}"
    );
}

async fn reasoning_and_the_reasoning_level_reach_the_model(mode: Mode) {
    let h = harness(
        mode,
        vec![MockReply::Stream(vec![
            MockChunk::Reasoning("Let me ".into()),
            MockChunk::Reasoning("think.".into()),
            MockChunk::Text("Thought it through.".into()),
            MockChunk::Finish("stop".into()),
        ])],
    )
    .await;
    let mut spec = h.spec("thr-reason");
    spec.model = REASONING_MODEL.into();
    spec.reasoning_level = Some("high".into());
    let spec = h.thread(spec).await;
    let mut turn = h.turn(&spec, "think first").await;
    let events = rest(&mut turn).await;
    assert_eq!(outcome(&events), TurnOutcome::Completed, "{events:#?}");
    check_item_lifecycles(&events);
    assert_eq!(texts(&events, ItemKind::Reasoning), ["Let me think."]);
    assert_eq!(
        texts(&events, ItemKind::AgentMessage),
        ["Thought it through."]
    );
    let request = &h.mock.requests()[0];
    assert_eq!(request["model"], REASONING_MODEL);
    assert_eq!(request["reasoning_effort"], "high", "{request}");
}

async fn bash_becomes_a_command_execution_with_pid_and_output(mode: Mode) {
    let h = harness(
        mode,
        tool_then(
            "call_1",
            "bash",
            json!({"command": "echo hi-from-bash; echo oops >&2; exit 3"}),
            "It failed with 3.",
        ),
    )
    .await;
    let spec = h.thread(h.spec("thr-bash")).await;
    let mut turn = h.turn(&spec, "run it").await;
    let events = rest(&mut turn).await;
    assert_eq!(outcome(&events), TurnOutcome::Completed, "{events:#?}");
    check_item_lifecycles(&events);
    let item = completed_of(&events, ItemKind::CommandExecution);
    let command = item.command.clone().expect("command info");
    assert_eq!(command.command, "echo hi-from-bash; echo oops >&2; exit 3");
    assert_eq!(command.cwd, workspace(&spec).display().to_string());
    assert!(
        command.process_id.parse::<i32>().is_ok_and(|pid| pid > 1),
        "{command:?}"
    );
    let output = command.output.unwrap_or_default();
    assert!(
        output.contains("hi-from-bash") && output.contains("oops"),
        "{output}"
    );
    assert_eq!(command.exit_code, Some(3));
    let running = &updates_of(&events, &item.item_id)[0];
    assert_eq!(running.status, ItemStatus::Running);
    assert_eq!(
        running.command.as_ref().map(|c| c.command.as_str()),
        Some(command.command.as_str())
    );
    // Item order: user message, command, then the answer.
    let kinds: Vec<ItemKind> = completed(&events).iter().map(|i| i.kind).collect();
    assert_eq!(
        kinds,
        [
            ItemKind::UserMessage,
            ItemKind::CommandExecution,
            ItemKind::AgentMessage
        ]
    );
}

async fn edit_becomes_a_file_change_and_changes_the_file(mode: Mode) {
    let h = harness(
        mode,
        tool_then(
            "call_e",
            "edit",
            json!({"path": "notes.txt", "old_string": "world", "new_string": "there"}),
            "Edited.",
        ),
    )
    .await;
    let spec = h.thread(h.spec("thr-edit")).await;
    std::fs::write(spec.workspace.join("notes.txt"), "hello world\n").unwrap();
    let mut turn = h.turn(&spec, "fix the greeting").await;
    let events = rest(&mut turn).await;
    assert_eq!(outcome(&events), TurnOutcome::Completed, "{events:#?}");
    check_item_lifecycles(&events);
    let change = completed_of(&events, ItemKind::FileChange);
    let text = change.text.unwrap_or_default();
    assert!(text.starts_with("update "), "{text}");
    assert!(text.contains("notes.txt"), "{text}");
    assert!(
        text.contains("-hello world") && text.contains("+hello there"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(spec.workspace.join("notes.txt")).unwrap(),
        "hello there\n"
    );
}

async fn a_plan_becomes_a_plan_item(mode: Mode) {
    let plan = json!({
        "goal": "add a flag",
        "steps": [
            {"id": "s1", "description": "find the parser"},
            {"id": "s2", "description": "add the flag", "dependencies": ["s1"]}
        ]
    });
    let h = harness(mode, tool_then("call_p", "plan", plan, "Planned.")).await;
    let spec = h.thread(h.spec("thr-plan")).await;
    let mut turn = h.turn(&spec, "plan a flag").await;
    let events = rest(&mut turn).await;
    assert_eq!(outcome(&events), TurnOutcome::Completed, "{events:#?}");
    check_item_lifecycles(&events);
    let item = completed_of(&events, ItemKind::Plan);
    assert_eq!(
        item.text.as_deref(),
        Some("Goal: add a flag\n1. [s1] find the parser\n2. [s2] add the flag")
    );
}

async fn the_threads_env_reaches_its_commands(mode: Mode) {
    let h = harness(
        mode,
        tool_then(
            "call_env",
            "bash",
            json!({"command": "echo \"var=$THREAD_MARKER key=${OPENAI_API_KEY:-none}\""}),
            "ok",
        ),
    )
    .await;
    let mut spec = h.spec("thr-env");
    spec.env = vec![("THREAD_MARKER".into(), "marker-42".into())];
    let spec = h.thread(spec).await;
    let mut turn = h.turn(&spec, "show env").await;
    let events = rest(&mut turn).await;
    let command = completed_of(&events, ItemKind::CommandExecution)
        .command
        .expect("command");
    let output = command.output.unwrap_or_default();
    assert!(output.contains("var=marker-42"), "{output}");
    assert!(output.contains("key=none"), "{output}");
}

async fn steering_joins_the_running_generation(mode: Mode) {
    let h = harness(
        mode,
        // Waits until the test lets it go, so the steer surely arrives
        // while the generation runs.
        tool_then(
            "call_wait",
            "bash",
            json!({"command": "while [ ! -f go ]; do sleep 0.05; done; echo released"}),
            "Also saying bye.",
        ),
    )
    .await;
    let spec = h.thread(h.spec("thr-steer")).await;
    let mut turn = h.turn(&spec, "wait for it").await;
    let mut events = until(&mut turn, |e| {
        matches!(e, TurnEvent::Item(i) if i.kind == ItemKind::CommandExecution && i.status == ItemStatus::Running)
    })
    .await;
    turn.control
        .steer("and then say bye".into(), 7)
        .await
        .expect("steer accepted");
    std::fs::write(spec.workspace.join("go"), "").unwrap();
    events.extend(rest(&mut turn).await);
    assert_eq!(outcome(&events), TurnOutcome::Completed, "{events:#?}");
    check_item_lifecycles(&events);
    let at = events
        .iter()
        .position(|e| *e == TurnEvent::Steered { tag: 7 })
        .unwrap_or_else(|| panic!("no Steered in {events:#?}"));
    assert!(
        matches!(&events[at + 1], TurnEvent::Item(i) if i.kind == ItemKind::UserMessage && i.text.as_deref() == Some("and then say bye")),
        "{events:#?}"
    );
    assert_eq!(
        texts(&events, ItemKind::UserMessage),
        ["wait for it", "and then say bye"]
    );
    assert_eq!(texts(&events, ItemKind::AgentMessage), ["Also saying bye."]);
    // One generation: the steering text went to the model with the tool result.
    let requests = h.mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests[1]["messages"]
            .to_string()
            .contains("and then say bye"),
        "{}",
        requests[1]
    );
    // Steering after the turn ended is refused as such.
    let late = turn.control.steer("too late".into(), 8).await;
    assert!(
        matches!(late, Err(sdk_adapter::SteerError::TurnEnded)),
        "{late:?}"
    );
}

async fn interrupt_kills_the_running_command(mode: Mode) {
    let h = harness(
        mode,
        vec![MockReply::tool_call(
            "call_sleep",
            "bash",
            json!({"command": "sleep 30"}),
        )],
    )
    .await;
    let spec = h.thread(h.spec("thr-int")).await;
    let dir = workspace(&spec);
    let mut turn = h.turn(&spec, "sleep a while").await;
    let mut events = until(
        &mut turn,
        |e| matches!(e, TurnEvent::Item(i) if i.kind == ItemKind::CommandExecution),
    )
    .await;
    // Wait until the command's processes exist.
    let deadline = tokio::time::Instant::now() + sdk_adapter::testing::PATIENCE;
    let pids = loop {
        let pids = processes_in(&dir);
        if !pids.is_empty() {
            break pids;
        }
        assert!(tokio::time::Instant::now() < deadline, "no process started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    turn.control.interrupt();
    turn.control.interrupt(); // idempotent
    events.extend(rest(&mut turn).await);
    assert_eq!(outcome(&events), TurnOutcome::Interrupted, "{events:#?}");
    check_item_lifecycles(&events);
    wait_until_dead(&pids).await;
    assert!(processes_in(&dir).is_empty());
    // The thread takes the next turn normally.
    h.mock.push(MockReply::text("awake"));
    let mut turn = h.turn(&spec, "again").await;
    let events = rest(&mut turn).await;
    assert_eq!(outcome(&events), TurnOutcome::Completed, "{events:#?}");
    assert_eq!(texts(&events, ItemKind::AgentMessage), ["awake"]);
}

async fn a_model_error_fails_the_turn(mode: Mode) {
    let h = harness(mode, vec![MockReply::error(401, "mock: bad api key")]).await;
    let spec = h.thread(h.spec("thr-err")).await;
    let mut turn = h.turn(&spec, "hello?").await;
    let events = rest(&mut turn).await;
    match outcome(&events) {
        TurnOutcome::Failed(text) => assert!(text.contains("bad api key"), "{text}"),
        other => panic!("expected a failed turn, got {other:?}: {events:#?}"),
    }
    check_item_lifecycles(&events);
    assert!(
        !format!("{events:?}").contains("sk-test-mock"),
        "the API key leaked"
    );
    // The session is usable again afterwards.
    h.mock.push(MockReply::text("fine now"));
    let mut turn = h.turn(&spec, "hello again").await;
    let events = rest(&mut turn).await;
    assert_eq!(outcome(&events), TurnOutcome::Completed, "{events:#?}");
}

async fn delete_thread_destroys_the_session(mode: Mode) {
    let mut h = harness(mode, vec![]).await;
    let spec = h.thread(h.spec("thr-del")).await;
    let session_id = spec.sdk_thread_id.clone().expect("sdk thread id");
    assert_eq!(session_id, "thr-del");
    let get = |id: String| code_agent_proto::GetSessionRequest { session_id: id };
    let found = h
        .admin
        .get_session(get(session_id.clone()))
        .await
        .expect("session");
    let config = found
        .into_inner()
        .session
        .and_then(|s| s.config)
        .expect("config");
    assert_eq!(
        config.storage_type,
        code_agent_proto::StorageType::File as i32
    );
    assert_eq!(config.llm.map(|l| l.model).as_deref(), Some(MODEL));
    h.adapter.delete_thread(&spec).await.expect("delete_thread");
    let gone = h.admin.get_session(get(session_id)).await;
    assert_eq!(gone.err().map(|s| s.code()), Some(tonic::Code::NotFound));
    // Deleting again is fine.
    h.adapter.delete_thread(&spec).await.expect("idempotent");
}
