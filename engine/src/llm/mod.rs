//! Model clients (streaming) and the model types the agent loop speaks.
//!
//! * [`types`]: messages, tool specs, requests, usage, stream events.
//! * [`ChatModel`]: what the agent loop calls; tests may implement it directly.
//! * [`OpenAiClient`]: OpenAI-compatible Chat Completions (SSE, retries, timeouts, cancellation).
//! * [`AnthropicClient`]: the native Anthropic Messages API (same stack).
//!
//! Both clients share one stack: [`ClientOptions`] (`options`), one HTTP
//! client builder and POST with retries (`http`, `retry`), and one SSE
//! reader (`sse`) that each provider feeds with its own fold of the events
//! (`openai_stream`, `anthropic_stream`). This file only declares and
//! re-exports; the modules import each other without a cycle.

mod anthropic;
mod anthropic_stream;
mod anthropic_wire;
mod assemble;
mod chat;
mod error;
pub(crate) mod http;
mod openai;
mod openai_stream;
mod options;
mod retry;
mod sse;
pub mod types;
mod wire;

pub use anthropic::{ANTHROPIC_VERSION, AnthropicClient};
pub use chat::{ChatModel, EventStream};
pub use error::LlmError;
pub use openai::OpenAiClient;
pub use options::{ClientOptions, ModelProxy};
pub use types::{ChatMessage, ChatRequest, Role, StreamEvent, ToolCallRequest, ToolSpec, Usage};
