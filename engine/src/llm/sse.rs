//! The one SSE reader both model clients share: the `text/event-stream`
//! frames of a successful response (`eventsource-stream`) are handed to a
//! provider's [`SseFold`], which turns them into [`StreamEvent`]s. The
//! stream ends when the fold says the message is complete, on an error, on
//! the idle timeout, or on cancellation (which drops the response and so
//! the connection).

use std::collections::VecDeque;
use std::time::Duration;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::stream::{BoxStream, StreamExt};
use tokio_util::sync::CancellationToken;

use super::chat::EventStream;
use super::error::{LlmError, error_chain};
use super::types::StreamEvent;

/// Whether a folded event completed the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flow {
    /// Read on.
    More,
    /// The message is complete: nothing further is read.
    Done,
}

/// A provider's reading of one streamed message.
pub(super) trait SseFold: Default + Send + 'static {
    /// Folds one SSE event (its `event:` name and its trimmed `data:`),
    /// queueing the stream events it produces in `out`.
    fn event(
        &mut self,
        name: &str,
        data: &str,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Flow, LlmError>;

    /// The closing `Finished` event, once the fold said [`Flow::Done`].
    fn complete(self) -> Result<StreamEvent, LlmError>;

    /// The closing event when the connection ended before [`Flow::Done`]
    /// (an error unless the message is whole anyway).
    fn closed(self) -> Result<StreamEvent, LlmError> {
        self.complete()
    }
}

type SseStream = BoxStream<'static, Result<Event, EventStreamError<reqwest::Error>>>;

struct State<F> {
    /// `None` once the stream ended; dropping it closes the connection.
    sse: Option<SseStream>,
    fold: F,
    pending: VecDeque<StreamEvent>,
    cancel: CancellationToken,
    idle_timeout: Duration,
}

/// The events of a `text/event-stream` response, as `F` folds them.
pub(super) fn sse_events<F: SseFold>(
    response: reqwest::Response,
    cancel: CancellationToken,
    idle_timeout: Duration,
) -> EventStream {
    let state = State {
        sse: Some(response.bytes_stream().eventsource().boxed()),
        fold: F::default(),
        pending: VecDeque::new(),
        cancel,
        idle_timeout,
    };
    futures::stream::unfold(state, next_item).boxed()
}

type Item<F> = Option<(Result<StreamEvent, LlmError>, State<F>)>;

async fn next_item<F: SseFold>(mut st: State<F>) -> Item<F> {
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
            Ok(None) => {
                let last = std::mem::take(&mut st.fold).closed();
                match end(&mut st, last) {
                    Ok(()) => continue,
                    Err(err) => return fail(st, err),
                }
            }
            Ok(Some(Err(err))) => return fail(st, sse_error(err)),
            Ok(Some(Ok(event))) => event,
        };
        match st
            .fold
            .event(&event.event, event.data.trim(), &mut st.pending)
        {
            Err(err) => return fail(st, err),
            Ok(Flow::More) => {}
            Ok(Flow::Done) => {
                let last = std::mem::take(&mut st.fold).complete();
                if let Err(err) = end(&mut st, last) {
                    return fail(st, err);
                }
            }
        }
    }
}

/// Closes the connection and queues `last` after the events still pending.
fn end<F>(st: &mut State<F>, last: Result<StreamEvent, LlmError>) -> Result<(), LlmError> {
    st.sse = None;
    st.pending.push_back(last?);
    Ok(())
}

/// Ends the stream with `err` as its last item.
fn fail<F>(mut st: State<F>, err: LlmError) -> Item<F> {
    st.sse = None;
    st.pending.clear();
    Some((Err(err), st))
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
