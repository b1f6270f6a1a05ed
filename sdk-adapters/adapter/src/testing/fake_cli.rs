//! Scenarios the suites of the adapters over an agent CLI share. Their fake
//! CLIs (`fake-codex`, `fake-claude`) understand the same script words in a
//! user message (`say WORD`, `wait`, `stall`, `crash`, …), so what a turn
//! must do with them is checked here once; each suite adds what only its
//! SDK shows (its log, its command lines).

use super::{done, outcome, refuses_late_steers, rest, run, said, start, texts, until, wait_dead};
use crate::{ItemKind, SdkAdapter, ThreadSpec, TurnEvent, TurnOutcome};

/// Runs `say WORD`; checks the turn completed saying just `word`.
pub async fn says(adapter: &dyn SdkAdapter, spec: &ThreadSpec, word: &str) {
    let events = run(adapter, spec, &format!("say {word}")).await;
    assert_eq!(outcome(&events), TurnOutcome::Completed, "{events:#?}");
    assert_eq!(texts(&events, ItemKind::AgentMessage), [word]);
}

/// Steers a turn running `wait\nsay after` with `text` (tag `tag`) once its
/// user message completed. Checks the steer joined the turn before its echo
/// (`steered: TEXT`), became the turn's one user item, the turn completed,
/// and a steer after the end is refused.
pub async fn steers_a_waiting_turn(
    adapter: &dyn SdkAdapter,
    spec: &ThreadSpec,
    text: &str,
    tag: u64,
) {
    let mut turn = start(adapter, spec, "wait\nsay after").await;
    until(&mut turn, done(ItemKind::UserMessage)).await;
    turn.control.steer(text.into(), tag).await.expect("steer");
    let events = rest(&mut turn).await;
    assert_eq!(outcome(&events), TurnOutcome::Completed, "{events:#?}");
    let echo = format!("steered: {text}");
    let steered = events
        .iter()
        .position(|e| *e == TurnEvent::Steered { tag })
        .expect("Steered");
    let echoed = events.iter().position(said(&echo)).expect("the steer ran");
    assert!(steered < echoed, "{events:#?}");
    assert_eq!(
        texts(&events, ItemKind::UserMessage),
        [text],
        "the steering message is its own user item"
    );
    assert_eq!(
        texts(&events, ItemKind::AgentMessage),
        [echo.as_str(), "after"]
    );
    refuses_late_steers(&turn).await;
}

/// Interrupts (twice) a turn running `wait` once its user message
/// completed. Checks it ended Interrupted, refuses a late steer, and the
/// thread takes the next turn.
pub async fn interrupts_a_waiting_turn(adapter: &dyn SdkAdapter, spec: &ThreadSpec) {
    let mut turn = start(adapter, spec, "wait").await;
    until(&mut turn, done(ItemKind::UserMessage)).await;
    turn.control.interrupt();
    turn.control.interrupt();
    let events = rest(&mut turn).await;
    assert_eq!(outcome(&events), TurnOutcome::Interrupted, "{events:#?}");
    refuses_late_steers(&turn).await;
    says(adapter, spec, "next").await;
}

/// Interrupts a turn running `stall` (which ignores interrupts) once it
/// said `stalling`. Checks it ended Interrupted, the process `pid` names
/// (asked once the turn runs) is killed, and the thread takes the next turn.
pub async fn kills_a_stalled_turn(
    adapter: &dyn SdkAdapter,
    spec: &ThreadSpec,
    pid: impl FnOnce() -> i32,
) {
    let mut turn = start(adapter, spec, "stall").await;
    until(&mut turn, said("stalling")).await;
    let pid = pid();
    turn.control.interrupt();
    let events = rest(&mut turn).await;
    assert_eq!(outcome(&events), TurnOutcome::Interrupted, "{events:#?}");
    wait_dead(pid).await;
    says(adapter, spec, "back").await;
}

/// Runs `script`, which ends in `crash`; checks the turn failed with the
/// exit status and the CLI's last words. Its events.
pub async fn crashes(adapter: &dyn SdkAdapter, spec: &ThreadSpec, script: &str) -> Vec<TurnEvent> {
    let events = run(adapter, spec, script).await;
    let TurnOutcome::Failed(why) = outcome(&events) else {
        panic!("expected a failure: {events:#?}");
    };
    assert!(why.contains("exit status 3"), "{why}");
    assert!(why.contains("crashing on purpose"), "{why}");
    events
}

/// Re-opens the thread of `spec` (created before, on another adapter) on
/// `adapter`, as a restarted runner does; checks it keeps its SDK id.
pub async fn reopens(adapter: &dyn SdkAdapter, spec: &ThreadSpec) {
    let handle = adapter.create_thread(spec).await.expect("re-open");
    assert_eq!(Some(handle.sdk_thread_id), spec.sdk_thread_id);
}

/// A turn overriding the thread's model with `model` (and no reasoning
/// level); checks it completed.
pub async fn runs_on_model(adapter: &dyn SdkAdapter, spec: &ThreadSpec, text: &str, model: &str) {
    let mut turn = adapter
        .start_turn(
            spec,
            crate::TurnInput {
                text: text.into(),
                model: model.into(),
                reasoning_level: None,
            },
        )
        .await
        .expect("start_turn");
    assert_eq!(outcome(&rest(&mut turn).await), TurnOutcome::Completed);
}
