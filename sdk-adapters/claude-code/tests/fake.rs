//! The claude-code adapter against `fake-claude` (this package's stand-in
//! for `claude`, see `src/bin/fake-claude.rs`): registration, every tool
//! kind, permission prompts, steering, interrupt, failures, a crash
//! mid-turn, a restart that resumes, model changes, and process cleanup.
//!
//! Every test has its own config dir, so they run in parallel. Timings are
//! only ever bounded generously from above.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sdk_adapter::testing::{
    PATIENCE, alive, completed, outcome, rest, said, texts, until, wait_dead,
};
use sdk_adapter::{
    ItemKind, ItemStatus, SdkAdapter, SdkError, SdkStatus, SteerError, ThreadSpec, TurnEvent,
    TurnInput, TurnOutcome,
};
use sdk_claude_code::{ClaudeAdapter, ClaudeConfig};
use sdk_process::fake::FakeLog;
use tempfile::TempDir;

fn config(dir: &Path) -> ClaudeConfig {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    ClaudeConfig {
        bin: PathBuf::from(env!("CARGO_BIN_EXE_fake-claude")),
        env: vec![(
            "CLAUDE_CONFIG_DIR".into(),
            dir.join("cfg").to_string_lossy().into_owned(),
        )],
        ..ClaudeConfig::default()
    }
}

fn spec(dir: &Path) -> ThreadSpec {
    ThreadSpec {
        agent_id: "agent".into(),
        thread_id: "thread".into(),
        workspace: dir.join("workspace"),
        model: "sonnet".into(),
        reasoning_level: Some("low".into()),
        sdk_thread_id: None,
        env: Vec::new(),
    }
}

fn input(text: &str) -> TurnInput {
    TurnInput {
        text: text.into(),
        model: None,
        reasoning_level: None,
    }
}

async fn setup_with(config: ClaudeConfig, dir: TempDir) -> (TempDir, ClaudeAdapter, ThreadSpec) {
    std::fs::create_dir_all(dir.path().join("cfg")).unwrap();
    let adapter = ClaudeAdapter::new(config);
    let mut spec = spec(dir.path());
    let handle = adapter.create_thread(&spec).await.expect("create_thread");
    spec.sdk_thread_id = Some(handle.sdk_thread_id);
    (dir, adapter, spec)
}

async fn setup() -> (TempDir, ClaudeAdapter, ThreadSpec) {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    setup_with(config, dir).await
}

async fn run(adapter: &ClaudeAdapter, spec: &ThreadSpec, text: &str) -> Vec<TurnEvent> {
    let mut turn = adapter
        .start_turn(spec, input(text))
        .await
        .expect("start_turn");
    rest(&mut turn).await
}

/// What fake-claude logged under the config dir of `dir`.
fn log(dir: &Path) -> FakeLog {
    FakeLog::new(dir.join("cfg/fake.log"))
}

/// The command line of every fake-claude started, in order.
fn args(dir: &Path) -> Vec<String> {
    log(dir).tagged("args")
}

/// The pid of every fake-claude started, in order.
fn pids(dir: &Path) -> Vec<i32> {
    log(dir).pids()
}

/// `ThreadSpec::env` reaches the claude process (so every tool command it
/// runs) and wins over the adapter's own environment: the fake logs under
/// the config dir the thread names, not the configured one.
#[tokio::test]
async fn the_thread_env_reaches_claude_and_wins() {
    let dir = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(other.path().join("cfg")).unwrap();
    let config = config(dir.path());
    let (dir, adapter, mut spec) = setup_with(config, dir).await;
    spec.env = vec![(
        "CLAUDE_CONFIG_DIR".into(),
        other.path().join("cfg").to_string_lossy().into_owned(),
    )];
    let events = run(&adapter, &spec, "say plain").await;
    assert!(matches!(events.last(), Some(TurnEvent::Finished(_))));
    assert_eq!(pids(other.path()).len(), 1);
    assert!(pids(dir.path()).is_empty());
}

#[tokio::test]
async fn describe_advertises_the_configured_models() {
    let dir = tempfile::tempdir().unwrap();
    let desc = ClaudeAdapter::new(config(dir.path())).describe().await;
    assert_eq!(desc.status, SdkStatus::Ready);
    assert_eq!(desc.name, "claude-code");
    let names: Vec<&str> = desc.models.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["sonnet", "opus", "haiku"]);
    assert_eq!(desc.models[0].reasoning_levels, ["low", "medium", "high"]);
}

#[tokio::test]
async fn without_the_binary_it_is_unconfigured_and_requests_fail_clearly() {
    let adapter = ClaudeAdapter::new(ClaudeConfig {
        bin: PathBuf::from("surely-no-such-claude-binary"),
        ..ClaudeConfig::default()
    });
    let started = Instant::now();
    let desc = adapter.describe().await;
    assert!(started.elapsed() < PATIENCE);
    assert_eq!(desc.status, SdkStatus::Unconfigured);
    assert!(
        desc.error_message
            .unwrap()
            .contains("surely-no-such-claude-binary")
    );
    let dir = tempfile::tempdir().unwrap();
    let err = adapter.create_thread(&spec(dir.path())).await.unwrap_err();
    assert!(matches!(err, SdkError::Unavailable(_)), "{err}");
}

#[tokio::test]
async fn a_turn_maps_every_tool_kind() {
    let (dir, adapter, spec) = setup().await;
    let events = run(&adapter, &spec, "all-tools").await;
    assert_eq!(outcome(&events), TurnOutcome::Completed);
    assert_eq!(texts(&events, ItemKind::UserMessage), ["all-tools"]);
    assert_eq!(texts(&events, ItemKind::Reasoning), ["pondering"]);
    assert_eq!(
        texts(&events, ItemKind::FileChange),
        [
            "edit a.rs\n-x\n+y",
            "write b.rs\n+fn main() {}",
            "edit c.rs\n-1\n+2"
        ]
    );
    assert_eq!(texts(&events, ItemKind::WebSearch), ["rust tokio\nresults"]);
    assert_eq!(
        texts(&events, ItemKind::CollabAgentToolCall),
        ["Explore: look around\nfound things"]
    );
    assert_eq!(texts(&events, ItemKind::Plan), ["[in_progress] fix it"]);
    assert_eq!(
        texts(&events, ItemKind::McpToolCall),
        [
            "docs/search {\"q\":\"x\"}\ndoc hit",
            "Read {\"file_path\":\"a.rs\"}\nfn a() {}"
        ]
    );
    assert_eq!(
        completed(&events)
            .iter()
            .filter(|i| i.kind == ItemKind::ContextCompaction)
            .count(),
        1
    );
    assert_eq!(texts(&events, ItemKind::AgentMessage), ["all done"]);
    // Each item RUNNING before COMPLETED, ids unique per turn.
    for item in completed(&events) {
        let first = events
            .iter()
            .find_map(|e| match e {
                TurnEvent::Item(i) if i.item_id == item.item_id => Some(i.status),
                _ => None,
            })
            .unwrap();
        assert_eq!(first, ItemStatus::Running, "{item:?}");
        assert_eq!(
            completed(&events)
                .iter()
                .filter(|i| i.item_id == item.item_id)
                .count(),
            1
        );
    }
    let debug = format!("{events:?}");
    assert!(
        !debug.contains("cube") && !debug.contains("orphan"),
        "{debug}"
    );
    let usage = events
        .iter()
        .find_map(|e| match e {
            TurnEvent::Usage(u) => Some(*u),
            _ => None,
        })
        .unwrap();
    assert_eq!(usage.last.input_tokens, 110);
    assert_eq!(usage.last.cached_input_tokens, 10);
    assert_eq!(usage.last.output_tokens, 20);
    assert_eq!(usage.last.total_tokens, 130);
    assert_eq!(usage.model_context_window, Some(200000));
    let argv = &args(dir.path())[0];
    for needle in [
        "-p",
        "--verbose",
        "--model sonnet",
        "--effort low",
        "--session-id",
    ] {
        assert!(argv.contains(needle), "{argv}");
    }
}

#[tokio::test]
async fn permission_prompts_are_denied_unless_bypass() {
    let (_dir, adapter, thread) = setup().await;
    let events = run(&adapter, &thread, "bash touch x").await;
    assert_eq!(outcome(&events), TurnOutcome::Completed);
    let command = completed(&events)
        .into_iter()
        .find_map(|i| i.command)
        .unwrap();
    assert_eq!(command.command, "touch x");
    assert_eq!(command.cwd, thread.workspace.to_string_lossy());
    assert!(command.output.unwrap().contains("agent-runner denies"));

    let dir = tempfile::tempdir().unwrap();
    let config = ClaudeConfig {
        permission_mode: Some("bypassPermissions".into()),
        ..config(dir.path())
    };
    let (dir, adapter, thread) = setup_with(config, dir).await;
    let events = run(&adapter, &thread, "bash touch x").await;
    let command = completed(&events)
        .into_iter()
        .find_map(|i| i.command)
        .unwrap();
    assert_eq!(command.output.as_deref(), Some("ran: touch x"));
    assert!(args(dir.path())[0].contains("--permission-mode default"));
}

#[tokio::test]
async fn steering_writes_into_the_running_session() {
    let (_dir, adapter, spec) = setup().await;
    let mut turn = adapter
        .start_turn(&spec, input("wait\nsay after"))
        .await
        .unwrap();
    until(&mut turn, |e| matches!(e, TurnEvent::Item(i) if i.kind == ItemKind::UserMessage && i.status == ItemStatus::Completed)).await;
    turn.control.steer("more".into(), 3).await.unwrap();
    let events = rest(&mut turn).await;
    assert_eq!(outcome(&events), TurnOutcome::Completed);
    let steered = events
        .iter()
        .position(|e| *e == TurnEvent::Steered { tag: 3 })
        .expect("Steered");
    let echo = events.iter().position(said("steered: more")).unwrap();
    assert!(steered < echo, "{events:#?}");
    assert_eq!(texts(&events, ItemKind::UserMessage), ["more"]);
    assert_eq!(
        texts(&events, ItemKind::AgentMessage),
        ["steered: more", "after"]
    );
    assert!(matches!(
        turn.control.steer("late".into(), 4).await,
        Err(SteerError::TurnEnded)
    ));
}

#[tokio::test]
async fn results_without_uuids_still_end_the_turn() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.env.push(("FAKE_CLAUDE_NO_UUIDS".into(), "1".into()));
    let (_dir, adapter, spec) = setup_with(config, dir).await;
    let events = run(&adapter, &spec, "say plain").await;
    assert_eq!(outcome(&events), TurnOutcome::Completed);
}

#[tokio::test]
async fn interrupt_sends_the_control_request() {
    let (dir, adapter, spec) = setup().await;
    let mut turn = adapter.start_turn(&spec, input("wait")).await.unwrap();
    until(&mut turn, |e| matches!(e, TurnEvent::Item(i) if i.kind == ItemKind::UserMessage && i.status == ItemStatus::Completed)).await;
    turn.control.interrupt();
    turn.control.interrupt();
    let events = rest(&mut turn).await;
    assert_eq!(outcome(&events), TurnOutcome::Interrupted);
    assert_eq!(
        log(dir.path())
            .lines()
            .iter()
            .filter(|l| *l == "interrupt")
            .count(),
        1
    );
    assert!(matches!(
        turn.control.steer("late".into(), 1).await,
        Err(SteerError::TurnEnded)
    ));
    let events = run(&adapter, &spec, "say next").await;
    assert_eq!(texts(&events, ItemKind::AgentMessage), ["next"]);
    assert_eq!(pids(dir.path()).len(), 1, "the same process goes on");
}

#[tokio::test]
async fn an_unheeded_interrupt_kills_the_process_and_the_next_turn_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let config = ClaudeConfig {
        interrupt_grace: Duration::from_millis(300),
        ..config(dir.path())
    };
    let (dir, adapter, spec) = setup_with(config, dir).await;
    let mut turn = adapter.start_turn(&spec, input("stall")).await.unwrap();
    until(&mut turn, said("stalling")).await;
    let pid = pids(dir.path())[0];
    turn.control.interrupt();
    let events = rest(&mut turn).await;
    assert_eq!(outcome(&events), TurnOutcome::Interrupted);
    wait_dead(pid).await;
    let events = run(&adapter, &spec, "say back").await;
    assert_eq!(texts(&events, ItemKind::AgentMessage), ["back"]);
    assert!(args(dir.path())[1].contains("--resume"));
}

#[tokio::test]
async fn failures_end_the_turn_with_their_text() {
    let (_dir, adapter, spec) = setup().await;
    let events = run(&adapter, &spec, "say hi\nfail Not logged in").await;
    assert_eq!(
        outcome(&events),
        TurnOutcome::Failed("Not logged in".into())
    );
    let events = run(&adapter, &spec, "error-exec").await;
    assert_eq!(
        outcome(&events),
        TurnOutcome::Failed("boom in execution".into())
    );
    let events = run(&adapter, &spec, "say fine").await;
    assert_eq!(outcome(&events), TurnOutcome::Completed);
}

#[tokio::test]
async fn a_crash_fails_the_turn_and_the_next_message_resumes() {
    let (dir, adapter, spec) = setup().await;
    let events = run(&adapter, &spec, "bash ls\ncrash").await;
    let TurnOutcome::Failed(why) = outcome(&events) else {
        panic!("expected a failure: {events:#?}");
    };
    assert!(why.contains("exit status 3"), "{why}");
    assert!(why.contains("crashing on purpose"), "{why}");
    let events = run(&adapter, &spec, "say again").await;
    assert_eq!(outcome(&events), TurnOutcome::Completed);
    assert_eq!(texts(&events, ItemKind::AgentMessage), ["again"]);
    let args = args(dir.path());
    assert_eq!(args.len(), 2);
    let session = spec.sdk_thread_id.as_deref().unwrap();
    assert!(
        args[0].contains(&format!("--session-id {session}")),
        "{args:?}"
    );
    assert!(args[1].contains(&format!("--resume {session}")), "{args:?}");
}

#[tokio::test]
async fn a_restarted_runner_resumes_the_session() {
    let (dir, adapter, spec) = setup().await;
    run(&adapter, &spec, "say one").await;
    let first = pids(dir.path())[0];
    drop(adapter);
    wait_dead(first).await;
    let adapter = ClaudeAdapter::new(config(dir.path()));
    let handle = adapter.create_thread(&spec).await.unwrap();
    assert_eq!(Some(handle.sdk_thread_id), spec.sdk_thread_id);
    let events = run(&adapter, &spec, "say two").await;
    assert_eq!(texts(&events, ItemKind::AgentMessage), ["two"]);
    assert!(args(dir.path())[1].contains("--resume"));
}

#[tokio::test]
async fn a_session_that_never_ran_starts_fresh_after_a_restart() {
    let (dir, adapter, spec) = setup().await;
    drop(adapter);
    let adapter = ClaudeAdapter::new(config(dir.path()));
    adapter.create_thread(&spec).await.unwrap();
    let events = run(&adapter, &spec, "say hello").await;
    assert_eq!(texts(&events, ItemKind::AgentMessage), ["hello"]);
    assert!(args(dir.path())[0].contains("--session-id"));
}

#[tokio::test]
async fn another_model_restarts_the_process_on_the_same_session() {
    let (dir, adapter, spec) = setup().await;
    run(&adapter, &spec, "say one").await;
    let events = run(&adapter, &spec, "say two").await;
    assert_eq!(outcome(&events), TurnOutcome::Completed);
    let mut turn = adapter
        .start_turn(
            &spec,
            TurnInput {
                text: "say three".into(),
                model: Some("opus".into()),
                reasoning_level: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(outcome(&rest(&mut turn).await), TurnOutcome::Completed);
    let args = args(dir.path());
    assert_eq!(args.len(), 2, "{args:?}");
    assert!(
        args[1].contains("--model opus") && args[1].contains("--resume"),
        "{args:?}"
    );
    assert!(!args[1].contains("--effort"), "{args:?}");
}

#[tokio::test]
async fn delete_thread_kills_the_process() {
    let (dir, adapter, spec) = setup().await;
    run(&adapter, &spec, "say hi").await;
    let pid = pids(dir.path())[0];
    assert!(alive(pid));
    adapter.delete_thread(&spec).await.unwrap();
    wait_dead(pid).await;
}
