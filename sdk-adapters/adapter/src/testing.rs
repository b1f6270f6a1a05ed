//! Test support for the adapter suites (scripted, codex, claude-code,
//! code-agent and the process plumbing), not for production: the thread and
//! turn fixtures every suite builds, reading a [`Turn`]'s events with a
//! generous timeout, picking items out of them, and checking that processes
//! are gone.
//!
//! Only compiled with the `testing` feature, which the suites enable through
//! their dev-dependencies; normal builds never see it. Timings here are only
//! ever bounded generously from above.

// Test support: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod cached_install;
pub mod fake_cli;
pub mod race;

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use crate::launcher::{Launcher, LauncherConfig, Mode, ThreadSpec as SandboxSpec};
use crate::{
    CommandInfo, ItemEvent, ItemKind, ItemStatus, SdkAdapter, SteerError, ThreadSpec, TokenUsage,
    Turn, TurnEvent, TurnInput, TurnOutcome,
};

/// Upper bound for anything that should be quick.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Thread `thread` of agent `agent` on `model` (reasoning level `low`), its
/// workspace `workspace` under `dir`: what a suite's tests start from and
/// adjust with struct update syntax.
pub fn thread_spec(dir: &Path, model: &str) -> ThreadSpec {
    ThreadSpec {
        agent_id: "agent".into(),
        thread_id: "thread".into(),
        workspace: dir.join("workspace"),
        model: model.into(),
        reasoning_level: Some("low".into()),
        sdk_thread_id: None,
        env: Vec::new(),
        sandbox: sandbox(&dir.join("workspace")),
        instructions: None,
        mcp_servers: Default::default(),
    }
}

/// A sandbox for `workspace` (created if missing) in mode `off` without
/// cgroups: the launcher's environment allowlist, own session and tracking
/// tag, but no Landlock (the suites' fake CLIs live in `target/`). HOME and
/// TMPDIR are `<workspace>.home` and `<workspace>.tmp`.
pub fn sandbox(workspace: &Path) -> crate::Sandbox {
    sandbox_in_mode(workspace, Mode::Off)
}

/// One mode-`off` sandbox shared by a whole test binary, for children that
/// belong to no particular thread (its workspace lives in a temporary
/// directory kept for the life of the process; a static is never dropped,
/// so each binary first removes those of test processes no longer alive).
pub fn shared_sandbox() -> std::sync::Arc<crate::launcher::ThreadSandbox> {
    static SHARED: std::sync::OnceLock<(std::path::PathBuf, crate::Sandbox)> =
        std::sync::OnceLock::new();
    let (_, sandbox) = SHARED.get_or_init(|| {
        remove_dead_shared_dirs();
        let dir = std::env::temp_dir().join(format!(
            "adapter-tests-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        ));
        let ws = dir.join("workspace");
        (dir, sandbox(&ws))
    });
    sandbox.get().unwrap().clone()
}

/// Removes `adapter-tests-PID-*` directories left in the temporary directory
/// by test processes that have ended.
fn remove_dead_shared_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("adapter-tests-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// As [`sandbox`], in `mode`.
pub fn sandbox_in_mode(workspace: &Path, mode: Mode) -> crate::Sandbox {
    std::fs::create_dir_all(workspace).unwrap();
    let config = LauncherConfig {
        cgroups: false,
        ..LauncherConfig::new(mode, "adapter-tests")
    };
    let launcher = Launcher::new(config).unwrap();
    let sandbox = launcher
        .thread(SandboxSpec {
            workspace: workspace.to_path_buf(),
            home_dir: workspace.with_extension("home"),
            tmp_dir: workspace.with_extension("tmp"),
            ..SandboxSpec::default()
        })
        .unwrap();
    crate::Sandbox::ready(std::sync::Arc::new(sandbox))
}

/// A user message `text` on the thread's own model and reasoning level.
pub fn input(spec: &ThreadSpec, text: &str) -> TurnInput {
    TurnInput {
        text: text.into(),
        model: spec.model.clone(),
        reasoning_level: spec.reasoning_level.clone(),
    }
}

/// Creates the thread on `adapter`; its spec as the runner keeps it (with
/// the SDK's thread id).
pub async fn create(adapter: &dyn SdkAdapter, mut spec: ThreadSpec) -> ThreadSpec {
    let handle = adapter.create_thread(&spec).await.expect("create_thread");
    spec.sdk_thread_id = Some(handle.sdk_thread_id);
    spec
}

/// Starts a turn with the user message `text`.
pub async fn start(adapter: &dyn SdkAdapter, spec: &ThreadSpec, text: &str) -> Turn {
    adapter
        .start_turn(spec, input(spec, text))
        .await
        .expect("start_turn")
}

/// Runs a turn with the user message `text` to its end; its events.
pub async fn run(adapter: &dyn SdkAdapter, spec: &ThreadSpec, text: &str) -> Vec<TurnEvent> {
    rest(&mut start(adapter, spec, text).await).await
}

/// The next event of `turn`; panics (showing `seen`, the events so far) if
/// none comes within [`PATIENCE`] or the stream ends.
pub async fn next(turn: &mut Turn, seen: &[TurnEvent]) -> TurnEvent {
    match tokio::time::timeout(PATIENCE, turn.events.recv()).await {
        Ok(Some(event)) => event,
        Ok(None) => panic!("the stream ended before Finished; seen: {seen:#?}"),
        Err(_) => panic!("no event in time; seen: {seen:#?}"),
    }
}

/// Events up to and including `Finished`; checks the stream ends after it.
/// An approval request is denied at once, as a runner without anyone to
/// ask denies it.
pub async fn rest(turn: &mut Turn) -> Vec<TurnEvent> {
    let mut events = Vec::new();
    loop {
        let event = next(turn, &events).await;
        if let TurnEvent::Approval(asked) = &event {
            asked
                .reply
                .send(crate::ApprovalAnswer::deny("nobody is there to approve it"));
        }
        let done = matches!(event, TurnEvent::Finished(_));
        events.push(event);
        if done {
            break;
        }
    }
    let end = tokio::time::timeout(PATIENCE, turn.events.recv())
        .await
        .expect("the stream ends after Finished");
    assert_eq!(end, None, "nothing may follow Finished");
    events
}

/// Skip events until `pred` matches one; returns the skipped ones and it.
pub async fn until(turn: &mut Turn, pred: impl Fn(&TurnEvent) -> bool) -> Vec<TurnEvent> {
    let mut seen = Vec::new();
    loop {
        let event = next(turn, &seen).await;
        let hit = pred(&event);
        seen.push(event);
        if hit {
            return seen;
        }
    }
}

/// A turn refuses a steer (a valid script line) once it has ended.
pub async fn refuses_late_steers(turn: &Turn) {
    let late = turn.control.steer("say late".into(), u64::MAX).await;
    assert!(matches!(late, Err(SteerError::TurnEnded)), "{late:?}");
}

/// Matches a COMPLETED item of `kind`.
pub fn done(kind: ItemKind) -> impl Fn(&TurnEvent) -> bool {
    move |e| matches!(e, TurnEvent::Item(i) if i.kind == kind && i.status == ItemStatus::Completed)
}

/// Matches a COMPLETED item whose text is exactly `text`.
pub fn said(text: &str) -> impl Fn(&TurnEvent) -> bool {
    move |e| matches!(e, TurnEvent::Item(i) if i.text.as_deref() == Some(text) && i.status == ItemStatus::Completed)
}

/// The outcome in the last event, which must be `Finished`.
pub fn outcome(events: &[TurnEvent]) -> TurnOutcome {
    match events.last() {
        Some(TurnEvent::Finished(outcome)) => outcome.clone(),
        other => panic!("last event is not Finished: {other:?}"),
    }
}

/// Every item update with `status`, in order.
pub fn items(events: &[TurnEvent], status: ItemStatus) -> Vec<ItemEvent> {
    events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::Item(item) if item.status == status => Some((**item).clone()),
            _ => None,
        })
        .collect()
}

/// Every COMPLETED item, in order.
pub fn completed(events: &[TurnEvent]) -> Vec<ItemEvent> {
    items(events, ItemStatus::Completed)
}

/// The texts of the COMPLETED items of `kind`, in order (empty for none).
pub fn texts(events: &[TurnEvent], kind: ItemKind) -> Vec<String> {
    completed(events)
        .into_iter()
        .filter(|i| i.kind == kind)
        .map(|i| i.text.unwrap_or_default())
        .collect()
}

/// The first COMPLETED item of `kind`; panics (showing `events`) if none.
pub fn completed_of(events: &[TurnEvent], kind: ItemKind) -> ItemEvent {
    completed(events)
        .into_iter()
        .find(|i| i.kind == kind)
        .unwrap_or_else(|| panic!("no completed {kind:?} in {events:#?}"))
}

/// The command of the first COMPLETED item that has one; panics (showing
/// `events`) if none.
pub fn completed_command(events: &[TurnEvent]) -> CommandInfo {
    completed(events)
        .into_iter()
        .find_map(|i| i.command)
        .unwrap_or_else(|| panic!("no completed command in {events:#?}"))
}

/// Every update of one item, in order.
pub fn updates_of(events: &[TurnEvent], item_id: &str) -> Vec<ItemEvent> {
    events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::Item(i) if i.item_id == item_id => Some((**i).clone()),
            _ => None,
        })
        .collect()
}

/// Every item is reported RUNNING first, COMPLETED once, and COMPLETED last.
pub fn check_item_lifecycles(events: &[TurnEvent]) {
    let mut ids: Vec<&str> = Vec::new();
    for e in events {
        if let TurnEvent::Item(i) = e
            && !ids.contains(&i.item_id.as_str())
        {
            ids.push(&i.item_id);
        }
    }
    for id in ids {
        let updates = updates_of(events, id);
        assert_eq!(updates[0].status, ItemStatus::Running, "{updates:#?}");
        let done = updates
            .iter()
            .filter(|u| u.status == ItemStatus::Completed)
            .count();
        assert_eq!(done, 1, "{updates:#?}");
        assert_eq!(
            updates.last().map(|u| u.status),
            Some(ItemStatus::Completed),
            "{updates:#?}"
        );
    }
}

/// Every token-usage report, in order.
pub fn usages(events: &[TurnEvent]) -> Vec<TokenUsage> {
    events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::Usage(u) => Some(**u),
            _ => None,
        })
        .collect()
}

/// The first token-usage report; panics (showing `events`) if none.
pub fn usage(events: &[TurnEvent]) -> TokenUsage {
    usages(events)
        .first()
        .copied()
        .unwrap_or_else(|| panic!("no usage in {events:#?}"))
}

/// Alive and not a zombie (a killed orphan may linger as a zombie when
/// nothing reaps it, e.g. in a container without an init).
pub fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_none_or(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// Waits (at most [`PATIENCE`]) until `pid` is not [`alive`].
pub async fn wait_dead(pid: i32) {
    wait_until_dead(&[pid]).await;
}

/// Waits (at most [`PATIENCE`]) until none of `pids` is [`alive`].
pub async fn wait_until_dead(pids: &[i32]) {
    let deadline = Instant::now() + PATIENCE;
    while pids.iter().any(|&pid| alive(pid)) {
        assert!(
            Instant::now() < deadline,
            "still alive: {:?}",
            pids.iter().filter(|&&pid| alive(pid)).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
