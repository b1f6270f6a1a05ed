//! The engine's human-in-the-loop confirmations, asked through the runner.
//!
//! With tools chosen to need approval ([`CodeAgentConfig::approve_tools`]),
//! each session gets a confirmation policy listing them
//! ([`policy`]): the engine then stops before such a call and publishes a
//! `CONFIRMATION_REQUIRED` event. A turn subscribes to its session's
//! confirmation events before it starts generating ([`subscribe`]), turns
//! each into an [`ApprovalAsk`] ([`ask_for`]: `bash` is a command with the
//! workspace as cwd, `write`/`edit` a file change with its path, any other
//! tool a permission), and once the runner answered sends the decision
//! back with `ConfirmToolExecution` ([`confirm`]): approved or not, with a
//! denial's message as the reason the agent reads. "Approve for the
//! thread" is remembered by the runner (it answers later identical asks
//! itself); cancelling the turn is a rejection here and an interrupt by
//! the runner. The engine's own timeout is set past the runner's, so the
//! runner's timeout (a denial) decides.
//!
//! [`CodeAgentConfig::approve_tools`]: crate::CodeAgentConfig::approve_tools

use std::time::Duration;

use code_agent_proto::{
    AgentEvent, ConfirmToolExecutionRequest, ConfirmationPolicy, SetConfirmationPolicyRequest,
    SubscribeEventsRequest, TimeoutAction, agent_event::EventType,
};
use sdk_adapter::{ApprovalAnswer, ApprovalAsk, ApprovalKind, Verdict};
use serde_json::Value;
use tonic::Streaming;

use crate::connect::Client;
use crate::status_text;

/// How much longer than the runner's approval timeout the engine waits, so
/// that the runner's timeout (and its `ApprovalResolved`) comes first.
const ENGINE_TIMEOUT_MARGIN: Duration = Duration::from_secs(60);

/// The session's confirmation policy: `tools` need a person (none: HITL
/// off); the engine rejects a call nobody answered some time after
/// `approval_timeout`.
pub(crate) fn policy(tools: &[String], approval_timeout: Duration) -> ConfirmationPolicy {
    let wait = approval_timeout.saturating_add(ENGINE_TIMEOUT_MARGIN);
    ConfirmationPolicy {
        enabled: !tools.is_empty(),
        auto_approve_tools: Vec::new(),
        require_confirm_tools: tools.to_vec(),
        default_timeout_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        timeout_action: TimeoutAction::Reject.into(),
        yolo_lanes: Vec::new(),
    }
}

/// The request that gives session `session_id` its policy.
pub(crate) fn set_policy(
    session_id: &str,
    policy: ConfirmationPolicy,
) -> SetConfirmationPolicyRequest {
    SetConfirmationPolicyRequest {
        session_id: session_id.to_owned(),
        policy: Some(policy),
    }
}

/// The session's `CONFIRMATION_REQUIRED` events from now on.
pub(crate) async fn subscribe(
    client: &Client,
    session_id: &str,
) -> Result<Streaming<AgentEvent>, tonic::Status> {
    let request = SubscribeEventsRequest {
        session_id: Some(session_id.to_owned()),
        event_types: vec!["CONFIRMATION_REQUIRED".to_owned()],
    };
    let mut client = client.clone();
    Ok(client.subscribe_events(request).await?.into_inner())
}

/// The call `event` asks about (its tool call id) and what a person needs
/// to decide it; `None` for any other event.
pub(crate) fn ask_for(event: &AgentEvent, cwd: &str) -> Option<(String, ApprovalAsk)> {
    if event.r#type != EventType::ConfirmationRequired as i32 {
        return None;
    }
    let tool_id = event
        .data
        .get("tool_id")
        .filter(|id| !id.is_empty())?
        .clone();
    let tool = event.data.get("tool").map_or("tool", String::as_str);
    let arguments = event.data.get("arguments").map_or("{}", String::as_str);
    let args: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
    let text = |key: &str| args.get(key).and_then(Value::as_str).map(str::to_owned);
    let mut ask = match tool {
        "bash" => {
            let command = text("command").unwrap_or_default();
            let mut ask =
                ApprovalAsk::new(ApprovalKind::CommandExecution, format!("run `{command}`"));
            ask.command = Some(command);
            ask.cwd = Some(cwd.to_owned());
            ask
        }
        "write" | "edit" => {
            let path = text("path")
                .or_else(|| text("file_path"))
                .unwrap_or_default();
            let mut ask = ApprovalAsk::new(ApprovalKind::FileChange, format!("{tool} {path}"));
            ask.paths = vec![path];
            ask
        }
        other => {
            let mut ask = ApprovalAsk::new(
                ApprovalKind::Permission,
                format!("use the tool {other} with {arguments}"),
            );
            ask.command = Some(format!("{other} {arguments}"));
            ask
        }
    };
    ask.item_id = Some(tool_id.clone());
    Some((tool_id, ask))
}

/// The engine's confirmation for `answer`: approved or not, and the reason
/// the agent reads when it is not.
pub(crate) fn confirmation(
    session_id: &str,
    tool_id: &str,
    answer: &ApprovalAnswer,
) -> ConfirmToolExecutionRequest {
    let reason = match answer.verdict {
        Verdict::Approve | Verdict::ApproveForThread => None,
        Verdict::Deny => Some(
            answer
                .message
                .clone()
                .unwrap_or_else(|| "denied".to_owned()),
        ),
        Verdict::CancelTurn => Some(
            answer
                .message
                .clone()
                .unwrap_or_else(|| "the turn was cancelled".to_owned()),
        ),
    };
    ConfirmToolExecutionRequest {
        session_id: session_id.to_owned(),
        tool_id: tool_id.to_owned(),
        approved: answer.approved(),
        reason,
    }
}

/// Sends the decision on `tool_id` back to the engine (logged on failure:
/// the call was cancelled meanwhile, or the engine went away).
pub(crate) async fn confirm(
    client: &Client,
    request: ConfirmToolExecutionRequest,
    timeout: Duration,
) {
    let mut client = client.clone();
    let tool_id = request.tool_id.clone();
    match tokio::time::timeout(timeout, client.confirm_tool_execution(request)).await {
        Ok(Ok(response)) => {
            let response = response.into_inner();
            if !response.success {
                tracing::debug!(%tool_id, error = %response.error, "the engine took no confirmation");
            }
        }
        Ok(Err(status)) => {
            tracing::warn!(%tool_id, error = %status_text(&status), "code-agent ConfirmToolExecution failed");
        }
        Err(_) => tracing::warn!(%tool_id, "code-agent ConfirmToolExecution timed out"),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn event(tool: &str, arguments: &str) -> AgentEvent {
        AgentEvent {
            r#type: EventType::ConfirmationRequired as i32,
            session_id: Some("s".into()),
            timestamp: 0,
            message: String::new(),
            data: HashMap::from([
                ("tool_id".to_owned(), "call_1".to_owned()),
                ("tool".to_owned(), tool.to_owned()),
                ("arguments".to_owned(), arguments.to_owned()),
            ]),
        }
    }

    #[test]
    fn confirmations_become_asks() {
        let (id, ask) = ask_for(&event("bash", r#"{"command":"touch x"}"#), "/w").unwrap();
        assert_eq!(id, "call_1");
        assert_eq!(ask.kind, ApprovalKind::CommandExecution);
        assert_eq!(ask.command.as_deref(), Some("touch x"));
        assert_eq!(ask.cwd.as_deref(), Some("/w"));
        assert_eq!(ask.item_id.as_deref(), Some("call_1"));
        let (_, ask) = ask_for(&event("write", r#"{"path":"a.txt"}"#), "/w").unwrap();
        assert_eq!(ask.kind, ApprovalKind::FileChange);
        assert_eq!(ask.paths, ["a.txt"]);
        let (_, ask) = ask_for(&event("mcp__s__t", "{}"), "/w").unwrap();
        assert_eq!(ask.kind, ApprovalKind::Permission);
        let mut other = event("bash", "{}");
        other.r#type = EventType::ToolCalled as i32;
        assert!(ask_for(&other, "/w").is_none());
    }

    #[test]
    fn decisions_map_to_confirmations() {
        let yes = confirmation("s", "c", &ApprovalAnswer::approve());
        assert!(yes.approved && yes.reason.is_none());
        let no = confirmation("s", "c", &ApprovalAnswer::deny("not today"));
        assert!(!no.approved);
        assert_eq!(no.reason.as_deref(), Some("not today"));
        let p = policy(&["bash".to_owned()], Duration::from_secs(600));
        assert!(p.enabled);
        assert_eq!(p.default_timeout_ms, 660_000);
        assert!(!policy(&[], Duration::from_secs(1)).enabled);
    }
}
