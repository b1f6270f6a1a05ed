//! The adapter against the real Claude Code CLI (`@anthropic-ai/claude-code`,
//! pinned in `sdk_claude_code::testing`), offline: claude talks to a scripted
//! mock Anthropic Messages API on loopback (see `sdk_claude_code::testing`
//! for what it answers), with a fake API key and its outside traffic off.
//! A turn in which the model runs a `Bash` command and answers, the thread's
//! instructions in the system prompt, token usage, a thread's MCP server
//! (the real Python test server) listed and called, interrupt while a
//! command runs, and steering.
//!
//! The pinned package is installed once with npm into
//! `<target>/claude-npm/<version>` and reused. Without npm (or when the
//! install fails) the tests record a skip and pass, unless
//! `AGENT_RUNNER_REQUIRE_REAL_CLAUDE` is set (then they fail).

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use sdk_adapter::testing::{
    check_item_lifecycles, completed, completed_command, completed_of, create, input, texts,
    thread_spec, usages,
};
use sdk_adapter::{
    ItemKind, ItemStatus, SdkAdapter, SdkStatus, ThreadSpec, Turn, TurnEvent, TurnOutcome,
};
use sdk_claude_code::testing::{
    MockMessages, Reply, USAGE_CACHE_READ, USAGE_CACHE_WRITE, USAGE_INPUT, USAGE_OUTPUT,
    install_claude, message_texts, offline_env, system_text, tool_names, tool_results, user_texts,
};
use sdk_claude_code::{ClaudeAdapter, ClaudeConfig};
use tempfile::TempDir;

/// Claude starts, calls the model and runs tools: slower than the fake.
const PATIENCE: Duration = Duration::from_secs(120);

fn skip(reason: &str) {
    if std::env::var_os("AGENT_RUNNER_REQUIRE_REAL_CLAUDE").is_some() {
        panic!("the real Claude Code test cannot run: {reason}");
    }
    test_kit::skip_this_test(&format!("real Claude Code test: {reason}"));
}

struct Setup {
    _dir: TempDir,
    mock: MockMessages,
    adapter: ClaudeAdapter,
    spec: ThreadSpec,
}

/// The pinned claude (or `None` after recording a skip), a mock it talks
/// to, an adapter allowing its tools, and a created thread (adjusted by
/// `adjust` first).
async fn setup(adjust: impl FnOnce(ThreadSpec) -> ThreadSpec) -> Option<Setup> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let bin = match install_claude() {
        Ok(bin) => bin,
        Err(reason) => {
            skip(&reason);
            return None;
        }
    };
    let mock = MockMessages::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = ClaudeConfig {
        bin,
        permission_mode: Some("bypassPermissions".into()),
        env: offline_env(mock.port),
        request_timeout: PATIENCE,
        ..ClaudeConfig::default()
    };
    let adapter = ClaudeAdapter::new(config);
    let description = adapter.describe().await;
    assert_eq!(description.status, SdkStatus::Ready, "{description:?}");
    let spec = create(&adapter, adjust(thread_spec(dir.path(), "sonnet"))).await;
    Some(Setup {
        _dir: dir,
        mock,
        adapter,
        spec,
    })
}

/// The next event of `turn`; panics (showing `seen`) after [`PATIENCE`].
async fn next(turn: &mut Turn, seen: &[TurnEvent]) -> TurnEvent {
    tokio::time::timeout(PATIENCE, turn.events.recv())
        .await
        .unwrap_or_else(|_| panic!("no event in time; seen {seen:#?}"))
        .unwrap_or_else(|| panic!("stream ended early; seen {seen:#?}"))
}

/// Events of `turn` up to and including the one `pred` matches.
async fn until(turn: &mut Turn, pred: impl Fn(&TurnEvent) -> bool) -> Vec<TurnEvent> {
    let mut events = Vec::new();
    loop {
        let event = next(turn, &events).await;
        let hit = pred(&event);
        events.push(event);
        if hit {
            return events;
        }
    }
}

fn finished(event: &TurnEvent) -> bool {
    matches!(event, TurnEvent::Finished(_))
}

async fn run(setup: &Setup, text: &str) -> Vec<TurnEvent> {
    let mut turn = setup
        .adapter
        .start_turn(&setup.spec, input(&setup.spec, text))
        .await
        .expect("start_turn");
    until(&mut turn, finished).await
}

fn running_command(event: &TurnEvent) -> bool {
    matches!(event, TurnEvent::Item(i) if i.command.is_some() && i.status == ItemStatus::Running)
}

/// A model call's input tokens as the adapter counts them (fresh, cache
/// read and cache write).
const CALL_INPUT: i64 = USAGE_INPUT + USAGE_CACHE_READ + USAGE_CACHE_WRITE;

/// The model runs a command (really, in the thread's workspace) and
/// answers; the thread's instructions are in the system prompt, the
/// command's output in the follow-up call, the usage is the mock's. A
/// second turn reuses the session: its call carries the first turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_claude_runs_a_command_and_answers() {
    let Some(setup) = setup(|spec| ThreadSpec {
        instructions: Some("Sign every answer as MARKER-instructions-7.".into()),
        ..spec
    })
    .await
    else {
        return;
    };
    setup.mock.push(Reply::bash(
        "echo hello-from-claude >> proof.txt; echo done",
    ));
    setup.mock.push(Reply::text("All done."));
    let events = run(&setup, "please run the proof command").await;
    assert_eq!(
        events.last(),
        Some(&TurnEvent::Finished(TurnOutcome::Completed)),
        "{events:#?}"
    );
    check_item_lifecycles(&events);
    let user = completed_of(&events, ItemKind::UserMessage);
    assert_eq!(user.text.as_deref(), Some("please run the proof command"));
    let command = completed_command(&events);
    assert!(command.command.contains("proof.txt"), "{command:?}");
    assert_eq!(command.output.as_deref(), Some("done"), "{command:?}");
    assert_eq!(Path::new(&command.cwd), setup.spec.workspace.as_path());
    assert!(
        completed(&events)
            .iter()
            .any(|i| i.kind == ItemKind::CommandExecution && i.command.is_some()),
        "{events:#?}"
    );
    assert_eq!(texts(&events, ItemKind::AgentMessage), ["All done."]);
    let proof = std::fs::read_to_string(setup.spec.workspace.join("proof.txt")).unwrap();
    assert_eq!(proof, "hello-from-claude\n");

    // Two model calls, both counted.
    let usage = *usages(&events).last().expect("token usage");
    assert_eq!(usage.last.input_tokens, 2 * CALL_INPUT, "{usage:?}");
    assert_eq!(usage.last.cached_input_tokens, 2 * USAGE_CACHE_READ);
    assert_eq!(usage.last.output_tokens, 2 * USAGE_OUTPUT);
    assert_eq!(
        usage.last.total_tokens,
        2 * (CALL_INPUT + USAGE_OUTPUT),
        "{usage:?}"
    );
    assert_eq!(usage.total, usage.last);

    let calls = setup.mock.model_calls();
    assert_eq!(calls.len(), 2, "{calls:#?}");
    assert!(
        system_text(&calls[0]).contains("MARKER-instructions-7"),
        "the instructions reach the system prompt"
    );
    assert!(tool_names(&calls[0]).iter().any(|t| t == "Bash"));
    assert!(
        user_texts(&calls[0])
            .iter()
            .any(|t| t == "please run the proof command")
    );
    assert_eq!(tool_results(&calls[1]), ["done"]);

    // The next turn, in the same session.
    setup.mock.push(Reply::text("Again."));
    let events = run(&setup, "once more").await;
    assert_eq!(
        events.last(),
        Some(&TurnEvent::Finished(TurnOutcome::Completed)),
        "{events:#?}"
    );
    assert_eq!(texts(&events, ItemKind::AgentMessage), ["Again."]);
    let calls = setup.mock.model_calls();
    let history = user_texts(&calls[2]);
    assert!(
        history.iter().any(|t| t == "please run the proof command")
            && history.iter().any(|t| t == "once more"),
        "{history:?}"
    );
    let usage = *usages(&events).last().expect("token usage");
    assert_eq!(usage.last.total_tokens, CALL_INPUT + USAGE_OUTPUT);
    assert_eq!(usage.total.total_tokens, 3 * (CALL_INPUT + USAGE_OUTPUT));

    // Nothing but the model calls reached the API (no count_tokens, no
    // small-model call), each to the same endpoint.
    let received = setup.mock.received();
    assert!(
        received
            .iter()
            .all(|r| r.is_model_call() && r.path == "/v1/messages?beta=true"),
        "{:?}",
        received.iter().map(|r| &r.path).collect::<Vec<_>>()
    );
}

/// A thread's MCP server (the Python test server over stdio) is listed to
/// the model as a tool, and the model's call of it runs and comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_claude_calls_the_threads_mcp_server() {
    let site = match mcp_client::testing::install_python_mcp() {
        Ok(site) => site,
        Err(why) => {
            return skip(&format!("the Python MCP SDK cannot be installed: {why}"));
        }
    };
    let server = mcp_client::testing::stdio_server(&site, "local", &[]);
    let Some(setup) = setup(|spec| ThreadSpec {
        mcp_servers: vec![server].into(),
        ..spec
    })
    .await
    else {
        return;
    };
    setup.mock.push(Reply::tool(
        "mcp__local__echo",
        serde_json::json!({"text": "hi-mcp"}),
    ));
    setup.mock.push(Reply::text("Echoed."));
    let events = run(&setup, "echo through the server").await;
    assert_eq!(
        events.last(),
        Some(&TurnEvent::Finished(TurnOutcome::Completed)),
        "{events:#?}"
    );
    let call = completed_of(&events, ItemKind::McpToolCall);
    let text = call.text.unwrap_or_default();
    assert!(text.starts_with("local/echo "), "{text}");
    assert!(text.contains("echo:hi-mcp"), "{text}");
    assert_eq!(texts(&events, ItemKind::AgentMessage), ["Echoed."]);
    let calls = setup.mock.model_calls();
    assert!(
        tool_names(&calls[0])
            .iter()
            .any(|t| t == "mcp__local__echo"),
        "{:?}",
        tool_names(&calls[0])
    );
    assert!(
        tool_results(&calls[1])
            .iter()
            .any(|r| r.contains("echo:hi-mcp")),
        "{:?}",
        tool_results(&calls[1])
    );
}

/// Interrupt while the model's `sleep` runs ends the turn at once (not
/// after the sleep), the command never finishes, and the thread takes the
/// next turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupting_a_real_claude_ends_the_turn_while_a_command_runs() {
    let Some(setup) = setup(|spec| spec).await else {
        return;
    };
    setup
        .mock
        .push(Reply::bash("sleep 60; echo finished > late.txt"));
    let mut turn = setup
        .adapter
        .start_turn(&setup.spec, input(&setup.spec, "sleep a while"))
        .await
        .expect("start_turn");
    let mut events = until(&mut turn, running_command).await;
    // Give the command time to start.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let asked = Instant::now();
    turn.control.interrupt();
    events.extend(until(&mut turn, finished).await);
    assert_eq!(
        events.last(),
        Some(&TurnEvent::Finished(TurnOutcome::Interrupted)),
        "{events:#?}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(30),
        "the turn ended {:?} after the interrupt",
        asked.elapsed()
    );
    assert!(!setup.spec.workspace.join("late.txt").exists());

    setup.mock.push(Reply::text("Awake."));
    let events = run(&setup, "are you there").await;
    assert_eq!(
        events.last(),
        Some(&TurnEvent::Finished(TurnOutcome::Completed)),
        "{events:#?}"
    );
    assert_eq!(texts(&events, ItemKind::AgentMessage), ["Awake."]);
}

/// A second user message while the turn runs (its command sleeps) reaches
/// the model within the same turn: Claude Code hands it over in the call
/// after the command, as a mid-conversation system message quoting the
/// user; the model's answer to it ends the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_a_real_claude_reaches_the_model() {
    let Some(setup) = setup(|spec| spec).await else {
        return;
    };
    setup.mock.push(Reply::bash("sleep 3; echo slept"));
    setup.mock.push(Reply::text("Hello, as you asked."));
    let mut turn = setup
        .adapter
        .start_turn(&setup.spec, input(&setup.spec, "take a nap"))
        .await
        .expect("start_turn");
    let mut events = until(&mut turn, running_command).await;
    turn.control
        .steer("MARKER-steer: also say hello".into(), 7)
        .await
        .expect("steer while the turn runs");
    events.extend(until(&mut turn, finished).await);
    assert_eq!(
        events.last(),
        Some(&TurnEvent::Finished(TurnOutcome::Completed)),
        "{events:#?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, TurnEvent::Steered { tag: 7 })),
        "{events:#?}"
    );
    assert_eq!(
        texts(&events, ItemKind::UserMessage),
        ["take a nap", "MARKER-steer: also say hello"]
    );
    assert_eq!(
        texts(&events, ItemKind::AgentMessage),
        ["Hello, as you asked."]
    );
    let calls = setup.mock.model_calls();
    assert_eq!(calls.len(), 2, "one call for the command, one after it");
    let messages = message_texts(&calls[1]);
    let steered = messages
        .iter()
        .position(|(_, text)| text.contains("MARKER-steer: also say hello"))
        .unwrap_or_else(|| panic!("the steer reached the model: {messages:#?}"));
    let result = calls[1]["messages"]
        .as_array()
        .and_then(|all| {
            all.iter().position(|m| {
                m["content"]
                    .as_array()
                    .is_some_and(|blocks| blocks.iter().any(|b| b["type"] == "tool_result"))
            })
        })
        .expect("the command's result");
    assert!(
        steered > result,
        "after the command's result: {messages:#?}"
    );
    assert_eq!(tool_results(&calls[1]), ["slept"]);
}
