//! The OpenAI Chat Completions JSON: the request body built from a
//! [`ChatRequest`], and the streamed chunk shape (tolerant of the extensions
//! OpenAI-compatible servers add, such as `reasoning_content`).

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::types::{ChatMessage, ChatRequest, Role, Usage};

/// The JSON body of a streaming `POST /chat/completions`.
pub(crate) fn request_body(request: &ChatRequest) -> Value {
    let mut obj = Map::new();
    obj.insert("model".into(), json!(request.model));
    obj.insert(
        "messages".into(),
        Value::Array(request.messages.iter().map(message_json).collect()),
    );
    obj.insert("stream".into(), Value::Bool(true));
    obj.insert("stream_options".into(), json!({ "include_usage": true }));
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    }
                })
            })
            .collect::<Vec<_>>();
        obj.insert("tools".into(), Value::Array(tools));
    }
    if let Some(t) = request.temperature {
        obj.insert("temperature".into(), json!(t));
    }
    if let Some(m) = request.max_tokens {
        obj.insert("max_tokens".into(), json!(m));
    }
    if let Some(effort) = &request.reasoning_effort {
        obj.insert("reasoning_effort".into(), json!(effort));
    }
    if let Some(schema) = &request.json_schema {
        obj.insert(
            "response_format".into(),
            json!({
                "type": "json_schema",
                "json_schema": { "name": "response", "schema": schema },
            }),
        );
    }
    Value::Object(obj)
}

fn message_json(m: &ChatMessage) -> Value {
    match m.role {
        Role::Assistant if !m.tool_calls.is_empty() => {
            let calls = m
                .tool_calls
                .iter()
                .map(|c| {
                    json!({
                        "id": c.id,
                        "type": "function",
                        "function": { "name": c.name, "arguments": c.arguments },
                    })
                })
                .collect::<Vec<_>>();
            let content = if m.content.is_empty() {
                Value::Null
            } else {
                json!(m.content)
            };
            json!({ "role": "assistant", "content": content, "tool_calls": calls })
        }
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id.as_deref().unwrap_or_default(),
            "content": m.content,
        }),
        role => json!({ "role": role.as_str(), "content": m.content }),
    }
}

/// One `data:` payload of the stream. Unknown fields are ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Chunk {
    pub choices: Vec<ChunkChoice>,
    pub usage: Option<WireUsage>,
    /// Some servers (OpenRouter, vLLM) report a failure inside the stream.
    pub error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Delta {
    pub content: Option<String>,
    /// DeepSeek, vLLM, SGLang.
    pub reasoning_content: Option<String>,
    /// OpenRouter, Ollama.
    pub reasoning: Option<String>,
    pub tool_calls: Vec<ToolCallDelta>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ToolCallDelta {
    pub index: Option<u32>,
    pub id: Option<String>,
    pub function: Option<FunctionDelta>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct FunctionDelta {
    pub name: Option<String>,
    pub arguments: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct WireUsage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: Option<u32>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Self {
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u
                .total_tokens
                .unwrap_or(u.prompt_tokens.saturating_add(u.completion_tokens)),
            ..Usage::default()
        }
    }
}

/// A whole (non-streaming) completion body.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Completion {
    #[serde(default)]
    pub choices: Vec<CompletionChoice>,
    #[serde(default)]
    pub usage: Option<WireUsage>,
    #[serde(default)]
    pub error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct CompletionChoice {
    #[serde(default)]
    pub index: u32,
    /// Same fields as a stream delta (content, reasoning, tool calls).
    #[serde(default)]
    pub message: Delta,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

impl Completion {
    /// The completion as one chunk holding everything.
    pub(crate) fn into_chunk(self) -> Chunk {
        Chunk {
            choices: self
                .choices
                .into_iter()
                .map(|c| ChunkChoice {
                    index: c.index,
                    delta: c.message,
                    finish_reason: c.finish_reason,
                })
                .collect(),
            usage: self.usage,
            error: self.error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::types::{ToolCallRequest, ToolSpec};

    #[test]
    fn body_has_streaming_options_and_optional_fields() {
        let mut assistant = ChatMessage::assistant("");
        assistant.reasoning = Some("thinking".into());
        assistant.tool_calls.push(ToolCallRequest {
            id: "call_1".into(),
            name: "read".into(),
            arguments: r#"{"path":"a"}"#.into(),
        });
        let req = ChatRequest {
            model: "m".into(),
            messages: vec![
                ChatMessage::system("sys"),
                ChatMessage::user("hi"),
                assistant,
                ChatMessage::tool("call_1", "contents"),
            ],
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "reads".into(),
                parameters: json!({"type": "object"}),
            }],
            temperature: Some(0.5),
            max_tokens: Some(100),
            reasoning_effort: Some("high".into()),
            json_schema: Some(json!({"type": "object"})),
        };
        let body = request_body(&req);
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(
            body["messages"][0],
            json!({"role": "system", "content": "sys"})
        );
        assert_eq!(body["messages"][2]["content"], Value::Null);
        assert!(body["messages"][2].get("reasoning").is_none());
        assert_eq!(
            body["messages"][2]["tool_calls"][0]["function"]["arguments"],
            r#"{"path":"a"}"#
        );
        assert_eq!(body["messages"][3]["tool_call_id"], "call_1");
        assert_eq!(body["tools"][0]["function"]["name"], "read");
        assert_eq!(body["temperature"], 0.5);
        assert_eq!(body["max_tokens"], 100);
        assert_eq!(body["reasoning_effort"], "high");
        assert_eq!(body["response_format"]["type"], "json_schema");
        assert_eq!(
            body["response_format"]["json_schema"]["schema"],
            json!({"type": "object"})
        );
    }

    #[test]
    fn minimal_body_leaves_out_unset_fields() {
        let body = request_body(&ChatRequest {
            model: "m".into(),
            messages: vec![ChatMessage::user("hi")],
            ..Default::default()
        });
        for key in [
            "tools",
            "temperature",
            "max_tokens",
            "reasoning_effort",
            "response_format",
        ] {
            assert!(body.get(key).is_none(), "{key} should be absent");
        }
    }
}
