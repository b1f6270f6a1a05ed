//! The event stream of one completion: SSE frames (`eventsource-stream`) of a
//! successful response parsed into chunks, folded by the [`Assembler`], and
//! ended by `[DONE]`, an error, the idle timeout, or cancellation (which drops
//! the response and so the connection).

use std::collections::VecDeque;
use std::time::Duration;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::stream::{BoxStream, StreamExt};
use tokio_util::sync::CancellationToken;

use super::EventStream;
use super::assemble::Assembler;
use super::error::LlmError;
use super::types::StreamEvent;
use super::wire::{Chunk, Completion};

type SseStream = BoxStream<'static, Result<Event, EventStreamError<reqwest::Error>>>;

struct State {
    /// `None` once the stream ended; dropping it closes the connection.
    sse: Option<SseStream>,
    assembler: Assembler,
    pending: VecDeque<StreamEvent>,
    cancel: CancellationToken,
    idle_timeout: Duration,
}

/// The events of a `text/event-stream` response.
pub(crate) fn sse_events(
    response: reqwest::Response,
    cancel: CancellationToken,
    idle_timeout: Duration,
) -> EventStream {
    let state = State {
        sse: Some(response.bytes_stream().eventsource().boxed()),
        assembler: Assembler::default(),
        pending: VecDeque::new(),
        cancel,
        idle_timeout,
    };
    futures::stream::unfold(state, next_item).boxed()
}

async fn next_item(mut st: State) -> Option<(Result<StreamEvent, LlmError>, State)> {
    loop {
        if let Some(event) = st.pending.pop_front() {
            return Some((Ok(event), st));
        }
        let sse = st.sse.as_mut()?;
        let next = tokio::select! {
            biased;
            () = st.cancel.cancelled() => return fail(st, LlmError::Cancelled),
            next = tokio::time::timeout(st.idle_timeout, sse.next()) => next,
        };
        let event = match next {
            Err(_) => return fail(st, LlmError::Timeout),
            Ok(None) if st.assembler.saw_finish() => return finish(st),
            Ok(None) => {
                let err = LlmError::Protocol("the stream ended before [DONE]".into());
                return fail(st, err);
            }
            Ok(Some(Err(err))) => return fail(st, sse_error(err)),
            Ok(Some(Ok(event))) => event,
        };
        let data = event.data.trim();
        if data == "[DONE]" {
            return finish(st);
        }
        if event.event == "error" {
            let err = LlmError::from_status(500, None, data);
            return fail(st, err);
        }
        if data.is_empty() {
            continue;
        }
        let chunk = match serde_json::from_str::<Chunk>(data) {
            Ok(chunk) => chunk,
            Err(e) => {
                let err = LlmError::Protocol(format!("a stream chunk is not valid JSON: {e}"));
                return fail(st, err);
            }
        };
        if let Err(err) = st.assembler.push(chunk, &mut st.pending) {
            return fail(st, err);
        }
    }
}

/// Ends the stream with `err` as its last item.
fn fail(mut st: State, err: LlmError) -> Option<(Result<StreamEvent, LlmError>, State)> {
    st.sse = None;
    st.pending.clear();
    Some((Err(err), st))
}

/// Ends the stream with the assembled `Finished` event as its last item.
fn finish(mut st: State) -> Option<(Result<StreamEvent, LlmError>, State)> {
    st.sse = None;
    match std::mem::take(&mut st.assembler).finish() {
        Ok(event) => Some((Ok(event), st)),
        Err(err) => fail(st, err),
    }
}

/// The events of a non-streaming `application/json` completion, for servers
/// that ignore `stream: true`: the whole body is read (up to `max_bytes`) and
/// replayed as deltas followed by `Finished`.
pub(crate) async fn json_events(
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

/// Reads a response body, failing once it grows past `max_bytes`.
pub(crate) async fn read_capped(
    response: reqwest::Response,
    max_bytes: usize,
) -> Result<Vec<u8>, LlmError> {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| {
            LlmError::Transport(format!("reading the response failed: {}", error_chain(&e)))
        })?;
        if body.len() + chunk.len() > max_bytes {
            return Err(LlmError::Protocol(format!(
                "the response body is larger than {max_bytes} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn sse_error(err: EventStreamError<reqwest::Error>) -> LlmError {
    match err {
        EventStreamError::Transport(e) if e.is_timeout() => LlmError::Timeout,
        EventStreamError::Transport(e) => {
            LlmError::Transport(format!("the stream broke off: {}", error_chain(&e)))
        }
        EventStreamError::Utf8(e) => LlmError::Protocol(format!("the stream is not UTF-8: {e}")),
        EventStreamError::Parser(e) => LlmError::Protocol(format!("bad SSE framing: {e}")),
    }
}

/// An error and its sources on one line (reqwest's own message is terse).
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
