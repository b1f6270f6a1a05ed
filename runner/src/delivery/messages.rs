//! Every `ClientMessage` the runner sends is built here: the one place where
//! SDK-neutral events meet the wire contract.

use agent_runner_proto::runner::{
    AgentSdk, AgentSdkStatus, AgentStatus, AgentUpdate, ClientMessage, CommandExecutionItem,
    HeartbeatResponse, ItemStatus, ItemType, ItemUpdate, LlmModel, RequestError, SkillMpStatus,
    SkillMpUpdate, ThreadNameUpdate, ThreadStatus, ThreadTokenUsageUpdate, ThreadUpdate,
    TokenUsageBreakdown, TurnStatus, TurnUpdate, client_message::Payload,
};
use sdk_adapter::{ItemEvent, ItemKind, TokenUsage};

use crate::util::redact::Redactor;

/// The request id a reply carries: none when the request had none.
pub type RequestId = Option<String>;

/// Normalise a wire request id (empty ⇒ none).
pub fn request_id(raw: &str) -> RequestId {
    (!raw.is_empty()).then(|| raw.to_owned())
}

fn message(request_id: RequestId, payload: Payload) -> ClientMessage {
    ClientMessage {
        request_id,
        payload: Some(payload),
        sequence: 0,
    }
}

/// A `RequestError` saying `text`.
pub fn request_error(request_id: RequestId, text: impl Into<String>) -> ClientMessage {
    let mut error_message = text.into();
    if error_message.is_empty() {
        error_message = "request failed".to_owned();
    }
    message(
        request_id,
        Payload::RequestError(RequestError { error_message }),
    )
}

/// A `HeartbeatResponse`.
pub fn heartbeat(request_id: RequestId) -> ClientMessage {
    message(request_id, Payload::HeartbeatResponse(HeartbeatResponse {}))
}

/// An `AgentUpdate`.
pub fn agent(request_id: RequestId, agent_id: &str, status: AgentStatus) -> ClientMessage {
    message(
        request_id,
        Payload::AgentUpdate(AgentUpdate {
            agent_id: agent_id.to_owned(),
            status: status.into(),
        }),
    )
}

/// What registration (and `agent_sdk_update`) says about one SDK.
pub fn agent_sdk(d: sdk_adapter::SdkDescription) -> AgentSdk {
    AgentSdk {
        name: d.name,
        models: d
            .models
            .into_iter()
            .map(|m| LlmModel {
                name: m.name,
                reasoning: m.reasoning_levels,
            })
            .collect(),
        status: match d.status {
            sdk_adapter::SdkStatus::Ready => AgentSdkStatus::Ready,
            sdk_adapter::SdkStatus::Unconfigured => AgentSdkStatus::Unconfigured,
            sdk_adapter::SdkStatus::Error => AgentSdkStatus::Error,
        }
        .into(),
        error_message: d.error_message,
    }
}

/// An `agent_sdk_update`: `d` changed since the control plane was told.
pub fn agent_sdk_update(request_id: RequestId, d: sdk_adapter::SdkDescription) -> ClientMessage {
    message(request_id, Payload::AgentSdkUpdate(agent_sdk(d)))
}

/// A `ThreadNameUpdate`: the SDK's title for the thread (`None`: cleared).
pub fn thread_name(request_id: RequestId, thread_id: &str, name: Option<String>) -> ClientMessage {
    message(
        request_id,
        Payload::ThreadNameUpdate(ThreadNameUpdate {
            thread_id: thread_id.to_owned(),
            thread_name: name,
        }),
    )
}

/// A `ThreadUpdate`.
pub fn thread(request_id: RequestId, thread_id: &str, status: ThreadStatus) -> ClientMessage {
    message(
        request_id,
        Payload::ThreadUpdate(ThreadUpdate {
            thread_id: thread_id.to_owned(),
            status: status.into(),
        }),
    )
}

/// A `TurnUpdate`.
pub fn turn(
    request_id: RequestId,
    thread_id: &str,
    sdk_turn_id: &str,
    status: TurnStatus,
) -> ClientMessage {
    message(
        request_id,
        Payload::TurnUpdate(TurnUpdate {
            sdk_turn_id: sdk_turn_id.to_owned(),
            status: status.into(),
            thread_id: thread_id.to_owned(),
        }),
    )
}

/// A `SkillMpUpdate INSTALLED`.
pub fn skill_installed(request_id: RequestId, agent_id: &str, package: &str) -> ClientMessage {
    message(
        request_id,
        Payload::SkillMpUpdate(SkillMpUpdate {
            agent_id: agent_id.to_owned(),
            status: SkillMpStatus::Installed.into(),
            package_name: package.to_owned(),
        }),
    )
}

/// The wire item type of an adapter's item kind.
pub fn item_type(kind: ItemKind) -> ItemType {
    match kind {
        ItemKind::UserMessage => ItemType::UserMessage,
        ItemKind::AgentMessage => ItemType::AgentMessage,
        ItemKind::Reasoning => ItemType::Reasoning,
        ItemKind::CommandExecution => ItemType::CommandExecution,
        ItemKind::Plan => ItemType::Plan,
        ItemKind::FileChange => ItemType::FileChange,
        ItemKind::McpToolCall => ItemType::McpToolCall,
        ItemKind::CollabAgentToolCall => ItemType::CollabAgentToolCall,
        ItemKind::WebSearch => ItemType::WebSearch,
        ItemKind::ImageView => ItemType::ImageView,
        ItemKind::EnteredReviewMode => ItemType::EnteredReviewMode,
        ItemKind::ExitedReviewMode => ItemType::ExitedReviewMode,
        ItemKind::ContextCompaction => ItemType::ContextCompaction,
    }
}

/// An `ItemUpdate` for an adapter's item.
pub fn item(
    request_id: RequestId,
    thread_id: &str,
    sdk_turn_id: &str,
    event: ItemEvent,
) -> ClientMessage {
    let status = match event.status {
        sdk_adapter::ItemStatus::Running => ItemStatus::Running,
        sdk_adapter::ItemStatus::Completed => ItemStatus::Completed,
    };
    // The contract requires a process id, but Claude Code never reports one
    // and codex only sometimes does: the item id stands in (stable for the
    // item, unique in the thread) rather than the update being invalid.
    let completed = status == ItemStatus::Completed;
    let command_execution_item = event.command.map(|c| {
        // The protocol has no exit status: a finished command's output ends
        // with a marker saying how it ended, unless it exited 0.
        let marker = c.end_marker().filter(|_| completed);
        CommandExecutionItem {
            process_id: if c.process_id.is_empty() {
                event.item_id.clone()
            } else {
                c.process_id
            },
            output: match (c.output, marker) {
                (output, None) => output,
                (None, Some(marker)) => Some(marker),
                (Some(mut output), Some(marker)) => {
                    if !output.is_empty() && !output.ends_with('\n') {
                        output.push('\n');
                    }
                    output.push_str(&marker);
                    Some(output)
                }
            },
            command: c.command,
            cwd: c.cwd,
        }
    });
    message(
        request_id,
        Payload::ItemUpdate(ItemUpdate {
            sdk_item_id: event.item_id,
            status: status.into(),
            item_type: item_type(event.kind).into(),
            text: event.text,
            command_execution_item,
            thread_id: thread_id.to_owned(),
            sdk_turn_id: sdk_turn_id.to_owned(),
        }),
    )
}

fn breakdown(b: sdk_adapter::TokenUsageBreakdown) -> TokenUsageBreakdown {
    TokenUsageBreakdown {
        input_tokens: b.input_tokens.max(0),
        cached_input_tokens: b.cached_input_tokens.max(0),
        output_tokens: b.output_tokens.max(0),
        reasoning_output_tokens: b.reasoning_output_tokens.max(0),
        total_tokens: b.total_tokens.max(0),
    }
}

/// A `ThreadTokenUsageUpdate`.
pub fn token_usage(
    request_id: RequestId,
    thread_id: &str,
    sdk_turn_id: &str,
    usage: TokenUsage,
) -> ClientMessage {
    message(
        request_id,
        Payload::ThreadTokenUsageUpdate(ThreadTokenUsageUpdate {
            thread_id: thread_id.to_owned(),
            sdk_turn_id: sdk_turn_id.to_owned(),
            total_usage: Some(breakdown(usage.total)),
            last_usage: Some(breakdown(usage.last)),
            model_context_window: usage.model_context_window,
        }),
    )
}

/// Mask every registered secret in the free text of `msg`: item text,
/// command line, cwd and output, error messages (a failed turn's reason
/// often quotes the agent's output) and thread names (an agent may title a
/// thread with what it read). Ids and enums are left alone.
pub fn redact(msg: &mut ClientMessage, redactor: &Redactor) {
    match &mut msg.payload {
        Some(Payload::ItemUpdate(item)) => {
            if let Some(text) = &mut item.text {
                redactor.redact_in_place(text);
            }
            if let Some(c) = &mut item.command_execution_item {
                redactor.redact_in_place(&mut c.command);
                redactor.redact_in_place(&mut c.cwd);
                if let Some(output) = &mut c.output {
                    redactor.redact_in_place(output);
                }
            }
        }
        Some(Payload::RequestError(e)) => redactor.redact_in_place(&mut e.error_message),
        Some(Payload::ThreadNameUpdate(n)) => {
            if let Some(name) = &mut n.thread_name {
                redactor.redact_in_place(name);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use agent_runner_proto::Validate;
    use sdk_adapter::{CommandInfo, ItemStatus as SdkStatus};

    use super::*;

    fn command_item(process_id: &str) -> ClientMessage {
        item(
            request_id("r1"),
            "thr-1",
            "turn-1",
            ItemEvent {
                item_id: "turn-1:tool-7".into(),
                kind: ItemKind::CommandExecution,
                status: SdkStatus::Running,
                text: None,
                command: Some(CommandInfo {
                    command: "ls".into(),
                    cwd: "/w".into(),
                    process_id: process_id.into(),
                    output: None,
                    exit_code: None,
                    ..Default::default()
                }),
            },
        )
    }

    fn process_id(m: &ClientMessage) -> String {
        match &m.payload {
            Some(Payload::ItemUpdate(u)) => u
                .command_execution_item
                .as_ref()
                .map(|c| c.process_id.clone())
                .unwrap_or_default(),
            other => panic!("not an item update: {other:?}"),
        }
    }

    #[test]
    fn a_command_without_a_process_id_is_still_a_valid_update() {
        let m = command_item("");
        assert!(m.validate().is_ok(), "{:?}", m.validate());
        assert_eq!(process_id(&m), "turn-1:tool-7");
        assert_eq!(process_id(&command_item("4242")), "4242");
    }
}
