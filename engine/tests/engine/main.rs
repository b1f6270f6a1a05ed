//! The engine driven through a real tonic server on loopback, with the mock
//! OpenAI-compatible model (`testing::MockLlm`) scripting every answer.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod anthropic;
mod cli;
mod context;
mod control;
mod cron;
mod guard;
mod hitl;
mod isolation;
mod lanes;
mod loop_tools;
mod lsp;
mod mcp;
mod memory;
mod planning;
mod sessions;
mod skills;
mod structured;
mod venv_tools;
