//! End-to-end tests: the real `agent-runner` binary against the real mock
//! control plane over loopback, with the scripted adapter running real
//! commands. Compiled as a test target of the runner package (see
//! runner/Cargo.toml) so the binary under test is always the fresh one.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fakes;
mod support;

mod acked;
mod admin;
mod agent_uid;
mod approvals;
mod approvals_claude;
mod approvals_codex;
mod approvals_engine;

mod additions;
mod claude;
mod claude_config;
mod code_agent;
mod code_agent_serve;
mod code_agent_serve_hardening;
mod codex;
mod codex_login;
mod credentials;
mod doctor;
mod engine_race;
mod engine_state;
mod github;
mod github_git;
mod harness;
mod health;
mod idle;
mod large_messages;
mod lifecycle;
mod limits;
mod link;
mod local_endpoints;
mod logs;
mod mcp;
mod operator_cli;
mod protocol;
mod protocol_v07;
mod proxy;
mod real_cli_v07;
mod real_sdk;
mod replicas;
mod sandbox;
mod sandbox_limits;
mod scale;
mod secret_files;
mod signal_scope;
mod skills;
mod soak;
mod thread_skills;
mod transcript;
mod turn_queue;
mod v07_cp;
