//! The OpenAI Chat Completions JSON: the request body built from a
//! [`ChatRequest`], and the streamed chunk shape (tolerant of the extensions
//! OpenAI-compatible servers add, such as `reasoning_content`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::types::{ChatMessage, ChatRequest, Role, Usage};

/// The JSON body of a streaming `POST /chat/completions`, borrowed from
/// the request and written straight out by serde: a request carries the
/// whole history (hundreds of KB in a long session) and is built once per
/// model call, so no intermediate `Value` tree is made of it.
#[derive(Serialize)]
pub(crate) struct Body<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<ResponseFormat<'a>>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(Serialize)]
struct ResponseFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    json_schema: NamedSchema<'a>,
}

#[derive(Serialize)]
struct NamedSchema<'a> {
    name: &'static str,
    schema: &'a Value,
}

/// One message as the API takes it: an assistant's tool calls with their
/// content (`null` when empty), a tool result with the call it answers,
/// anything else as role and content. Reasoning is never resent.
#[derive(Serialize)]
#[serde(untagged)]
enum WireMessage<'a> {
    Calls {
        role: &'static str,
        content: Option<&'a str>,
        tool_calls: Vec<WireCall<'a>>,
    },
    Tool {
        role: &'static str,
        tool_call_id: &'a str,
        content: &'a str,
    },
    Plain {
        role: &'static str,
        content: &'a str,
    },
}

#[derive(Serialize)]
struct WireCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: CallFunction<'a>,
}

#[derive(Serialize)]
struct CallFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

/// The body of a streaming `POST /chat/completions` for `request`.
pub(crate) fn request_body(request: &ChatRequest) -> Body<'_> {
    Body {
        model: &request.model,
        messages: request.messages.iter().map(message_json).collect(),
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
        tools: request
            .tools
            .iter()
            .map(|t| WireTool {
                kind: "function",
                function: WireFunction {
                    name: &t.name,
                    description: &t.description,
                    parameters: &t.parameters,
                },
            })
            .collect(),
        temperature: request.temperature,
        max_tokens: request.max_tokens,
        reasoning_effort: request.reasoning_effort.as_deref(),
        response_format: request.json_schema.as_ref().map(|schema| ResponseFormat {
            kind: "json_schema",
            json_schema: NamedSchema {
                name: "response",
                schema,
            },
        }),
    }
}

fn message_json(m: &ChatMessage) -> WireMessage<'_> {
    match m.role {
        Role::Assistant if !m.tool_calls.is_empty() => WireMessage::Calls {
            role: "assistant",
            content: (!m.content.is_empty()).then_some(m.content.as_str()),
            tool_calls: m
                .tool_calls
                .iter()
                .map(|c| WireCall {
                    id: &c.id,
                    kind: "function",
                    function: CallFunction {
                        name: &c.name,
                        arguments: &c.arguments,
                    },
                })
                .collect(),
        },
        Role::Tool => WireMessage::Tool {
            role: "tool",
            tool_call_id: m.tool_call_id.as_deref().unwrap_or_default(),
            content: &m.content,
        },
        role => WireMessage::Plain {
            role: role.as_str(),
            content: &m.content,
        },
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
    use serde_json::json;

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
        let body = serde_json::to_value(request_body(&req)).unwrap();
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
        let body = serde_json::to_value(request_body(&ChatRequest {
            model: "m".into(),
            messages: vec![ChatMessage::user("hi")],
            ..Default::default()
        }))
        .unwrap();
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
