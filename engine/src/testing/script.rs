//! The scripted replies of [`MockLlm`](super::MockLlm) and how a streamed one
//! is rendered into OpenAI-style `chat.completion.chunk` SSE events.

use std::time::Duration;

use serde_json::{Value, json};

/// One scripted answer to a `POST …/chat/completions`.
#[derive(Clone, Debug, PartialEq)]
pub enum MockReply {
    /// `200 text/event-stream`: the chunks as SSE events, then `data: [DONE]`
    /// (unless a [`MockChunk::Abort`] cuts it short).
    Stream(Vec<MockChunk>),
    /// `200 application/json` with this body (a non-streaming completion).
    Json(Value),
    /// An error status with this body and, when set, `Retry-After: <secs>`.
    Error {
        /// The HTTP status.
        status: u16,
        /// The response body.
        body: String,
        /// A `Retry-After` header in seconds, if set.
        retry_after: Option<u64>,
    },
    /// Reads the request and never answers (for timeouts and cancellation).
    Hang,
}

/// One step of a streamed reply.
#[derive(Clone, Debug, PartialEq)]
pub enum MockChunk {
    /// A `delta.content` chunk.
    Text(String),
    /// A `delta.reasoning_content` chunk.
    Reasoning(String),
    /// A tool call sent in several chunks: the first carries `index`, `id`
    /// and `name` with empty arguments, then `arguments` follows in three
    /// pieces (fewer when it is shorter than three characters).
    ToolCall {
        /// The call's index.
        index: u32,
        /// The call's id.
        id: String,
        /// The tool called.
        name: String,
        /// The JSON arguments, sent in pieces.
        arguments: String,
    },
    /// The final `choices: []` chunk with `usage` (total = prompt + completion).
    Usage {
        /// Prompt tokens.
        prompt: u32,
        /// Completion tokens.
        completion: u32,
    },
    /// A chunk with an empty delta and this `finish_reason`.
    Finish(String),
    /// Waits this long before the next chunk.
    Delay(Duration),
    /// This JSON, sent as-is as one `data:` event.
    Raw(Value),
    /// Flushes what was sent, then breaks the connection off (no `[DONE]`):
    /// a mid-stream failure.
    Abort,
}

impl MockReply {
    /// A streamed text answer: the text in word-sized chunks, `finish_reason:
    /// "stop"`, and a usage chunk (10 prompt tokens, one completion token per word).
    pub fn text(text: &str) -> MockReply {
        let mut chunks: Vec<MockChunk> = text
            .split_inclusive(' ')
            .map(|piece| MockChunk::Text(piece.to_owned()))
            .collect();
        let words = u32::try_from(chunks.len()).unwrap_or(u32::MAX).max(1);
        chunks.push(MockChunk::Finish("stop".into()));
        chunks.push(MockChunk::Usage {
            prompt: 10,
            completion: words,
        });
        MockReply::Stream(chunks)
    }

    /// A streamed single tool call (`finish_reason: "tool_calls"`, usage 10/5).
    pub fn tool_call(id: &str, name: &str, arguments: Value) -> MockReply {
        MockReply::tool_calls(&[(id, name, arguments)])
    }

    /// Several tool calls in one answer (parallel calls), indexed in order.
    pub fn tool_calls(calls: &[(&str, &str, Value)]) -> MockReply {
        let mut chunks: Vec<MockChunk> = calls
            .iter()
            .zip(0u32..)
            .map(|((id, name, arguments), index)| MockChunk::ToolCall {
                index,
                id: (*id).to_owned(),
                name: (*name).to_owned(),
                arguments: arguments.to_string(),
            })
            .collect();
        chunks.push(MockChunk::Finish("tool_calls".into()));
        chunks.push(MockChunk::Usage {
            prompt: 10,
            completion: 5,
        });
        MockReply::Stream(chunks)
    }

    /// An error reply with an OpenAI-style `{"error": {"message": …}}` body.
    pub fn error(status: u16, message: &str) -> MockReply {
        MockReply::Error {
            status,
            body: json!({ "error": { "message": message, "type": "mock_error" } }).to_string(),
            retry_after: None,
        }
    }

    /// `429` asking the client to retry after `seconds`.
    pub fn rate_limited(seconds: u64) -> MockReply {
        MockReply::Error {
            status: 429,
            body: json!({ "error": { "message": "mock: rate limited", "type": "rate_limit" } })
                .to_string(),
            retry_after: Some(seconds),
        }
    }

    /// The same streamed reply with its usage chunk set to these counts
    /// (added at the end when it had none). Other replies are unchanged.
    pub fn with_usage(self, prompt: u32, completion: u32) -> MockReply {
        match self {
            MockReply::Stream(mut chunks) => {
                chunks.retain(|c| !matches!(c, MockChunk::Usage { .. }));
                chunks.push(MockChunk::Usage { prompt, completion });
                MockReply::Stream(chunks)
            }
            other => other,
        }
    }
}

/// One piece of a rendered SSE body.
pub(crate) enum Piece {
    /// Bytes of the body (each event is split into two writes).
    Bytes(Vec<u8>),
    Sleep(Duration),
    Abort,
}

/// The SSE body of a streamed reply, for a request naming `model`.
pub(crate) fn render(chunks: &[MockChunk], model: &str) -> Vec<Piece> {
    let envelope = |choices: Value| {
        json!({
            "id": "chatcmpl-mock",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": choices,
        })
    };
    let delta =
        |delta: Value| envelope(json!([{ "index": 0, "delta": delta, "finish_reason": null }]));
    let mut pieces = Vec::new();
    push_event(
        &mut pieces,
        &delta(json!({ "role": "assistant", "content": "" })),
    );
    for chunk in chunks {
        match chunk {
            MockChunk::Text(text) => push_event(&mut pieces, &delta(json!({ "content": text }))),
            MockChunk::Reasoning(text) => {
                push_event(&mut pieces, &delta(json!({ "reasoning_content": text })));
            }
            MockChunk::ToolCall {
                index,
                id,
                name,
                arguments,
            } => {
                let first = json!({ "tool_calls": [{
                    "index": index, "id": id, "type": "function",
                    "function": { "name": name, "arguments": "" },
                }]});
                push_event(&mut pieces, &delta(first));
                for part in split_in_three(arguments) {
                    let more = json!({ "tool_calls": [{
                        "index": index, "function": { "arguments": part },
                    }]});
                    push_event(&mut pieces, &delta(more));
                }
            }
            MockChunk::Usage { prompt, completion } => {
                let mut usage = envelope(json!([]));
                usage["usage"] = json!({
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt.saturating_add(*completion),
                });
                push_event(&mut pieces, &usage);
            }
            MockChunk::Finish(reason) => push_event(
                &mut pieces,
                &envelope(json!([{ "index": 0, "delta": {}, "finish_reason": reason }])),
            ),
            MockChunk::Delay(d) => pieces.push(Piece::Sleep(*d)),
            MockChunk::Raw(value) => push_event(&mut pieces, value),
            MockChunk::Abort => {
                pieces.push(Piece::Abort);
                return pieces;
            }
        }
    }
    pieces.push(Piece::Bytes(b"data: [DONE]\n\n".to_vec()));
    pieces
}

/// `data: <json>\n\n`, written in two parts so a reader must reassemble frames.
fn push_event(pieces: &mut Vec<Piece>, value: &Value) {
    let event = format!("data: {value}\n\n").into_bytes();
    let (a, b) = event.split_at(event.len() / 2);
    pieces.push(Piece::Bytes(a.to_vec()));
    pieces.push(Piece::Bytes(b.to_vec()));
}

/// `text` in three pieces on character boundaries (fewer if it is shorter).
fn split_in_three(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let size = chars.len().div_ceil(3);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_text_and_char_boundaries() {
        assert_eq!(split_in_three("{\"a\":\"é\"}").concat(), "{\"a\":\"é\"}");
        assert_eq!(split_in_three("abcdefg").len(), 3);
        assert_eq!(split_in_three("ab"), vec!["a", "b"]);
        assert!(split_in_three("").is_empty());
    }

    #[test]
    fn with_usage_replaces_the_usage_chunk() {
        let MockReply::Stream(chunks) = MockReply::text("a b").with_usage(7, 3) else {
            panic!("stream expected")
        };
        let usage: Vec<_> = chunks
            .iter()
            .filter(|c| matches!(c, MockChunk::Usage { .. }))
            .collect();
        assert_eq!(
            usage,
            vec![&MockChunk::Usage {
                prompt: 7,
                completion: 3
            }]
        );
    }
}
