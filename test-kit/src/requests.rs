//! Talking to a runner through the mock control plane: the requests, sending
//! them, and waiting for (and reading) what the runner sends back.

use std::collections::HashMap;
use std::time::Duration;

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use mock_control_plane::MockControlPlane;

use crate::runner::WAIT;

/// `CreateAgentRequest` of `agent` on `sdk`.
pub fn create_agent_request(agent: &str, sdk: &str) -> Request {
    Request::CreateAgentRequest(CreateAgentRequest {
        agent_id: agent.into(),
        agent_sdk: sdk.into(),
    })
}

/// `CreateThreadRequest` of `agent` on `model`.
pub fn create_thread_request(agent: &str, model: &str) -> Request {
    Request::CreateThreadRequest(CreateThreadRequest {
        agent_id: agent.into(),
        model: model.into(),
        reasoning_level: None,
        ..Default::default()
    })
}

/// `CreateUserMessageRequest` of `text` on `thread` of `agent`.
pub fn user_message(agent: &str, thread: &str, text: &str, allow_steer: bool) -> Request {
    Request::CreateUserMessageRequest(CreateUserMessageRequest {
        agent_id: agent.into(),
        thread_id: thread.into(),
        text: text.into(),
        allow_steer,
        model: None,
        model_reasoning_level: None,
    })
}

/// A message's payload.
pub fn payload(m: &ClientMessage) -> Option<&Payload> {
    m.payload.as_ref()
}

/// Whether `m` answers request `rid`.
pub fn rid_is(m: &ClientMessage, rid: &str) -> bool {
    m.request_id.as_deref() == Some(rid)
}

/// Sends `request` as `rid`.
pub async fn send(cp: &MockControlPlane, rid: &str, request: Request) {
    cp.send_request(rid, request).await.expect("send");
}

/// The first message answering `rid`.
pub async fn reply(cp: &MockControlPlane, rid: &str) -> ClientMessage {
    let rid = rid.to_owned();
    cp.wait_for(move |m| rid_is(m, &rid), WAIT)
        .await
        .expect("a reply")
}

/// The text of a `RequestError`.
pub fn error_text(m: &ClientMessage) -> Option<&str> {
    match payload(m) {
        Some(Payload::RequestError(e)) => Some(&e.error_message),
        _ => None,
    }
}

/// The `RequestError` answering `rid` (panics on any other reply).
pub async fn expect_error(cp: &MockControlPlane, rid: &str) -> String {
    let m = reply(cp, rid).await;
    error_text(&m)
        .unwrap_or_else(|| panic!("expected a RequestError for {rid}, got {m:?}"))
        .to_owned()
}

/// Create agent `agent` on the scripted SDK; checks it is READY.
pub async fn create_agent(cp: &MockControlPlane, agent: &str) {
    create_sdk_agent(cp, agent, "scripted").await;
}

/// Create agent `agent` on `sdk`; checks it is READY.
pub async fn create_sdk_agent(cp: &MockControlPlane, agent: &str, sdk: &str) {
    let rid = format!("ca-{agent}");
    send(cp, &rid, create_agent_request(agent, sdk)).await;
    let m = reply(cp, &rid).await;
    assert!(
        matches!(payload(&m), Some(Payload::AgentUpdate(u)) if u.status == AgentStatus::Ready as i32),
        "{m:?}"
    );
}

/// Create a thread (model scripted-fast) and return its id.
pub async fn create_thread(cp: &MockControlPlane, agent: &str, rid: &str) -> String {
    try_create_thread(cp, agent, rid, "scripted-fast", WAIT)
        .await
        .unwrap_or_else(|m| panic!("expected ThreadUpdate READY, got {m:?}"))
}

/// Create a thread of `agent` on `model`, its reply awaited at most `wait`;
/// its id, or the reply when that is not a ThreadUpdate READY.
pub async fn try_create_thread(
    cp: &MockControlPlane,
    agent: &str,
    rid: &str,
    model: &str,
    wait: Duration,
) -> Result<String, ClientMessage> {
    send(cp, rid, create_thread_request(agent, model)).await;
    let r = rid.to_owned();
    let m = cp
        .wait_for(move |m| rid_is(m, &r), wait)
        .await
        .expect("a reply");
    match payload(&m) {
        Some(Payload::ThreadUpdate(u)) if u.status == ThreadStatus::Ready as i32 => {
            Ok(u.thread_id.clone())
        }
        _ => Err(m),
    }
}

/// Whether `m` is a TurnUpdate in `status`.
pub fn is_turn(m: &ClientMessage, status: TurnStatus) -> bool {
    matches!(payload(m), Some(Payload::TurnUpdate(t)) if t.status == status as i32)
}

/// Wait for the TurnUpdate COMPLETED of the turn started by `rid`.
pub async fn turn_completed(cp: &MockControlPlane, rid: &str) -> ClientMessage {
    let rid = rid.to_owned();
    cp.wait_for(
        move |m| rid_is(m, &rid) && is_turn(m, TurnStatus::Completed),
        WAIT,
    )
    .await
    .expect("turn completes")
}

/// Send a user message and wait until its turn runs; the TurnUpdate.
pub async fn start_turn(
    cp: &MockControlPlane,
    rid: &str,
    agent: &str,
    thread: &str,
    script: &str,
) -> ClientMessage {
    send(cp, rid, user_message(agent, thread, script, false)).await;
    let r = rid.to_owned();
    cp.wait_for(
        move |m| rid_is(m, &r) && is_turn(m, TurnStatus::Running),
        WAIT,
    )
    .await
    .expect("turn starts")
}

/// Every message carrying `rid`, in arrival order.
pub fn replies(cp: &MockControlPlane, rid: &str) -> Vec<ClientMessage> {
    cp.received()
        .into_iter()
        .filter(|m| rid_is(m, rid))
        .collect()
}

/// Every message per request id, in arrival order (one pass over the log).
pub fn by_rid(cp: &MockControlPlane) -> HashMap<String, Vec<ClientMessage>> {
    let mut map: HashMap<String, Vec<ClientMessage>> = HashMap::new();
    for m in cp.received() {
        if let Some(rid) = &m.request_id {
            map.entry(rid.clone()).or_default().push(m);
        }
    }
    map
}

/// The item updates among `msgs`, as (item type, status, text).
pub fn items(msgs: &[ClientMessage]) -> Vec<(ItemType, ItemStatus, Option<String>)> {
    msgs.iter()
        .filter_map(|m| match payload(m) {
            Some(Payload::ItemUpdate(i)) => Some((
                ItemType::try_from(i.item_type).unwrap_or(ItemType::Unknown),
                ItemStatus::try_from(i.status).unwrap_or(ItemStatus::Unknown),
                i.text.clone(),
            )),
            _ => None,
        })
        .collect()
}

/// A script that sleeps `ms` and then says `s0`, `s1`, … (`count` items).
pub fn sleep_then_says(ms: u64, count: usize) -> String {
    std::iter::once(format!("sleep {ms}\n"))
        .chain((0..count).map(|i| format!("say s{i}\n")))
        .collect()
}

/// No item among `msgs` has the text `text`.
pub fn assert_no_item_says(msgs: &[ClientMessage], text: &str) {
    let items = items(msgs);
    assert!(
        !items.iter().any(|(_, _, t)| t.as_deref() == Some(text)),
        "{items:#?}"
    );
}

/// The texts of the COMPLETED agent messages among `msgs`, in order.
pub fn said(msgs: &[ClientMessage]) -> Vec<String> {
    items(msgs)
        .into_iter()
        .filter(|(k, s, _)| *k == ItemType::AgentMessage && *s == ItemStatus::Completed)
        .filter_map(|(_, _, t)| t)
        .collect()
}

/// Every item text among `msgs` (any kind, any status).
pub fn texts(msgs: &[ClientMessage]) -> Vec<String> {
    items(msgs).into_iter().filter_map(|(_, _, t)| t).collect()
}

/// The COMPLETED command executions among `msgs`, in order.
pub fn completed_commands(msgs: &[ClientMessage]) -> Vec<CommandExecutionItem> {
    msgs.iter()
        .filter_map(|m| match payload(m) {
            Some(Payload::ItemUpdate(i))
                if i.status == ItemStatus::Completed as i32
                    && i.item_type == ItemType::CommandExecution as i32 =>
            {
                i.command_execution_item.clone()
            }
            _ => None,
        })
        .collect()
}

/// The outputs of the COMPLETED command executions among `msgs`, in order.
pub fn command_outputs(msgs: &[ClientMessage]) -> Vec<String> {
    completed_commands(msgs)
        .into_iter()
        .filter_map(|c| c.output)
        .collect()
}

/// Every token-usage update among `msgs`, in order.
pub fn token_usages(msgs: &[ClientMessage]) -> Vec<ThreadTokenUsageUpdate> {
    msgs.iter()
        .filter_map(|m| match payload(m) {
            Some(Payload::ThreadTokenUsageUpdate(u)) => Some(u.clone()),
            _ => None,
        })
        .collect()
}

/// Waits until the runner has told the control plane what `sdk` is: at
/// registration, or — when registration said it was still being probed
/// (registration does not wait for slow probes, such as codex's) — in the
/// probe's `agent_sdk_update`.
pub async fn sdk_probed(cp: &MockControlPlane, sdk: &str) {
    let registered = cp
        .registrations()
        .first()
        .and_then(|r| r.request.agent_sdks.iter().find(|s| s.name == sdk).cloned());
    let probing = registered
        .as_ref()
        .and_then(|s| s.error_message.as_deref())
        .is_some_and(|m| m.contains("being probed"));
    if !probing {
        return;
    }
    let name = sdk.to_owned();
    cp.wait_for(
        move |m| matches!(payload(m), Some(Payload::AgentSdkUpdate(s)) if s.name == name),
        WAIT,
    )
    .await
    .expect("the probe's agent_sdk_update");
}

/// One step of a turn as the control plane sees it, for comparing shapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A TurnUpdate in this status.
    Turn(i32),
    /// An ItemUpdate of item number `.0` (from its `-item-N` id) in status `.1`.
    Item(u32, i32),
    /// A RequestError.
    Error(String),
    /// Anything else.
    Other,
}

/// `m` as a [`Step`].
pub fn step(m: &ClientMessage) -> Step {
    match payload(m) {
        Some(Payload::TurnUpdate(t)) => Step::Turn(t.status),
        Some(Payload::ItemUpdate(i)) => {
            let n = i
                .sdk_item_id
                .rsplit("-item-")
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            Step::Item(n, i.status)
        }
        Some(Payload::RequestError(e)) => Step::Error(e.error_message.clone()),
        _ => Step::Other,
    }
}

/// What a turn of `items` items (the user message included) must look like:
/// RUNNING, each item RUNNING then COMPLETED, COMPLETED.
pub fn expected_shape(items: u32) -> Vec<Step> {
    let mut v = vec![Step::Turn(TurnStatus::Running as i32)];
    for n in 1..=items {
        v.push(Step::Item(n, ItemStatus::Running as i32));
        v.push(Step::Item(n, ItemStatus::Completed as i32));
    }
    v.push(Step::Turn(TurnStatus::Completed as i32));
    v
}
