//! Turns streamed chunks into [`StreamEvent`]s and assembles the final
//! assistant message: text and reasoning concatenated, tool calls put
//! together by index (id and name from the first fragment, arguments
//! concatenated across fragments), the finish reason and the usage chunk.

use std::collections::{BTreeMap, VecDeque};

use super::error::LlmError;
use super::types::{ChatMessage, Role, StreamEvent, ToolCallRequest, Usage};
use super::wire::{Chunk, ToolCallDelta};

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
    started: bool,
}

/// Accumulates one completion's chunks.
#[derive(Default)]
pub(crate) struct Assembler {
    content: String,
    reasoning: String,
    calls: BTreeMap<u32, PartialCall>,
    last_index: Option<u32>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
}

impl Assembler {
    /// Whether a choice already carried a finish reason.
    pub(crate) fn saw_finish(&self) -> bool {
        self.finish_reason.is_some()
    }

    /// Folds one chunk in, queueing the events it produces.
    pub(crate) fn push(
        &mut self,
        chunk: Chunk,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), LlmError> {
        if let Some(err) = chunk.error {
            return Err(stream_error(&err));
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.into());
        }
        // One completion is requested (n = 1); other choices are not ours.
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            let delta = choice.delta;
            if let Some(r) = delta.reasoning_content.or(delta.reasoning)
                && !r.is_empty()
            {
                self.reasoning.push_str(&r);
                out.push_back(StreamEvent::ReasoningDelta(r));
            }
            if let Some(c) = delta.content
                && !c.is_empty()
            {
                self.content.push_str(&c);
                out.push_back(StreamEvent::ContentDelta(c));
            }
            for call in delta.tool_calls {
                self.push_call(call, out);
            }
            if let Some(reason) = choice.finish_reason
                && !reason.is_empty()
            {
                self.finish_reason = Some(reason);
            }
        }
        Ok(())
    }

    fn push_call(&mut self, delta: ToolCallDelta, out: &mut VecDeque<StreamEvent>) {
        let index = self.call_index(&delta);
        self.last_index = Some(index);
        let call = self.calls.entry(index).or_default();
        if let Some(id) = delta.id.filter(|id| !id.is_empty())
            && call.id.is_empty()
        {
            call.id = id;
        }
        if let Some(f) = delta.function {
            if let Some(name) = f.name.filter(|n| !n.is_empty())
                && call.name.is_empty()
            {
                call.name = name;
            }
            if let Some(args) = f.arguments {
                call.arguments.push_str(&args);
            }
        }
        if !call.started && !call.name.is_empty() {
            if call.id.is_empty() {
                call.id = format!("call_{}", uuid::Uuid::new_v4().simple());
            }
            call.started = true;
            out.push_back(StreamEvent::ToolCallStarted {
                index,
                id: call.id.clone(),
                name: call.name.clone(),
            });
        }
    }

    /// The index a fragment belongs to. Servers that leave `index` out send
    /// a new id when a new call starts.
    fn call_index(&self, delta: &ToolCallDelta) -> u32 {
        if let Some(i) = delta.index {
            return i;
        }
        match (self.last_index, delta.id.as_deref()) {
            (None, _) => 0,
            (Some(last), Some(id)) if !id.is_empty() => {
                let same = self.calls.get(&last).is_some_and(|c| c.id == id);
                if same {
                    last
                } else {
                    self.calls.keys().next_back().map_or(0, |k| k + 1)
                }
            }
            (Some(last), _) => last,
        }
    }

    /// The final event: the assembled assistant message.
    pub(crate) fn finish(self) -> Result<StreamEvent, LlmError> {
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for (index, call) in self.calls {
            if call.name.is_empty() {
                return Err(LlmError::Protocol(format!(
                    "tool call at index {index} has no function name"
                )));
            }
            let arguments = if call.arguments.trim().is_empty() {
                "{}".to_owned()
            } else {
                call.arguments
            };
            tool_calls.push(ToolCallRequest {
                id: call.id,
                name: call.name,
                arguments,
            });
        }
        let finish_reason = self.finish_reason.unwrap_or_else(|| {
            if tool_calls.is_empty() {
                "stop".to_owned()
            } else {
                "tool_calls".to_owned()
            }
        });
        Ok(StreamEvent::Finished {
            message: ChatMessage {
                role: Role::Assistant,
                content: self.content,
                reasoning: (!self.reasoning.is_empty()).then_some(self.reasoning),
                tool_calls,
                tool_call_id: None,
            },
            finish_reason,
            usage: self.usage,
        })
    }
}

/// An `{"error": ...}` object received inside the stream.
fn stream_error(err: &serde_json::Value) -> LlmError {
    let status = err
        .get("code")
        .and_then(|c| {
            c.as_u64()
                .or_else(|| c.as_str().and_then(|s| s.parse().ok()))
        })
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .unwrap_or(500);
    let body = serde_json::json!({ "error": err }).to_string();
    LlmError::from_status(status, None, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(v: serde_json::Value) -> Chunk {
        serde_json::from_value(v).expect("chunk json")
    }

    #[test]
    fn fragments_without_index_split_by_id() {
        let mut a = Assembler::default();
        let mut out = VecDeque::new();
        for v in [
            serde_json::json!({"choices":[{"index":0,"delta":{"tool_calls":[{"id":"a","function":{"name":"ls","arguments":"{\"pa"}}]}}]}),
            serde_json::json!({"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"th\":1}"}}]}}]}),
            serde_json::json!({"choices":[{"index":0,"delta":{"tool_calls":[{"id":"b","function":{"name":"read","arguments":""}}]}}]}),
        ] {
            a.push(chunk(v), &mut out).expect("push");
        }
        let StreamEvent::Finished {
            message,
            finish_reason,
            ..
        } = a.finish().expect("finish")
        else {
            panic!("not finished")
        };
        assert_eq!(finish_reason, "tool_calls");
        assert_eq!(message.tool_calls.len(), 2);
        assert_eq!(message.tool_calls[0].arguments, "{\"path\":1}");
        assert_eq!(message.tool_calls[1].name, "read");
        assert_eq!(message.tool_calls[1].arguments, "{}");
        assert_eq!(out.len(), 2, "two ToolCallStarted events: {out:?}");
    }

    #[test]
    fn missing_id_gets_generated_and_error_object_maps() {
        let mut a = Assembler::default();
        let mut out = VecDeque::new();
        a.push(
            chunk(serde_json::json!({"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"ls"}}]}}]})),
            &mut out,
        )
        .expect("push");
        match out.pop_front() {
            Some(StreamEvent::ToolCallStarted { id, .. }) => assert!(id.starts_with("call_")),
            other => panic!("unexpected {other:?}"),
        }
        let err = a
            .push(
                chunk(serde_json::json!({"error":{"code":429,"message":"slow"}})),
                &mut out,
            )
            .expect_err("error chunk");
        assert!(matches!(err, LlmError::RateLimited { .. }), "{err:?}");
        let err = stream_error(&serde_json::json!({"message":"boom"}));
        assert_eq!(
            err,
            LlmError::Server {
                status: 500,
                message: "boom".into()
            }
        );
    }
}
