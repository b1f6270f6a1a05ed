//! What the end-to-end tests of the real SDKs (`codex`, `code-agent`)
//! share: waiting for the runner to register an SDK, running one user
//! message on it as agent `a`, and reading the turn's command back. Every
//! failure shows the runner's log, since these SDKs fail in many ways.

use std::time::Duration;

use agent_runner_proto::runner::*;
use mock_control_plane::MockControlPlane;

use crate::support::*;

/// Waits (at most `wait`) for `runner` to register, and checks it
/// advertised `name` READY — at registration, or in the `agent_sdk_update`
/// of a probe that answered after it (registration does not wait for
/// slow probes); that SDK.
pub async fn ready_sdk(
    cp: &MockControlPlane,
    runner: &RunnerProc,
    name: &str,
    wait: Duration,
) -> AgentSdk {
    cp.wait_connected(wait)
        .await
        .unwrap_or_else(|e| panic!("runner connects: {e:?}\n{}", runner.logs()));
    let registration = cp.registrations().remove(0).request;
    let sdk = registration
        .agent_sdks
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{name} advertised\n{}", runner.logs()));
    let sdk = if sdk.status == AgentSdkStatus::Ready as i32 {
        sdk
    } else {
        let wanted = name.to_owned();
        let m = cp
            .wait_for(
                move |m| {
                    matches!(&m.payload, Some(client_message::Payload::AgentSdkUpdate(s)) if s.name == wanted)
                },
                wait,
            )
            .await
            .unwrap_or_else(|e| panic!("{name} probed: {e:?}\n{}", runner.logs()));
        match m.payload {
            Some(client_message::Payload::AgentSdkUpdate(s)) => s,
            _ => unreachable!(),
        }
    };
    assert_eq!(
        sdk.status,
        AgentSdkStatus::Ready as i32,
        "{sdk:?}\n{}",
        runner.logs()
    );
    sdk
}

/// Creates agent `a` on `sdk` and a thread on `model`, and runs `text` as
/// one turn (request `m1`) to COMPLETED, each step awaited at most `wait`.
/// Checks the turn had no RequestError and its user message became a
/// COMPLETED item; the thread and every message answering `m1`.
pub async fn sdk_turn(
    cp: &MockControlPlane,
    runner: &RunnerProc,
    (sdk, model): (&str, &str),
    text: &str,
    wait: Duration,
) -> (String, Vec<ClientMessage>) {
    create_sdk_agent(cp, "a", sdk).await;
    let thread = try_create_thread(cp, "a", "ct", model, wait)
        .await
        .unwrap_or_else(|m| panic!("expected ThreadUpdate READY, got {m:?}\n{}", runner.logs()));
    send(cp, "m1", user_message("a", &thread, text, false)).await;
    cp.wait_for(
        |m| rid_is(m, "m1") && is_turn(m, TurnStatus::Completed),
        wait,
    )
    .await
    .unwrap_or_else(|e| panic!("turn completes: {e:?}\n{}", runner.logs()));
    let msgs = replies(cp, "m1");
    assert!(
        !msgs.iter().any(|m| error_text(m).is_some()),
        "no RequestError: {msgs:#?}"
    );
    let items = items(&msgs);
    assert!(
        items.contains(&(
            ItemType::UserMessage,
            ItemStatus::Completed,
            Some(text.into())
        )),
        "{items:#?}"
    );
    (thread, msgs)
}

/// The first COMPLETED command execution among `msgs`; panics (showing
/// them and the runner's log) if none.
pub fn first_command(msgs: &[ClientMessage], runner: &RunnerProc) -> CommandExecutionItem {
    completed_commands(msgs)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("a completed command item in {msgs:#?}\n{}", runner.logs()))
}

/// `file` in the workspace of `thread` of agent `a` holds exactly `want`.
pub fn assert_workspace_file(runner: &RunnerProc, thread: &str, file: &str, want: &str) {
    let path = runner.thread_workspace("a", thread).join(file);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap_or_default(),
        want,
        "{}",
        path.display()
    );
}
