//! `agent-runner`: registers with a control plane, holds one ControlChannel
//! for its whole life, and runs coding agents through SDK adapters.
//!
//! The source is layered; a folder imports only from folders below it
//! (`runner/tests/architecture.rs` checks it):
//!
//! | layer | what it holds |
//! |---|---|
//! | [`cli`] | the commands (`run`, `demo`, `doctor`, `ps`, …) |
//! | `runner` | one whole runner: start-up, restore, shutdown |
//! | `ops` | health endpoints, `/status`, the admin socket, logging |
//! | [`link`] | the ControlChannel: register, read, send, reconnect |
//! | `tasks` | dispatch, mailboxes, the agent and thread tasks, SDKs |
//! | `delivery` | outbound messages, outbox, in-flight set, journal, transcripts |
//! | `host` | store, workspaces, sandbox, credentials, GitHub, skills |
//! | [`config`] | settings, resolved once at start-up |
//! | `observe` | metrics and the link's published state |
//! | `util` | redaction, allocator, proxy support |
//!
//! A request's path: `link` reads it off the ControlChannel → `tasks`
//! dispatches it to an agent or thread task → the SDK adapter's events
//! become updates (`delivery`) → back out through `link`.
//! See `docs/architecture.md`.

pub mod cli;
pub mod config;
mod delivery;
mod host;
pub mod link;
mod observe;
mod ops;
mod runner;
mod tasks;
mod util;

// What the binary, the integration tests, the benchmarks and the fuzz
// harness reach; everything else is private to the crate.
pub use delivery::{in_flight, journal, messages};
pub use host::{client, credentials, github, sandbox, store, workspace};
pub use observe::metrics;
pub use runner::{Runner, restore};
pub use tasks::{context, dispatch, sdks};
pub use util::{proxy, redact};
