//! Model clients (streaming) and the model types the agent loop speaks.
//!
//! * [`types`]: messages, tool specs, requests, usage, stream events.
//! * [`OpenAiClient`]: OpenAI-compatible Chat Completions (SSE, retries, timeouts, cancellation).
//! * [`AnthropicClient`]: the native Anthropic Messages API (same stack).
//! * [`ChatModel`]: what the agent loop calls; tests may implement it directly.

mod anthropic;
mod anthropic_stream;
mod anthropic_wire;
mod assemble;
mod client;
mod error;
pub(crate) mod http;
mod retry;
mod stream;
pub mod types;
mod wire;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

pub use anthropic::{ANTHROPIC_VERSION, AnthropicClient};
pub use client::{ClientOptions, ModelProxy, OpenAiClient};
pub use error::LlmError;
pub use types::{ChatMessage, ChatRequest, Role, StreamEvent, ToolCallRequest, ToolSpec, Usage};

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
