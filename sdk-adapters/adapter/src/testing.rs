//! Test support for the adapter suites (scripted, codex, claude-code and
//! the process plumbing), not for production: reading a [`Turn`]'s events
//! with a generous timeout, picking items out of them, and checking that
//! processes are gone.
//!
//! Only compiled with the `testing` feature, which the suites enable through
//! their dev-dependencies; normal builds never see it. Timings here are only
//! ever bounded generously from above.

use std::time::Duration;

use tokio::time::Instant;

use crate::{ItemEvent, ItemKind, ItemStatus, Turn, TurnEvent, TurnOutcome};

/// Upper bound for anything that should be quick.
pub const PATIENCE: Duration = Duration::from_secs(30);

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
pub async fn rest(turn: &mut Turn) -> Vec<TurnEvent> {
    let mut events = Vec::new();
    loop {
        let event = next(turn, &events).await;
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
            TurnEvent::Item(item) if item.status == status => Some(item.clone()),
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
