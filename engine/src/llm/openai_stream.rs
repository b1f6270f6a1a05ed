//! How a Chat Completions answer becomes stream events: SSE chunks (read by
//! the shared reader in `sse.rs`) parsed and folded by the [`Assembler`]
//! until `[DONE]`, or a non-streaming `application/json` completion (from
//! servers that ignore `stream: true`) replayed as the same events.

use std::collections::VecDeque;
use std::time::Duration;

use futures::stream::StreamExt;
use tokio_util::sync::CancellationToken;

use super::assemble::Assembler;
use super::chat::EventStream;
use super::error::LlmError;
use super::http::read_capped;
use super::sse::{self, Flow, SseFold};
use super::types::StreamEvent;
use super::wire::{Chunk, Completion};

/// The events of a Chat Completions `text/event-stream` response.
pub(super) fn sse_events(
    response: reqwest::Response,
    cancel: CancellationToken,
    idle_timeout: Duration,
) -> EventStream {
    sse::sse_events::<Assembler>(response, cancel, idle_timeout)
}

/// Chunks are `data: {json}`; `data: [DONE]` ends the stream, an `error`
/// event fails it.
impl SseFold for Assembler {
    fn event(
        &mut self,
        name: &str,
        data: &str,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Flow, LlmError> {
        if data == "[DONE]" {
            return Ok(Flow::Done);
        }
        if name == "error" {
            return Err(LlmError::from_status(500, None, data));
        }
        if data.is_empty() {
            return Ok(Flow::More);
        }
        let chunk = serde_json::from_str::<Chunk>(data)
            .map_err(|e| LlmError::Protocol(format!("a stream chunk is not valid JSON: {e}")))?;
        self.push(chunk, out)?;
        Ok(Flow::More)
    }

    fn complete(self) -> Result<StreamEvent, LlmError> {
        self.finish()
    }

    /// A stream that closes without `[DONE]` is whole only if a choice
    /// already carried its finish reason.
    fn closed(self) -> Result<StreamEvent, LlmError> {
        if !self.saw_finish() {
            return Err(LlmError::Protocol("the stream ended before [DONE]".into()));
        }
        self.finish()
    }
}

/// The events of a non-streaming `application/json` completion, for servers
/// that ignore `stream: true`: the whole body is read (up to `max_bytes`) and
/// replayed as deltas followed by `Finished`.
pub(super) async fn json_events(
    response: reqwest::Response,
    cancel: CancellationToken,
    idle_timeout: Duration,
    max_bytes: usize,
) -> Result<EventStream, LlmError> {
    let body = tokio::select! {
        biased;
        () = cancel.cancelled() => return Err(LlmError::Cancelled),
        body = tokio::time::timeout(idle_timeout, read_capped(response, max_bytes)) => {
            body.map_err(|_| LlmError::Timeout)??
        }
    };
    let completion: Completion = serde_json::from_slice(&body)
        .map_err(|e| LlmError::Protocol(format!("the completion body is not valid JSON: {e}")))?;
    let mut assembler = Assembler::default();
    let mut events = VecDeque::new();
    assembler.push(completion.into_chunk(), &mut events)?;
    events.push_back(assembler.finish()?);
    Ok(futures::stream::iter(events.into_iter().map(Ok)).boxed())
}
