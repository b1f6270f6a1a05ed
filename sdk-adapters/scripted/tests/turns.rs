//! End-to-end checks of the scripted adapter through the public
//! `SdkAdapter` API: exact event sequences, real commands in real
//! workspaces, interrupts that kill process trees, and steering.
//!
//! Every test uses its own temporary directory, so they run in parallel.
//! Timings are only ever bounded generously from above.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use sdk_adapter::testing::{
    PATIENCE, alive, input, outcome, refuses_late_steers, rest, thread_spec, until, wait_until_dead,
};
use sdk_adapter::{
    CommandInfo, ItemEvent, ItemKind, ItemStatus, SdkAdapter, SdkError, SdkStatus, SteerError,
    ThreadSpec, TokenUsage, TokenUsageBreakdown, Turn, TurnEvent, TurnInput, TurnOutcome,
};
use sdk_scripted::{OUTPUT_CAP_BYTES, ScriptedAdapter};
use tempfile::TempDir;

fn spec(dir: &TempDir) -> ThreadSpec {
    thread_spec(dir.path(), "scripted-fast")
}

/// A fresh thread (workspace created) and a turn running `script` on it.
async fn start(script: &str) -> (TempDir, ThreadSpec, Turn) {
    let dir = tempfile::tempdir().expect("temp dir");
    let spec = spec(&dir);
    let turn = start_on(&spec, script).await;
    (dir, spec, turn)
}

/// The thread of `spec` created on a fresh adapter, and a turn running
/// `script` on it.
async fn start_on(spec: &ThreadSpec, script: &str) -> Turn {
    let adapter = ScriptedAdapter::new();
    adapter.create_thread(spec).await.expect("create_thread");
    sdk_adapter::testing::start(&adapter, spec, script).await
}

fn is_running_command(event: &TurnEvent) -> bool {
    matches!(
        event,
        TurnEvent::Item(item)
            if item.kind == ItemKind::CommandExecution && item.status == ItemStatus::Running
    )
}

fn text_events(turn: &Turn, n: u32, kind: ItemKind, text: &str) -> [TurnEvent; 2] {
    let item = |status| {
        TurnEvent::item(ItemEvent {
            item_id: format!("{}-item-{n}", turn.sdk_turn_id),
            kind,
            status,
            text: Some(text.into()),
            command: None,
        })
    };
    [item(ItemStatus::Running), item(ItemStatus::Completed)]
}

fn command_event(turn: &Turn, n: u32, status: ItemStatus, info: CommandInfo) -> TurnEvent {
    TurnEvent::item(ItemEvent {
        item_id: format!("{}-item-{n}", turn.sdk_turn_id),
        kind: ItemKind::CommandExecution,
        status,
        text: None,
        command: Some(info),
    })
}

/// The command info of every COMPLETED command item, in order.
fn completed_commands(events: &[TurnEvent]) -> Vec<CommandInfo> {
    events
        .iter()
        .filter_map(|event| match event {
            TurnEvent::Item(item) if item.status == ItemStatus::Completed => item.command.clone(),
            _ => None,
        })
        .collect()
}

fn usage(last: (i64, i64), total: (i64, i64)) -> TurnEvent {
    let breakdown = |(input, output): (i64, i64)| TokenUsageBreakdown {
        input_tokens: input,
        output_tokens: output,
        total_tokens: input + output,
        ..TokenUsageBreakdown::default()
    };
    TurnEvent::usage(TokenUsage {
        total: breakdown(total),
        last: breakdown(last),
        model_context_window: None,
    })
}

/// Wait until `path` holds `count` lines of pids and return them.
async fn read_pids(path: &Path, count: usize) -> Vec<i32> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.ends_with('\n') && text.lines().count() == count {
            return text
                .lines()
                .map(|l| l.trim().parse().expect("a pid"))
                .collect();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "pids never appeared: {text:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn workspace(spec: &ThreadSpec) -> PathBuf {
    spec.workspace.clone()
}

#[tokio::test]
async fn a_script_gives_the_exact_event_sequence() {
    let script =
        "say hello\r\n\nthink  hmm\nrun echo hi\nusage 10 5\n   \nusage 1 2\nwhat now\nsay\n";
    let (_dir, spec, mut turn) = start(script).await;
    assert!(turn.sdk_turn_id.starts_with("turn-"));
    let events = rest(&mut turn).await;

    let pid = match &events[6] {
        TurnEvent::Item(item) => item.command.as_ref().map(|info| info.process_id.clone()),
        _ => None,
    }
    .unwrap_or_else(|| panic!("expected the command's RUNNING item, got {:?}", events[6]));
    assert!(pid.parse::<u32>().is_ok_and(|p| p > 0), "pid {pid:?}");
    let info = CommandInfo {
        command: "echo hi".into(),
        cwd: workspace(&spec).to_string_lossy().into_owned(),
        process_id: pid,
        output: None,
        exit_code: None,
        ..Default::default()
    };
    let mut expected = Vec::new();
    expected.extend(text_events(&turn, 1, ItemKind::UserMessage, script));
    expected.extend(text_events(&turn, 2, ItemKind::AgentMessage, "hello"));
    expected.extend(text_events(&turn, 3, ItemKind::Reasoning, " hmm"));
    expected.push(command_event(&turn, 4, ItemStatus::Running, info.clone()));
    expected.push(command_event(
        &turn,
        4,
        ItemStatus::Completed,
        CommandInfo {
            output: Some("hi\n".into()),
            exit_code: Some(0),
            ..info
        },
    ));
    expected.push(usage((10, 5), (10, 5)));
    expected.push(usage((1, 2), (11, 7)));
    expected.extend(text_events(
        &turn,
        5,
        ItemKind::AgentMessage,
        "echo: what now",
    ));
    expected.extend(text_events(&turn, 6, ItemKind::AgentMessage, "echo: say"));
    expected.push(TurnEvent::Finished(TurnOutcome::Completed));
    assert_eq!(events, expected);
}

#[tokio::test]
async fn an_empty_message_is_just_the_user_message() {
    let (_dir, _spec, mut turn) = start("").await;
    let events = rest(&mut turn).await;
    let mut expected = text_events(&turn, 1, ItemKind::UserMessage, "").to_vec();
    expected.push(TurnEvent::Finished(TurnOutcome::Completed));
    assert_eq!(events, expected);
}

#[tokio::test]
async fn run_runs_in_the_workspace() {
    let (_dir, spec, mut turn) = start("run pwd\nrun touch made-here").await;
    let events = rest(&mut turn).await;
    assert_eq!(outcome(&events), TurnOutcome::Completed);
    let commands = completed_commands(&events);
    let printed = commands[0].output.clone().expect("output");
    let ws = workspace(&spec);
    let canonical = std::fs::canonicalize(&ws).expect("canonical workspace");
    assert!(
        printed == format!("{}\n", ws.display()) || printed == format!("{}\n", canonical.display()),
        "pwd printed {printed:?}, workspace is {ws:?}"
    );
    assert!(ws.join("made-here").exists());
}

/// `ThreadSpec::env` reaches every `run` step, on top of (and overriding)
/// the adapter's own environment; other variables are still inherited.
#[tokio::test]
async fn run_steps_see_the_thread_env() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut spec = spec(&dir);
    spec.env = vec![
        ("AGENT_RUNNER_TEST_SPEC_VAR".into(), "from the spec".into()),
        ("GIT_CONFIG_COUNT".into(), "1".into()),
    ];
    let script = "run printf '%s|%s|%s' \"$AGENT_RUNNER_TEST_SPEC_VAR\" \"$GIT_CONFIG_COUNT\" \"${PATH:+path}\"\nrun echo \"$AGENT_RUNNER_TEST_SPEC_VAR\"";
    let mut turn = start_on(&spec, script).await;
    let events = rest(&mut turn).await;
    assert_eq!(outcome(&events), TurnOutcome::Completed);
    let commands = completed_commands(&events);
    assert_eq!(commands[0].output.as_deref(), Some("from the spec|1|path"));
    assert_eq!(commands[1].output.as_deref(), Some("from the spec\n"));
}

#[tokio::test]
async fn stdout_and_stderr_are_one_interleaved_stream() {
    let (_dir, _spec, mut turn) =
        start("run echo out; echo err 1>&2; echo out2; echo err2 >&2").await;
    let events = rest(&mut turn).await;
    let commands = completed_commands(&events);
    assert_eq!(
        commands[0].output.as_deref(),
        Some("out\nerr\nout2\nerr2\n")
    );
}

#[tokio::test]
async fn a_failing_command_does_not_fail_the_turn() {
    let (_dir, _spec, mut turn) = start("run echo before; exit 3\nrun kill -9 $$\nsay after").await;
    let events = rest(&mut turn).await;
    let commands = completed_commands(&events);
    assert_eq!(commands[0].output.as_deref(), Some("before\n"));
    assert_eq!(commands[0].exit_code, Some(3));
    assert_eq!(commands[0].end_marker().as_deref(), Some("[exit status 3]"));
    assert_eq!((commands[1].exit_code, commands[1].signal), (None, Some(9)));
    assert_eq!(
        commands[1].end_marker().as_deref(),
        Some("[killed by signal 9]")
    );
    assert!(!commands[1].interrupted);
    let n = events.len();
    assert_eq!(
        events[n - 3..n - 1],
        text_events(&turn, 4, ItemKind::AgentMessage, "after")
    );
    assert_eq!(outcome(&events), TurnOutcome::Completed);
}

#[tokio::test]
async fn output_is_capped() {
    let (_dir, _spec, mut turn) = start(
        "run yes x | head -c 100000\nrun head -c 100000 /dev/zero | tr '\\000' z\nrun head -c 65536 /dev/zero | tr '\\000' y",
    )
    .await;
    let events = rest(&mut turn).await;
    let commands = completed_commands(&events);

    let over = commands[0].output.clone().expect("output");
    let note = format!(
        "\n[output truncated: {} bytes omitted]",
        100_000 - OUTPUT_CAP_BYTES
    );
    assert_eq!(over.len(), OUTPUT_CAP_BYTES + note.len());
    assert!(over.ends_with(&note), "{}", &over[OUTPUT_CAP_BYTES - 10..]);
    assert!(
        over[..OUTPUT_CAP_BYTES]
            .bytes()
            .all(|b| b == b'x' || b == b'\n')
    );

    // One word over the cap: the cut moves back by the word tail, so no
    // prefix of a secret it might end in is kept.
    let word = commands[1].output.clone().expect("output");
    let kept = OUTPUT_CAP_BYTES - sdk_scripted::WORD_TAIL;
    assert!(word.starts_with(&"z".repeat(kept)));
    assert!(!word[kept..].contains('z'), "{}", &word[kept - 10..]);
    assert!(word.ends_with(&format!(
        "\n[output truncated: {} bytes omitted]",
        100_000 - kept
    )));

    let exact = commands[2].output.clone().expect("output");
    assert_eq!(exact, "y".repeat(OUTPUT_CAP_BYTES));
}

#[tokio::test]
async fn background_leftovers_do_not_hold_the_step() {
    // The shell exits at once; its background child keeps the pipe open and
    // would run for 30 s. The step ends with the shell and kills the child.
    let (_dir, spec, mut turn) =
        start("run sleep 30 & echo $! > pid; echo started\nsay next").await;
    let events = rest(&mut turn).await;
    assert_eq!(outcome(&events), TurnOutcome::Completed);
    let commands = completed_commands(&events);
    assert_eq!(commands[0].output.as_deref(), Some("started\n"));
    assert_eq!(commands[0].exit_code, Some(0));
    let pids = read_pids(&workspace(&spec).join("pid"), 1).await;
    wait_until_dead(&pids).await;
}

#[tokio::test]
async fn fail_fails_the_turn() {
    let (_dir, _spec, mut turn) = start("say a\nfail it broke\nsay never").await;
    let events = rest(&mut turn).await;
    let mut expected = text_events(
        &turn,
        1,
        ItemKind::UserMessage,
        "say a\nfail it broke\nsay never",
    )
    .to_vec();
    expected.extend(text_events(&turn, 2, ItemKind::AgentMessage, "a"));
    expected.push(TurnEvent::Finished(TurnOutcome::Failed("it broke".into())));
    assert_eq!(events, expected);
    refuses_late_steers(&turn).await;
}

#[tokio::test]
async fn a_malformed_line_fails_the_turn_when_reached() {
    let (_dir, _spec, mut turn) = start("say a\n\nsleep soon\nsay never").await;
    let events = rest(&mut turn).await;
    assert_eq!(events.len(), 5, "{events:?}");
    let TurnOutcome::Failed(why) = outcome(&events) else {
        panic!("{events:?}");
    };
    assert!(
        why.contains("line 3") && why.contains("sleep soon"),
        "{why}"
    );
}

#[tokio::test]
async fn an_interrupted_sleep_ends_promptly() {
    let (_dir, _spec, mut turn) = start("say a\nsleep 30000\nsay never").await;
    until(&mut turn, |e| {
        matches!(
            e,
            TurnEvent::Item(item)
                if item.kind == ItemKind::AgentMessage && item.status == ItemStatus::Completed
        )
    })
    .await;
    let started = std::time::Instant::now();
    turn.control.interrupt();
    turn.control.interrupt();
    let events = rest(&mut turn).await;
    assert_eq!(events, vec![TurnEvent::Finished(TurnOutcome::Interrupted)]);
    assert!(started.elapsed() < Duration::from_secs(10));
    refuses_late_steers(&turn).await;
    turn.control.interrupt();
}

#[tokio::test]
async fn an_interrupted_command_dies_with_its_whole_tree() {
    let script = "run echo partial; sleep 30 & echo $! > pids; sleep 30 & echo $! >> pids; echo $$ >> pids; wait\nsay never";
    let (_dir, spec, mut turn) = start(script).await;
    let seen = until(&mut turn, is_running_command).await;
    let Some(TurnEvent::Item(item)) = seen.last() else {
        unreachable!()
    };
    let Some(running) = &item.command else {
        unreachable!()
    };
    let pids = read_pids(&workspace(&spec).join("pids"), 3).await;
    assert_eq!(
        pids[2].to_string(),
        running.process_id,
        "the shell is the reported process"
    );
    assert!(
        pids.iter().all(|&pid| alive(pid)),
        "the tree is running before the interrupt"
    );

    let started = std::time::Instant::now();
    turn.control.interrupt();
    let events = rest(&mut turn).await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(events.len(), 2, "{events:?}");
    let completed = completed_commands(&events);
    assert_eq!(completed[0].output.as_deref(), Some("partial\n"));
    assert_eq!(completed[0].signal, Some(9));
    assert!(completed[0].interrupted);
    assert_eq!(completed[0].end_marker().as_deref(), Some("[interrupted]"));
    assert_eq!(completed[0].process_id, running.process_id);
    assert_eq!(outcome(&events), TurnOutcome::Interrupted);
    wait_until_dead(&pids).await;
}

#[tokio::test]
async fn dropping_the_receiver_kills_the_command() {
    let (_dir, spec, mut turn) =
        start("run sleep 30 & echo $! > pids; echo $$ >> pids; wait").await;
    until(&mut turn, is_running_command).await;
    let pids = read_pids(&workspace(&spec).join("pids"), 2).await;
    assert!(pids.iter().all(|&pid| alive(pid)));
    let control = turn.control.clone();
    drop(turn);
    wait_until_dead(&pids).await;
    // The task noticed and ended the turn.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while control.steer("say x".into(), 1).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the turn never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A `run` step that blocks until the test creates `go` in the workspace.
const GATE: &str = "run while [ ! -e go ]; do sleep 0.02; done";

#[tokio::test]
async fn steering_runs_after_the_step_in_progress() {
    let script = format!("say first\n{GATE}\nsay last");
    let (_dir, spec, mut turn) = start(&script).await;
    until(&mut turn, is_running_command).await;
    turn.control
        .steer("say steered\nthink deep".into(), 7)
        .await
        .expect("steer 7");
    turn.control.steer("hi".into(), 8).await.expect("steer 8");
    std::fs::write(workspace(&spec).join("go"), "").expect("open the gate");
    let events = rest(&mut turn).await;

    let mut expected = vec![events[0].clone()]; // the command's COMPLETED item
    assert_eq!(completed_commands(&expected).len(), 1, "{events:?}");
    expected.push(TurnEvent::Steered { tag: 7 });
    expected.extend(text_events(
        &turn,
        4,
        ItemKind::UserMessage,
        "say steered\nthink deep",
    ));
    expected.extend(text_events(&turn, 5, ItemKind::AgentMessage, "steered"));
    expected.extend(text_events(&turn, 6, ItemKind::Reasoning, "deep"));
    expected.push(TurnEvent::Steered { tag: 8 });
    expected.extend(text_events(&turn, 7, ItemKind::UserMessage, "hi"));
    expected.extend(text_events(&turn, 8, ItemKind::AgentMessage, "echo: hi"));
    expected.extend(text_events(&turn, 9, ItemKind::AgentMessage, "last"));
    expected.push(TurnEvent::Finished(TurnOutcome::Completed));
    assert_eq!(events, expected);

    refuses_late_steers(&turn).await;
}

#[tokio::test]
async fn a_malformed_steering_line_fails_the_turn() {
    let (_dir, spec, mut turn) = start(&format!("{GATE}\nsay never")).await;
    until(&mut turn, is_running_command).await;
    turn.control
        .steer("say ok\nusage 1".into(), 3)
        .await
        .expect("steer");
    std::fs::write(workspace(&spec).join("go"), "").expect("open the gate");
    let events = rest(&mut turn).await;
    let TurnOutcome::Failed(why) = outcome(&events) else {
        panic!("{events:?}");
    };
    assert!(
        why.starts_with("steering message, line 2 (`usage 1`)"),
        "{why}"
    );
    assert!(events.contains(&text_events(&turn, 4, ItemKind::AgentMessage, "ok")[1]));
}

/// Whatever the race between a steer and the end of the turn, an accepted
/// steer is always run and a refused one never is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_steer_is_never_lost() {
    let dir = tempfile::tempdir().expect("temp dir");
    let spec = spec(&dir);
    let adapter = ScriptedAdapter::new();
    adapter.create_thread(&spec).await.expect("create_thread");
    for tag in 0..200u64 {
        let mut turn = sdk_adapter::testing::start(&adapter, &spec, "say a\nsay b").await;
        let control = turn.control.clone();
        // Vary how long the steer lags behind, to hit every stage of the turn.
        let steer = tokio::spawn(async move {
            for _ in 0..tag % 16 {
                tokio::task::yield_now().await;
            }
            control.steer("say steered".into(), tag).await
        });
        let events = rest(&mut turn).await;
        let accepted = steer.await.expect("steer task");
        let steered = events.contains(&TurnEvent::Steered { tag });
        match accepted {
            Ok(()) => {
                assert!(steered, "accepted but not run: {events:?}");
                assert_eq!(outcome(&events), TurnOutcome::Completed);
            }
            Err(SteerError::TurnEnded) => assert!(!steered, "refused but run"),
            Err(other) => panic!("{other}"),
        }
    }
}

#[tokio::test]
async fn describe_advertises_both_models() {
    let adapter = ScriptedAdapter::new();
    assert_eq!(adapter.name(), "scripted");
    let description = adapter.describe().await;
    assert_eq!(description.name, "scripted");
    assert_eq!(description.status, SdkStatus::Ready);
    assert_eq!(description.error_message, None);
    assert_eq!(description.models.len(), 2);
    assert_eq!(description.models[0].name, "scripted-fast");
    assert_eq!(description.models[0].reasoning_levels, vec!["low", "high"]);
    assert_eq!(description.models[1].name, "scripted-slow");
    assert!(description.models[1].reasoning_levels.is_empty());
}

#[tokio::test]
async fn create_thread_checks_model_and_level() {
    let dir = tempfile::tempdir().expect("temp dir");
    let adapter = ScriptedAdapter::new();
    let good = spec(&dir);

    let invalid = |result: Result<_, SdkError>, needle: &str| match result {
        Err(SdkError::InvalidRequest(why)) => assert!(why.contains(needle), "{why}"),
        other => panic!("expected InvalidRequest naming {needle}, got {other:?}"),
    };
    invalid(
        adapter
            .create_thread(&ThreadSpec {
                model: "gpt-9".into(),
                ..good.clone()
            })
            .await,
        "gpt-9",
    );
    invalid(
        adapter
            .create_thread(&ThreadSpec {
                reasoning_level: Some("medium".into()),
                ..good.clone()
            })
            .await,
        "medium",
    );
    invalid(
        adapter
            .create_thread(&ThreadSpec {
                model: "scripted-slow".into(),
                reasoning_level: Some("low".into()),
                ..good.clone()
            })
            .await,
        "low",
    );
    // The sandbox made the workspace; a rejected thread puts nothing in it.
    assert!(
        std::fs::read_dir(&good.workspace).unwrap().next().is_none(),
        "a rejected thread creates nothing"
    );

    let first = adapter.create_thread(&good).await.expect("create");
    assert!(good.workspace.is_dir());
    let slow = ThreadSpec {
        model: "scripted-slow".into(),
        reasoning_level: None,
        ..good.clone()
    };
    let second = adapter.create_thread(&slow).await.expect("create slow");
    assert_ne!(first, second, "fresh ids");
    let reopened = adapter
        .create_thread(&ThreadSpec {
            sdk_thread_id: Some(first.sdk_thread_id.clone()),
            ..good.clone()
        })
        .await
        .expect("re-open");
    assert_eq!(reopened, first);

    adapter.delete_thread(&good).await.expect("delete_thread");
    assert!(
        good.workspace.is_dir(),
        "the runner core owns the directory"
    );
}

#[tokio::test]
async fn start_turn_checks_overrides() {
    let (_dir, spec, _turn) = start("").await;
    let adapter = ScriptedAdapter::new();
    // The runner resolves overrides; the adapter still refuses a final
    // model or level it does not run.
    let with = |model: Option<&str>, level: Option<&str>| TurnInput {
        text: "say hi".into(),
        model: model.unwrap_or(&spec.model).into(),
        reasoning_level: level.map(Into::into),
    };
    let rejected = |result: Result<Turn, SdkError>| {
        assert!(
            matches!(result, Err(SdkError::InvalidRequest(_))),
            "accepted"
        );
    };
    rejected(adapter.start_turn(&spec, with(Some("nope"), None)).await);
    rejected(adapter.start_turn(&spec, with(None, Some("max"))).await);
    rejected(
        adapter
            .start_turn(&spec, with(Some("scripted-slow"), Some("high")))
            .await,
    );
    let mut turn = adapter
        .start_turn(&spec, with(Some("scripted-slow"), None))
        .await
        .expect("override model");
    assert_eq!(outcome(&rest(&mut turn).await), TurnOutcome::Completed);
    let mut turn = adapter
        .start_turn(&spec, with(None, Some("high")))
        .await
        .expect("override level");
    assert_eq!(outcome(&rest(&mut turn).await), TurnOutcome::Completed);
}

#[tokio::test]
async fn agents_are_trivial() {
    let dir = tempfile::tempdir().expect("temp dir");
    let adapter = ScriptedAdapter::new();
    let agent = sdk_adapter::AgentSpec {
        agent_id: "a".into(),
        home: dir.path().join("home"),
    };
    adapter.create_agent(&agent).await.expect("create");
    adapter.create_agent(&agent).await.expect("create again");
    adapter.delete_agent("a").await.expect("delete");
    adapter
        .delete_agent("unknown")
        .await
        .expect("delete unknown");
}

#[tokio::test]
async fn a_missing_workspace_fails_the_run_step_clearly() {
    let (dir, spec, _turn) = start("").await;
    std::fs::remove_dir(&spec.workspace).expect("remove workspace");
    let mut turn = ScriptedAdapter::new()
        .start_turn(&spec, input(&spec, "say a\nrun true"))
        .await
        .expect("start");
    let events = rest(&mut turn).await;
    let TurnOutcome::Failed(why) = outcome(&events) else {
        panic!("{events:?}");
    };
    assert!(why.contains("could not start `true`"), "{why}");
    drop(dir);
}
