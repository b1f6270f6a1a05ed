//! Test support (feature `testing`): [`MockLlm`], a mock OpenAI-compatible
//! Chat Completions server with real HTTP and SSE on loopback, scripted with
//! [`MockReply`]s, and [`MockAnthropic`], a mock Anthropic Messages API
//! (real SSE), scripted with [`AnthropicReply`]s. Used by this crate's tests, the `code-agent` adapter's
//! tests and the runner's end-to-end suite.
//!
//! ```no_run
//! # async fn demo() {
//! use code_agent_engine::testing::{MockLlm, MockReply};
//! use serde_json::json;
//! let mock = MockLlm::start(vec![
//!     MockReply::tool_call("call_1", "read", json!({"path": "README.md"})),
//!     MockReply::text("done"),
//! ])
//! .await;
//! // point a provider (or OPENAI_BASE_URL) at mock.base_url(), run a turn, then:
//! assert_eq!(mock.requests().len(), 2);
//! # }
//! ```

mod mock_anthropic;
mod mock_llm;
mod on_disk;
mod replay;
mod save_cost;
mod script;

pub use mock_anthropic::{AnthropicReply, MOCK_ANTHROPIC_USAGE, MockAnthropic};
pub use mock_llm::MockLlm;
pub use on_disk::session_on_disk;
pub use replay::ModelReplay;
pub use save_cost::{session_save_times, session_step_times};
pub use script::{MockChunk, MockReply};
