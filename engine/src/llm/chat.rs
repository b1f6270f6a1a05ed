//! What the agent loop calls: a [`ChatModel`] streams its answer as an
//! [`EventStream`]. Kept apart from the clients that implement it, so the
//! clients and the stream reader name it without going through the
//! module root.

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::error::LlmError;
use super::types::{ChatRequest, StreamEvent};

/// The events of one completion; ends after `Finished` or an `Err` item.
pub type EventStream = futures::stream::BoxStream<'static, Result<StreamEvent, LlmError>>;

/// A chat model that streams its answer.
///
/// Retries (429 honouring Retry-After, 5xx, connect errors) happen inside
/// `stream` before the first event; once events flow, a failure is an `Err`
/// item and the stream ends. Cancelling `cancel` ends the call (or the stream)
/// with [`LlmError::Cancelled`] and drops the connection.
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// Streams the completion of `request` as [`StreamEvent`]s until it ends, fails or `cancel` fires (which drops the connection).
    async fn stream(
        &self,
        request: ChatRequest,
        cancel: CancellationToken,
    ) -> Result<EventStream, LlmError>;
}
