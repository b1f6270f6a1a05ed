//! `agent-runner`: registers with a control plane, holds one ControlChannel
//! for its whole life, and runs coding agents through SDK adapters.
//!
//! A request's path: [`link`] reads it off the ControlChannel →
//! [`dispatch`] validates and routes it → an [`agent`] or [`thread`] task
//! calls the SDK adapter → the adapter's turn events become updates
//! ([`updates`]) → [`outbox`] → back out through [`link`].
//! Operators watch it through [`health`] (`/livez`, `/readyz`, `/metrics`
//! from [`metrics`], `/status` from [`status`]).
//! See `docs/architecture.md`.

pub mod admin;
pub mod agent;
pub mod allocator;
pub mod cli;
pub mod client;
pub mod codex_login;
pub mod commands;
pub mod config;
pub mod credentials;
pub mod delivery;
pub mod dispatch;
pub mod github;
pub mod health;
pub mod journal;
pub mod link;
pub mod link_state;
pub mod logging;
pub mod mailboxes;
pub mod mcp;
pub mod metrics;
pub mod outbox;
pub mod procs;
pub mod proxy;
pub mod redact;
pub mod restore;
pub mod runner;
pub mod runtime;
pub mod sandbox;
pub mod sdk_probe;
pub mod sdks;
pub mod secret;
pub mod skills;
pub mod startup_pages;
pub mod state;
pub mod status;
pub mod store_thread;
pub mod thread;
pub mod transcript;
pub mod updates;
pub mod workspace;
