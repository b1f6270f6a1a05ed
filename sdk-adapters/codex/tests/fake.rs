//! The codex adapter against `fake-codex` (this package's stand-in for
//! `codex app-server`, see `src/bin/fake-codex/main.rs`): registration, a turn
//! with every item kind, approvals, coalescing, steering, interrupt, a crash
//! mid-turn, a restart that resumes, and process cleanup.
//!
//! Every test has its own state directory, so they run in parallel. Timings
//! are only ever bounded generously from above.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sdk_adapter::testing::fake_cli::{
    crashes, interrupts_a_waiting_turn, kills_a_stalled_turn, reopens, runs_on_model, says,
    steers_a_waiting_turn,
};
use sdk_adapter::testing::{
    PATIENCE, alive, check_item_lifecycles, completed_command, create, done, items, outcome, rest,
    run, start, texts, thread_spec, until, usage, wait_dead,
};
use sdk_adapter::{
    ApprovalAnswer, ApprovalKind, ItemKind, ItemStatus, SdkAdapter, SdkDescription, SdkStatus,
    ThreadSpec, TurnEvent, TurnOutcome,
};
use sdk_codex::{CodexAdapter, CodexConfig};
use sdk_process::fake::FakeLog;
use tempfile::TempDir;

fn config(dir: &Path) -> CodexConfig {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    CodexConfig {
        bin: PathBuf::from(env!("CARGO_BIN_EXE_fake-codex")),
        env: vec![(
            "FAKE_CODEX_STATE".into(),
            dir.to_string_lossy().into_owned(),
        )],
        request_timeout: Duration::from_secs(20),
        probe_sandbox: sdk_adapter::testing::sandbox(&dir.join("probe")),
        ..CodexConfig::default()
    }
}

fn spec(dir: &Path) -> ThreadSpec {
    thread_spec(dir, "fake-fast")
}

/// A state dir, an adapter on it (its config changed by `adjust`), and a
/// created thread.
async fn setup_adjusted(
    adjust: impl FnOnce(CodexConfig) -> CodexConfig,
) -> (TempDir, CodexAdapter, ThreadSpec) {
    let dir = tempfile::tempdir().unwrap();
    let adapter = CodexAdapter::new(adjust(config(dir.path())));
    let spec = create(&adapter, spec(dir.path())).await;
    (dir, adapter, spec)
}

/// A state dir, an adapter on it, and a created thread.
async fn setup() -> (TempDir, CodexAdapter, ThreadSpec) {
    setup_adjusted(|config| config).await
}

/// What an adapter says of itself when fake-codex sees `key=value` in its
/// environment.
async fn describe_with(key: &str, value: &str) -> SdkDescription {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.env.push((key.into(), value.into()));
    CodexAdapter::new(config).describe().await
}

/// What fake-codex logged in its state dir `dir`.
fn log(dir: &Path) -> Vec<String> {
    FakeLog::new(dir.join("log")).lines()
}

/// The pid of every fake-codex started on `dir`, in order.
fn pids(dir: &Path) -> Vec<i32> {
    FakeLog::new(dir.join("log")).pids()
}

#[tokio::test]
async fn describe_lists_every_model_page_with_efforts() {
    let dir = tempfile::tempdir().unwrap();
    let adapter = CodexAdapter::new(config(dir.path()));
    let desc = adapter.describe().await;
    assert_eq!(desc.status, SdkStatus::Ready, "{desc:?}");
    assert_eq!(desc.name, "codex");
    let names: Vec<(&str, Vec<String>)> = desc
        .models
        .iter()
        .map(|m| (m.name.as_str(), m.reasoning_levels.clone()))
        .collect();
    assert_eq!(
        names,
        vec![
            ("fake-fast", vec!["low".to_owned(), "high".to_owned()]),
            ("fake-slow", vec![])
        ]
    );
    // Cached: a second describe starts no process.
    let started = pids(dir.path()).len();
    assert_eq!(adapter.describe().await, desc);
    assert_eq!(pids(dir.path()).len(), started);
}

#[tokio::test]
async fn describe_adds_the_configured_model_when_the_catalog_lacks_it() {
    let desc = describe_with("FAKE_CODEX_CONFIG_MODEL", "my-local-model").await;
    let names: Vec<&str> = desc.models.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["fake-fast", "fake-slow", "my-local-model"]);
}

#[tokio::test]
async fn describe_without_the_binary_is_unconfigured_at_once() {
    let adapter = CodexAdapter::new(CodexConfig {
        bin: PathBuf::from("surely-no-such-codex-binary"),
        ..CodexConfig::default()
    });
    let started = Instant::now();
    let desc = adapter.describe().await;
    assert!(started.elapsed() < PATIENCE);
    assert_eq!(desc.status, SdkStatus::Unconfigured);
    let why = desc.error_message.unwrap();
    assert!(why.contains("surely-no-such-codex-binary"), "{why}");
    // Requests get a clear error too.
    let dir = tempfile::tempdir().unwrap();
    let err = adapter.create_thread(&spec(dir.path())).await.unwrap_err();
    assert!(err.to_string().contains("not found"), "{err}");
}

#[tokio::test]
async fn describe_logged_out_is_unconfigured_with_a_reason() {
    let desc = describe_with("FAKE_CODEX_LOGGED_OUT", "1").await;
    assert_eq!(desc.status, SdkStatus::Unconfigured);
    assert!(desc.error_message.unwrap().contains("not logged in"));
}

/// `ThreadSpec::env` reaches the app-server (so every command codex runs)
/// and wins over the adapter's own environment: the fake keeps its log in
/// the state dir the thread names, not the configured one.
#[tokio::test]
async fn the_thread_env_reaches_the_app_server_and_wins() {
    let dir = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let adapter = CodexAdapter::new(config(dir.path()));
    let mut spec = spec(dir.path());
    spec.env = vec![(
        "FAKE_CODEX_STATE".into(),
        other.path().to_string_lossy().into_owned(),
    )];
    adapter.create_thread(&spec).await.expect("create_thread");
    assert_eq!(pids(other.path()).len(), 1);
    assert!(pids(dir.path()).is_empty());
}

#[tokio::test]
async fn a_turn_maps_every_item_kind() {
    let (dir, adapter, spec) = setup().await;
    let mut turn = start(&adapter, &spec, "all-items").await;
    let events = rest(&mut turn).await;
    assert_eq!(outcome(&events), TurnOutcome::Completed);
    let completed = items(&events, ItemStatus::Completed);
    for kind in [
        ItemKind::UserMessage,
        ItemKind::AgentMessage,
        ItemKind::Reasoning,
        ItemKind::Plan,
        ItemKind::CommandExecution,
        ItemKind::FileChange,
        ItemKind::McpToolCall,
        ItemKind::CollabAgentToolCall,
        ItemKind::WebSearch,
        ItemKind::ImageView,
        ItemKind::EnteredReviewMode,
        ItemKind::ExitedReviewMode,
        ItemKind::ContextCompaction,
    ] {
        assert!(
            completed.iter().any(|i| i.kind == kind),
            "no completed {kind:?} in {events:#?}"
        );
    }
    // Every item: RUNNING first, then COMPLETED once, ids prefixed.
    check_item_lifecycles(&events);
    for item in &completed {
        assert!(item.item_id.starts_with(&format!("{}-", turn.sdk_turn_id)));
    }
    assert_eq!(texts(&events, ItemKind::UserMessage), ["all-items"]);
    assert_eq!(
        texts(&events, ItemKind::Reasoning),
        ["thinking hard\n\nthen more"]
    );
    assert_eq!(texts(&events, ItemKind::Plan), ["1. look\n2. fix"]);
    assert_eq!(
        texts(&events, ItemKind::FileChange),
        ["update src/a.rs\n-a\n+b"]
    );
    assert_eq!(
        texts(&events, ItemKind::McpToolCall),
        ["docs/search {\"q\":\"x\"}\nfound it"]
    );
    assert_eq!(
        texts(&events, ItemKind::CollabAgentToolCall),
        ["spawnAgent: help me"]
    );
    assert_eq!(texts(&events, ItemKind::WebSearch), ["rust tokio"]);
    assert_eq!(texts(&events, ItemKind::ImageView), ["/tmp/a.png"]);
    assert_eq!(texts(&events, ItemKind::EnteredReviewMode), ["checking"]);
    assert_eq!(texts(&events, ItemKind::ExitedReviewMode), ["looks good"]);
    assert_eq!(texts(&events, ItemKind::AgentMessage), ["all done"]);
    let command = completed
        .iter()
        .find(|i| i.kind == ItemKind::CommandExecution)
        .and_then(|i| i.command.clone())
        .unwrap();
    assert_eq!(command.command, "/bin/bash -lc 'echo hi'");
    assert_eq!(command.cwd, "/fake/cwd");
    assert_eq!(command.process_id, "4242");
    assert_eq!(command.output.as_deref(), Some("hi\n"));
    assert_eq!(command.exit_code, Some(0));
    // Deltas of another turn and unknown item types never show up.
    let debug = format!("{events:?}");
    assert!(!debug.contains("not ours"), "{debug}");
    assert!(!debug.contains("cube"), "{debug}");
    let usage = usage(&events);
    assert_eq!(usage.total.total_tokens, 120);
    assert_eq!(usage.total.cached_input_tokens, 10);
    assert_eq!(usage.last.reasoning_output_tokens, 5);
    assert_eq!(usage.model_context_window, Some(258400));
    assert!(log(dir.path()).contains(&"turn model=fake-fast effort=low".to_owned()));
}

#[tokio::test]
async fn approvals_are_declined_unless_the_policy_is_never() {
    let (_dir, adapter, thread) = setup().await;
    let events = run(&adapter, &thread, "approve touch x\nask").await;
    assert_eq!(outcome(&events), TurnOutcome::Completed);
    assert_eq!(
        texts(&events, ItemKind::AgentMessage),
        ["approval: decline", "answers: {}"]
    );

    let (_dir, adapter, never) = setup_adjusted(|config| CodexConfig {
        approval_policy: Some("never".into()),
        ..config
    })
    .await;
    let events = run(&adapter, &never, "approve touch x").await;
    assert_eq!(texts(&events, ItemKind::AgentMessage), ["approval: accept"]);
    let command = completed_command(&events);
    assert_eq!(command.output.as_deref(), Some("ran\n"));
}

/// Questions and MCP elicitations are asked through the turn (under a
/// policy other than `never`) and their answers reach codex.
#[tokio::test]
async fn questions_and_elicitations_are_asked_and_answered() {
    let (_dir, adapter, thread) = setup().await;
    let mut turn = start(&adapter, &thread, "ask\nelicit\nelicit").await;
    let mut events = Vec::new();
    let mut asked = Vec::new();
    loop {
        let event = sdk_adapter::testing::next(&mut turn, &events).await;
        if let TurnEvent::Approval(a) = &event {
            asked.push(a.ask.clone());
            let answer = match (a.ask.kind, asked.len()) {
                (ApprovalKind::Question, _) => Some("blue"),
                (_, 2) => Some(r#"{"env":"dev"}"#),
                _ => None,
            };
            a.reply.send(match answer {
                Some(text) => ApprovalAnswer {
                    answer: Some(text.to_owned()),
                    ..ApprovalAnswer::approve()
                },
                None => ApprovalAnswer::deny("no"),
            });
        }
        let finished = matches!(event, TurnEvent::Finished(_));
        events.push(event);
        if finished {
            break;
        }
    }
    assert_eq!(outcome(&events), TurnOutcome::Completed);
    assert_eq!(
        texts(&events, ItemKind::AgentMessage),
        [
            r#"answers: {"q1":{"answers":["blue"]}}"#,
            r#"elicitation: accept {"env":"dev"}"#,
            "elicitation: decline null",
        ]
    );
    let kinds: Vec<ApprovalKind> = asked.iter().map(|a| a.kind).collect();
    assert_eq!(
        kinds,
        [
            ApprovalKind::Question,
            ApprovalKind::McpElicitation,
            ApprovalKind::McpElicitation
        ]
    );
    assert_eq!(asked[0].title, "Which?");
    assert_eq!(asked[1].options, ["dev", "prod"]);
}

#[tokio::test]
async fn output_deltas_are_coalesced_and_complete() {
    let (_dir, adapter, spec) = setup().await;
    let events = run(&adapter, &spec, "flood 3000").await;
    assert_eq!(outcome(&events), TurnOutcome::Completed);
    let running = items(&events, ItemStatus::Running)
        .into_iter()
        .filter(|i| i.kind == ItemKind::CommandExecution)
        .count();
    // 3000 deltas in a burst; one snapshot per 100 ms at most (plus the
    // start). A generous bound: the burst takes well under 5 s.
    assert!(running < 60, "{running} RUNNING snapshots for 3000 deltas");
    let output = completed_command(&events).output.unwrap();
    let expected: String = (0..3000).map(|i| format!("line {i}\n")).collect();
    assert_eq!(output, expected);
}

#[tokio::test]
async fn steering_joins_the_running_turn() {
    let (dir, adapter, spec) = setup().await;
    steers_a_waiting_turn(&adapter, &spec, "more please", 7).await;
    assert!(log(dir.path()).contains(&"turn/steer".to_owned()));
}

#[tokio::test]
async fn interrupt_ends_the_turn_interrupted() {
    let (_dir, adapter, spec) = setup().await;
    interrupts_a_waiting_turn(&adapter, &spec).await;
}

#[tokio::test]
async fn a_failed_turn_reports_its_error_and_ignores_retries() {
    let (_dir, adapter, spec) = setup().await;
    let events = run(&adapter, &spec, "say hi\nfail the model said no").await;
    assert_eq!(
        outcome(&events),
        TurnOutcome::Failed("the model said no".into())
    );
    assert!(!format!("{events:?}").contains("transient"));
}

#[tokio::test]
async fn a_crash_fails_the_turn_and_the_next_message_resumes() {
    let (dir, adapter, spec) = setup().await;
    let events = crashes(&adapter, &spec, "say hi\ncrash").await;
    // The started item does not dangle.
    let started = items(&events, ItemStatus::Running).len();
    let completed = items(&events, ItemStatus::Completed).len();
    assert!(completed >= 3 && started >= completed - 1, "{events:#?}");
    let before = pids(dir.path());
    says(&adapter, &spec, "again").await;
    assert_eq!(pids(dir.path()).len(), before.len() + 1, "a new app-server");
    assert!(log(dir.path()).contains(&"thread/resume".to_owned()));
}

#[tokio::test]
async fn a_restarted_runner_resumes_the_thread() {
    let (dir, adapter, spec) = setup().await;
    let events = run(&adapter, &spec, "say one").await;
    assert_eq!(outcome(&events), TurnOutcome::Completed);
    let first = *pids(dir.path()).last().unwrap();
    drop(adapter);
    wait_dead(first).await;

    let adapter = CodexAdapter::new(config(dir.path()));
    reopens(&adapter, &spec).await;
    says(&adapter, &spec, "two").await;
    let log = log(dir.path());
    assert!(log.contains(&"thread/resume".to_owned()), "{log:?}");
    assert_eq!(log.iter().filter(|l| *l == "thread/start").count(), 1);
}

#[tokio::test]
async fn a_thread_that_never_ran_starts_afresh_after_a_restart() {
    let (dir, adapter, spec) = setup().await;
    drop(adapter);
    let adapter = CodexAdapter::new(config(dir.path()));
    adapter.create_thread(&spec).await.unwrap();
    says(&adapter, &spec, "hello").await;
    let log = log(dir.path());
    let resume = log.iter().position(|l| l == "thread/resume").unwrap();
    assert_eq!(log[resume + 1], "thread/start", "{log:?}");
}

#[tokio::test]
async fn a_model_override_names_the_model_and_drops_the_threads_effort() {
    let (dir, adapter, spec) = setup().await;
    runs_on_model(&adapter, &spec, "say x", "fake-slow").await;
    run(&adapter, &spec, "say y").await;
    let log = log(dir.path());
    assert!(
        log.contains(&"turn model=fake-slow effort=-".to_owned()),
        "{log:?}"
    );
    assert!(
        log.contains(&"turn model=fake-fast effort=low".to_owned()),
        "{log:?}"
    );
}

#[tokio::test]
async fn delete_thread_kills_the_app_server() {
    let (dir, adapter, spec) = setup().await;
    let pid = *pids(dir.path()).last().unwrap();
    assert!(alive(pid));
    adapter.delete_thread(&spec).await.unwrap();
    wait_dead(pid).await;
}

#[tokio::test]
async fn an_interrupt_codex_ignores_kills_the_app_server_after_the_grace() {
    let (dir, adapter, spec) = setup_adjusted(|config| CodexConfig {
        interrupt_grace: Duration::from_millis(300),
        ..config
    })
    .await;
    kills_a_stalled_turn(&adapter, &spec, || *pids(dir.path()).last().unwrap()).await;
}

#[tokio::test]
async fn dropping_the_events_interrupts_the_turn() {
    let (dir, adapter, spec) = setup().await;
    let mut turn = start(&adapter, &spec, "wait").await;
    until(&mut turn, done(ItemKind::UserMessage)).await;
    drop(turn);
    let deadline = Instant::now() + PATIENCE;
    while !log(dir.path()).contains(&"turn/interrupt".to_owned()) {
        assert!(Instant::now() < deadline, "no turn/interrupt");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    says(&adapter, &spec, "fine").await;
}
