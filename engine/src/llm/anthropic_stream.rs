//! The event stream of one Anthropic Messages call: SSE frames (read by
//! the shared reader in `sse.rs`) — `message_start`,
//! `content_block_start`/`delta`/`stop`, `message_delta`, `message_stop`,
//! `ping`, `error` — folded into the engine's [`StreamEvent`]s: text
//! deltas, thinking deltas as reasoning, tool calls (`tool_use` blocks,
//! their `input_json_delta`s joined), and one `Finished` with the stop
//! reason in OpenAI terms and the usage (cache reads and writes counted in
//! the prompt and reported apart).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::chat::EventStream;
use super::error::LlmError;
use super::sse::{self, Flow, SseFold};
use super::types::{ChatMessage, StreamEvent, ToolCallRequest, Usage};

/// What one streamed message has built so far.
#[derive(Default)]
pub(crate) struct MessageFold {
    text: String,
    reasoning: String,
    /// Content-block index → tool call (id, name, JSON text).
    tools: BTreeMap<u32, (String, String, String)>,
    stop_reason: Option<String>,
    input_tokens: u32,
    cache_read: u32,
    cache_write: u32,
    output_tokens: u32,
    stopped: bool,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WireUsage {
    input_tokens: Option<u32>,
    output_tokens: Option<u32>,
    cache_creation_input_tokens: Option<u32>,
    cache_read_input_tokens: Option<u32>,
}

impl MessageFold {
    fn usage(&mut self, usage: Option<&Value>) {
        let Some(usage) = usage.and_then(|u| serde_json::from_value::<WireUsage>(u.clone()).ok())
        else {
            return;
        };
        if let Some(n) = usage.input_tokens {
            self.input_tokens = n;
        }
        if let Some(n) = usage.output_tokens {
            self.output_tokens = n;
        }
        if let Some(n) = usage.cache_creation_input_tokens {
            self.cache_write = n;
        }
        if let Some(n) = usage.cache_read_input_tokens {
            self.cache_read = n;
        }
    }

    /// Folds one SSE event (its name and JSON data) into `out`.
    pub(crate) fn push(
        &mut self,
        event: &str,
        data: &Value,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), LlmError> {
        let kind = data.get("type").and_then(Value::as_str).unwrap_or(event);
        match kind {
            "message_start" => self.usage(data.pointer("/message/usage")),
            "content_block_start" => {
                let index = index_of(data)?;
                let block = data.get("content_block").cloned().unwrap_or(Value::Null);
                match block.get("type").and_then(Value::as_str) {
                    Some("tool_use") => {
                        let id = str_of(&block, "id");
                        let name = str_of(&block, "name");
                        // Ordinal of this call among the message's calls.
                        let ordinal = u32::try_from(self.tools.len()).unwrap_or(u32::MAX);
                        out.push_back(StreamEvent::ToolCallStarted {
                            index: ordinal,
                            id: id.clone(),
                            name: name.clone(),
                        });
                        self.tools.insert(index, (id, name, String::new()));
                    }
                    Some("text") => {
                        let text = str_of(&block, "text");
                        self.text_delta(text, out);
                    }
                    Some("thinking") => {
                        let text = str_of(&block, "thinking");
                        self.reasoning_delta(text, out);
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let index = index_of(data)?;
                let delta = data.get("delta").cloned().unwrap_or(Value::Null);
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => self.text_delta(str_of(&delta, "text"), out),
                    Some("thinking_delta") => {
                        self.reasoning_delta(str_of(&delta, "thinking"), out);
                    }
                    Some("input_json_delta") => {
                        let Some((_, _, json)) = self.tools.get_mut(&index) else {
                            return Err(LlmError::Protocol(format!(
                                "input_json_delta for block {index}, which is not a tool_use"
                            )));
                        };
                        json.push_str(&str_of(&delta, "partial_json"));
                    }
                    // signature_delta, citations_delta: nothing the engine keeps.
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_string());
                }
                self.usage(data.get("usage"));
            }
            "message_stop" => self.stopped = true,
            "error" => {
                let kind = data
                    .pointer("/error/type")
                    .and_then(Value::as_str)
                    .unwrap_or("error");
                let message = data
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("the stream reported an error");
                let status = match kind {
                    "overloaded_error" => 529,
                    "rate_limit_error" => 429,
                    "invalid_request_error" => 400,
                    "authentication_error" => 401,
                    _ => 500,
                };
                return Err(LlmError::from_status(
                    status,
                    None,
                    &format!("{kind}: {message}"),
                ));
            }
            // ping, content_block_stop and future events.
            _ => {}
        }
        Ok(())
    }

    fn text_delta(&mut self, text: String, out: &mut VecDeque<StreamEvent>) {
        if !text.is_empty() {
            self.text.push_str(&text);
            out.push_back(StreamEvent::ContentDelta(text));
        }
    }

    fn reasoning_delta(&mut self, text: String, out: &mut VecDeque<StreamEvent>) {
        if !text.is_empty() {
            self.reasoning.push_str(&text);
            out.push_back(StreamEvent::ReasoningDelta(text));
        }
    }

    /// The `Finished` event, once `message_stop` was seen.
    pub(crate) fn finish(self) -> Result<StreamEvent, LlmError> {
        if !self.stopped {
            return Err(LlmError::Protocol(
                "the stream ended before message_stop".into(),
            ));
        }
        let tool_calls: Vec<ToolCallRequest> = self
            .tools
            .into_values()
            .map(|(id, name, json)| ToolCallRequest {
                id,
                name,
                arguments: if json.trim().is_empty() {
                    "{}".to_string()
                } else {
                    json
                },
            })
            .collect();
        let finish_reason = match self.stop_reason.as_deref() {
            Some("end_turn") | Some("stop_sequence") | None => "stop",
            Some("tool_use") => "tool_calls",
            Some("max_tokens") => "length",
            Some(other) => other,
        }
        .to_string();
        let prompt = self
            .input_tokens
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write);
        let usage = Usage {
            prompt_tokens: prompt,
            completion_tokens: self.output_tokens,
            total_tokens: prompt.saturating_add(self.output_tokens),
            cache_read_tokens: self.cache_read,
            cache_write_tokens: self.cache_write,
        };
        let mut message = ChatMessage::assistant(self.text);
        message.reasoning = (!self.reasoning.is_empty()).then_some(self.reasoning);
        message.tool_calls = tool_calls;
        Ok(StreamEvent::Finished {
            message,
            finish_reason,
            usage: Some(usage),
        })
    }
}

fn index_of(data: &Value) -> Result<u32, LlmError> {
    data.get("index")
        .and_then(Value::as_u64)
        .and_then(|i| u32::try_from(i).ok())
        .ok_or_else(|| LlmError::Protocol("a content block event has no index".into()))
}

fn str_of(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The events of a Messages API `text/event-stream` response.
pub(super) fn sse_events(
    response: reqwest::Response,
    cancel: CancellationToken,
    idle_timeout: Duration,
) -> EventStream {
    sse::sse_events::<MessageFold>(response, cancel, idle_timeout)
}

/// Every event's data is JSON; `message_stop` completes the message.
impl SseFold for MessageFold {
    fn event(
        &mut self,
        name: &str,
        data: &str,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Flow, LlmError> {
        if data.is_empty() {
            return Ok(Flow::More);
        }
        let value: Value = serde_json::from_str(data)
            .map_err(|e| LlmError::Protocol(format!("a stream event is not valid JSON: {e}")))?;
        self.push(name, &value, out)?;
        Ok(if self.stopped { Flow::Done } else { Flow::More })
    }

    fn complete(self) -> Result<StreamEvent, LlmError> {
        self.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn folds_thinking_text_tool_use_and_usage() {
        let mut fold = MessageFold::default();
        let mut out = VecDeque::new();
        let events = [
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 10, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 5, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "ok"}}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"path\":"}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "\"a\"}"}}),
            json!({"type": "ping"}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 42}}),
            json!({"type": "message_stop"}),
        ];
        for event in &events {
            fold.push("", event, &mut out).unwrap();
        }
        assert_eq!(out[0], StreamEvent::ReasoningDelta("hmm".into()));
        assert_eq!(out[1], StreamEvent::ContentDelta("ok".into()));
        assert!(
            matches!(&out[2], StreamEvent::ToolCallStarted { index: 0, name, .. } if name == "read")
        );
        let StreamEvent::Finished {
            message,
            finish_reason,
            usage,
        } = fold.finish().unwrap()
        else {
            panic!("not finished");
        };
        assert_eq!(finish_reason, "tool_calls");
        assert_eq!(message.reasoning.as_deref(), Some("hmm"));
        assert_eq!(message.tool_calls[0].arguments, r#"{"path":"a"}"#);
        let usage = usage.unwrap();
        assert_eq!(usage.prompt_tokens, 115);
        assert_eq!(usage.completion_tokens, 42);
        assert_eq!(usage.cache_read_tokens, 100);
        assert_eq!(usage.cache_write_tokens, 5);
    }

    #[test]
    fn an_error_event_is_classified() {
        let mut fold = MessageFold::default();
        let err = fold
            .push(
                "error",
                &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
                &mut VecDeque::new(),
            )
            .unwrap_err();
        assert!(
            matches!(err, LlmError::Server { status: 529, .. }),
            "{err:?}"
        );
        assert!(MessageFold::default().finish().is_err());
    }
}
