//! Shared plumbing for SDK adapters that drive an agent CLI as a child
//! process speaking newline-delimited JSON on stdin/stdout (`codex
//! app-server`, `claude -p --input-format stream-json`).
//!
//! What lives here, once, so the adapters never copy it:
//! - [`JsonChild`]: the child in its own process group, stdout parsed line by
//!   line (malformed lines are logged and skipped, over-long ones cut off),
//!   stderr forwarded to `tracing` at debug (its tail kept for error
//!   messages), responses routed to the request that waits for them, and the
//!   whole process tree killed on [`ChildHandle::kill`] (also reachable
//!   through the `JsonChild`) or drop.
//! - [`ChildHandle`]: a cheap clone for writers (turn controls, routers) that
//!   does not keep the process alive.
//! - [`runner_env`]: the runner's variables an SDK documents it needs,
//!   passed explicitly on top of the launcher's allowlist.
//! - [`find_program`]: a fast "is the binary there" check for `describe()`.
//! - [`cap_text`] / [`CappedText`]: the cap on text that travels inside one
//!   item update.
//! - [`TurnSink`]: routes a long-lived child's unsolicited lines to the turn
//!   that is running.
//! - [`ThreadTable`]: the adapter's per-thread slots, by thread and by agent.
//! - [`TurnInbox`]: what a turn task waits for — the child's next message
//!   for it, or the end of the turn (the child gone, or killed when it did
//!   not stop within the grace period after an interrupt).
//!
//! With the `fake` feature (test support only), the `fake` module holds
//! what the fake agent CLIs of the adapters' test suites share.
//!
//! The protocol on top (JSON-RPC ids, Claude Code `request_id`s) stays in the
//! adapter: it passes a function that says which lines are responses and
//! under which key.

mod child;
#[cfg(feature = "fake")]
pub mod fake;
mod inbox;
mod lines;
mod passthrough;
mod program;
mod sink;
mod threads;

pub use child::{ChildError, ChildHandle, ChildSpec, Inbound, JsonChild, ResponseKey};
pub use inbox::{Next, TurnInbox};
pub use passthrough::{NETWORK_ENV, runner_env};
pub use program::find_program;
pub use sdk_adapter::cap::{CappedText, OUTPUT_CAP_BYTES, cap_text};
pub use sink::TurnSink;
pub use threads::ThreadTable;
