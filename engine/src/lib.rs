//! A coding-agent engine that implements `a3s.code.agent.v1.CodeAgentService`.
//!
//! Used as a library (the runner embeds it behind the `code-agent` adapter)
//! and as a standalone gRPC server (`code-agent serve --listen ADDR`).
//! [`Engine::start`] builds one, [`Engine::grpc_service`] serves it,
//! [`serve()`] runs it on a listener until shut down, and [`serve::run`]
//! is all of `code-agent serve` from its flags ([`serve::ServeArgs`]).

pub mod llm;
pub mod lsp;
pub mod permissions;
pub mod providers;
pub mod serve;
pub mod skills;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tools;

mod agent_loop;
mod chunks;
mod context;
mod cron;
mod engine;
mod env_registry;
mod events;
mod hitl;
mod lanes;
pub mod mcp;
mod memory;
mod model;
mod planning;
mod prompt;
mod sandboxes;
mod service;
mod session;
mod store;
mod structured;
mod tool_call;

pub use engine::{Engine, EngineConfig};
pub use prompt::default_prompt;
pub use sandboxes::{EngineLauncher, Sandboxes};
pub use serve::{BearerToken, GuardSources, ServeOptions, TlsPem, serve, serve_with};
pub use service::Service;
pub use store::validate_session_id;
