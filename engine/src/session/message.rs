//! Conversation history as the engine keeps (and persists) it, and its two
//! views: the model's [`ChatMessage`] and the wire's [`ConversationMessage`].

use std::collections::BTreeMap;

use code_agent_proto::{
    ContentBlock, ConversationMessage, Message, TextContent, ToolResultContent, ToolUseContent,
    content_block::Block,
};
use serde::{Deserialize, Serialize};

use crate::llm::{ChatMessage, Role, ToolCallRequest};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Who said a message.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MessageRole {
    System,
    User,
    Assistant,
    Tool,
}

impl MessageRole {
    /// Parses `system`/`user`/`assistant`/`tool` (any case).
    pub fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_lowercase().as_str() {
            "system" => Some(Self::System),
            "user" => Some(Self::User),
            "assistant" => Some(Self::Assistant),
            "tool" => Some(Self::Tool),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }
}

/// A tool call an assistant message asked for.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct StoredToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// One message of a session's history.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct StoredMessage {
    pub id: String,
    pub role: MessageRole,
    #[serde(default)]
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<StoredToolCall>,
    /// For `tool` messages: the call this answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For `tool` messages: whether the tool failed.
    #[serde(default)]
    pub is_error: bool,
    pub timestamp: i64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

impl StoredMessage {
    /// A plain text message.
    pub fn text(role: MessageRole, content: impl Into<String>) -> Self {
        Self {
            id: uuid::Uuid::new_v4().to_string(),
            role,
            content: content.into(),
            reasoning: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
            is_error: false,
            timestamp: now_ms(),
            metadata: BTreeMap::new(),
        }
    }

    /// The assistant message a model call produced.
    pub fn from_assistant(message: &ChatMessage) -> Self {
        let mut stored = Self::text(MessageRole::Assistant, message.content.clone());
        stored.reasoning = message.reasoning.clone().filter(|r| !r.is_empty());
        stored.tool_calls = message
            .tool_calls
            .iter()
            .map(|c| StoredToolCall {
                id: c.id.clone(),
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            })
            .collect();
        stored
    }

    /// The answer to one tool call.
    pub fn tool_result(call_id: &str, tool: &str, content: String, is_error: bool) -> Self {
        let mut stored = Self::text(MessageRole::Tool, content);
        stored.tool_call_id = Some(call_id.to_string());
        stored.is_error = is_error;
        stored.metadata.insert("tool".into(), tool.to_string());
        stored
    }

    /// A message from a request; `field` names it in errors (`messages[0]`).
    pub fn from_request(message: &Message, field: &str) -> Result<Self, String> {
        let role = MessageRole::parse(&message.role).ok_or_else(|| {
            format!(
                "{field}.role: must be system, user, assistant or tool, got {:?}",
                message.role
            )
        })?;
        let mut stored = Self::text(role, message.content.clone());
        stored.metadata = message
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if role == MessageRole::Tool {
            let id = message
                .metadata
                .get("tool_call_id")
                .filter(|id| !id.is_empty())
                .ok_or_else(|| {
                    format!("{field}.metadata.tool_call_id: required for tool messages")
                })?;
            stored.tool_call_id = Some(id.clone());
        }
        Ok(stored)
    }

    /// The model's view.
    pub fn to_chat(&self) -> ChatMessage {
        ChatMessage {
            role: match self.role {
                MessageRole::System => Role::System,
                MessageRole::User => Role::User,
                MessageRole::Assistant => Role::Assistant,
                MessageRole::Tool => Role::Tool,
            },
            content: self.content.clone(),
            reasoning: None,
            tool_calls: self
                .tool_calls
                .iter()
                .map(|c| ToolCallRequest {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                })
                .collect(),
            tool_call_id: self.tool_call_id.clone(),
        }
    }

    /// The wire's view (`GetMessages`).
    pub fn to_conversation(&self) -> ConversationMessage {
        let mut content = Vec::new();
        if self.role == MessageRole::Tool {
            content.push(ContentBlock {
                block: Some(Block::ToolResult(ToolResultContent {
                    tool_use_id: self.tool_call_id.clone().unwrap_or_default(),
                    content: self.content.clone(),
                    is_error: self.is_error,
                })),
            });
        } else if !self.content.is_empty() {
            content.push(ContentBlock {
                block: Some(Block::Text(TextContent {
                    text: self.content.clone(),
                })),
            });
        }
        for call in &self.tool_calls {
            content.push(ContentBlock {
                block: Some(Block::ToolUse(ToolUseContent {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                })),
            });
        }
        let mut metadata: std::collections::HashMap<String, String> = self
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if let Some(reasoning) = &self.reasoning {
            metadata.insert("reasoning".into(), reasoning.clone());
        }
        ConversationMessage {
            id: self.id.clone(),
            role: self.role.as_str().to_string(),
            content,
            timestamp: self.timestamp,
            metadata,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_messages_need_their_call_id() {
        let msg = Message {
            role: "tool".into(),
            content: "x".into(),
            metadata: Default::default(),
        };
        let err = StoredMessage::from_request(&msg, "messages[2]").unwrap_err();
        assert!(err.contains("messages[2].metadata.tool_call_id"), "{err}");
        let bad_role = Message {
            role: "robot".into(),
            ..msg
        };
        let err = StoredMessage::from_request(&bad_role, "messages[0]").unwrap_err();
        assert!(err.contains("messages[0].role"), "{err}");
    }

    #[test]
    fn conversation_view_has_tool_blocks() {
        let mut assistant = StoredMessage::text(MessageRole::Assistant, "let me look");
        assistant.tool_calls.push(StoredToolCall {
            id: "c1".into(),
            name: "read".into(),
            arguments: "{}".into(),
        });
        let view = assistant.to_conversation();
        assert_eq!(view.role, "assistant");
        assert_eq!(view.content.len(), 2);
        let result =
            StoredMessage::tool_result("c1", "read", "boom".into(), true).to_conversation();
        match &result.content[0].block {
            Some(Block::ToolResult(r)) => {
                assert_eq!(r.tool_use_id, "c1");
                assert!(r.is_error);
            }
            other => panic!("unexpected block {other:?}"),
        }
    }
}
