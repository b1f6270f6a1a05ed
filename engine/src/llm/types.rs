//! The model-facing types the agent loop speaks: messages, tool specs, a chat
//! request, token usage and the events a streaming completion produces.
//!
//! They are provider-neutral; `wire.rs` maps them to and from the OpenAI Chat
//! Completions JSON.

use serde::{Deserialize, Serialize};

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The system prompt.
    System,
    /// The user.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

impl Role {
    /// The role's name in the Chat Completions API.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One tool call the model asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    /// The call's id, which its result refers to.
    pub id: String,
    /// The tool called.
    pub name: String,
    /// The arguments as JSON text, exactly as the model produced them.
    pub arguments: String,
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who speaks.
    pub role: Role,
    /// What is said (may be empty for a message of tool calls only).
    pub content: String,
    /// Assistant reasoning text; kept for the transcript, never resent to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Tool calls of an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRequest>,
    /// The call a tool message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    fn plain(role: Role, content: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: content.into(),
            reasoning: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::plain(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::plain(Role::User, content)
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::plain(Role::Assistant, content)
    }

    /// A tool result answering the call `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            tool_call_id: Some(tool_call_id.into()),
            ..Self::plain(Role::Tool, content)
        }
    }
}

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The tool's name, as the model calls it.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// One chat completion request.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ChatRequest {
    /// The model asked.
    pub model: String,
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// The tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// Sampling temperature (`None`: the provider's default).
    pub temperature: Option<f32>,
    /// Longest answer in tokens (`None`: the provider's default).
    pub max_tokens: Option<u32>,
    /// `"low" | "medium" | "high"`; sent as `reasoning_effort` when set.
    pub reasoning_effort: Option<String>,
    /// A JSON Schema the answer must follow; sent as
    /// `response_format: {type: "json_schema", json_schema: {name, schema}}`.
    pub json_schema: Option<serde_json::Value>,
}

/// Token counts the server reported for one completion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the prompt.
    pub prompt_tokens: u32,
    /// Tokens generated.
    pub completion_tokens: u32,
    /// Both, as the provider counts them.
    pub total_tokens: u32,
    /// Prompt tokens read from the provider's prompt cache (Anthropic
    /// `cache_read_input_tokens`; included in `prompt_tokens`).
    #[serde(default)]
    pub cache_read_tokens: u32,
    /// Prompt tokens written to the prompt cache (Anthropic
    /// `cache_creation_input_tokens`; included in `prompt_tokens`).
    #[serde(default)]
    pub cache_write_tokens: u32,
}

/// What a streaming completion produces, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    /// A piece of the answer text.
    ContentDelta(String),
    /// A piece of the reasoning text (`delta.reasoning_content` or `delta.reasoning`).
    ReasoningDelta(String),
    /// The model started tool call `index` (its id and name are known).
    ToolCallStarted {
        /// The call's position in the message.
        index: u32,
        /// The call's id.
        id: String,
        /// The tool called.
        name: String,
    },
    /// The completion ended; the last event of a successful stream.
    Finished {
        /// The assembled assistant message, tool calls ordered by index.
        message: ChatMessage,
        /// Why the model stopped (`stop`, `tool_calls`, `length`, …).
        finish_reason: String,
        /// Token usage, when the provider reported it.
        usage: Option<Usage>,
    },
}
