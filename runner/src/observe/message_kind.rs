//! A short name for each kind of outbound message, for logs, transcripts
//! and the per-kind counters. Here, below every layer that sends, so that
//! the metrics need nothing of delivery.

use agent_runner_proto::runner::ClientMessage;
use agent_runner_proto::runner::client_message::Payload;

/// A short name of a message's kind, for logs and counters.
pub fn kind(msg: &ClientMessage) -> &'static str {
    KINDS[kind_index(msg)]
}

/// Every [`kind`], by [`kind_index`].
pub const KINDS: [&str; 14] = [
    "empty",
    "request_error",
    "agent_update",
    "thread_update",
    "turn_update",
    "item_update",
    "skill_mp_update",
    "heartbeat_response",
    "thread_token_usage_update",
    "thread_name_update",
    "agent_sdk_update",
    "codex_device_code",
    "approval_request",
    "approval_resolved",
];

/// Where `msg`'s [`kind`] is in [`KINDS`] (for per-kind tables without a
/// lookup by name).
pub fn kind_index(msg: &ClientMessage) -> usize {
    match &msg.payload {
        None => 0,
        Some(Payload::RequestError(_)) => 1,
        Some(Payload::AgentUpdate(_)) => 2,
        Some(Payload::ThreadUpdate(_)) => 3,
        Some(Payload::TurnUpdate(_)) => 4,
        Some(Payload::ItemUpdate(_)) => 5,
        Some(Payload::SkillMpUpdate(_)) => 6,
        Some(Payload::HeartbeatResponse(_)) => 7,
        Some(Payload::ThreadTokenUsageUpdate(_)) => 8,
        Some(Payload::ThreadNameUpdate(_)) => 9,
        Some(Payload::AgentSdkUpdate(_)) => 10,
        Some(Payload::CodexDeviceCode(_)) => 11,
        Some(Payload::ApprovalRequest(_)) => 12,
        Some(Payload::ApprovalResolved(_)) => 13,
    }
}
