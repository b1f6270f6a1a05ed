//! The engine driven through a real tonic server on loopback, with the mock
//! OpenAI-compatible model (`testing::MockLlm`) scripting every answer.

mod common;

mod cli;
mod context;
mod control;
mod hitl;
mod lanes;
mod loop_tools;
mod sessions;
mod skills;
mod structured;
