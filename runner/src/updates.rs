//! Every `ClientMessage` the runner sends is built here: the one place where
//! SDK-neutral events meet the wire contract.

use agent_runner_proto::runner::{
    AgentStatus, AgentUpdate, ClientMessage, CommandExecutionItem, HeartbeatResponse, ItemStatus,
    ItemType, ItemUpdate, RequestError, SkillMpStatus, SkillMpUpdate, ThreadStatus,
    ThreadTokenUsageUpdate, ThreadUpdate, TokenUsageBreakdown, TurnStatus, TurnUpdate,
    client_message::Payload,
};
use sdk_adapter::{ItemEvent, ItemKind, TokenUsage};

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
    }
}

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

pub fn heartbeat(request_id: RequestId) -> ClientMessage {
    message(request_id, Payload::HeartbeatResponse(HeartbeatResponse {}))
}

pub fn agent(request_id: RequestId, agent_id: &str, status: AgentStatus) -> ClientMessage {
    message(
        request_id,
        Payload::AgentUpdate(AgentUpdate {
            agent_id: agent_id.to_owned(),
            status: status.into(),
        }),
    )
}

pub fn thread(request_id: RequestId, thread_id: &str, status: ThreadStatus) -> ClientMessage {
    message(
        request_id,
        Payload::ThreadUpdate(ThreadUpdate {
            thread_id: thread_id.to_owned(),
            status: status.into(),
        }),
    )
}

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
    let command_execution_item = event.command.map(|c| CommandExecutionItem {
        command: c.command,
        cwd: c.cwd,
        process_id: c.process_id,
        output: c.output,
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

/// A short name of a message's kind, for logs and counters.
pub fn kind(msg: &ClientMessage) -> &'static str {
    match &msg.payload {
        None => "empty",
        Some(Payload::RequestError(_)) => "request_error",
        Some(Payload::AgentUpdate(_)) => "agent_update",
        Some(Payload::ThreadUpdate(_)) => "thread_update",
        Some(Payload::TurnUpdate(_)) => "turn_update",
        Some(Payload::ItemUpdate(_)) => "item_update",
        Some(Payload::SkillMpUpdate(_)) => "skill_mp_update",
        Some(Payload::HeartbeatResponse(_)) => "heartbeat_response",
        Some(Payload::ThreadTokenUsageUpdate(_)) => "thread_token_usage_update",
    }
}
