//! A coding-agent engine that implements `a3s.code.agent.v1.CodeAgentService`.
//!
//! Used as a library (the runner embeds it behind the `code-agent` adapter)
//! and as a standalone gRPC server (`code-agent serve --listen ADDR`).

pub mod llm;
pub mod permissions;
pub mod providers;
pub mod skills;
pub mod tools;
