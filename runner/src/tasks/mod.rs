//! The tasks that own agents and threads, and the routing that feeds them.
//!
//! [`dispatch`] validates an inbound request and routes it into a mailbox
//! ([`mailboxes`], carrying [`mail`] messages); each agent ([`agent`]) and
//! thread ([`thread`]) is a task that drives its SDK adapter ([`sdks`]) and
//! turns the adapter's events into updates for delivery; a thread's next
//! turn waits for a turn slot in [`turn_wait`] when every one is taken.
//! [`approvals`] is the runner-wide side of the agents' approval requests.
//! [`context`] is what every task is handed: the shared handles of one
//! runner.

pub(crate) mod agent;
pub mod approvals;
pub(crate) mod codex_login;
pub mod context;
pub mod dispatch;
pub(crate) mod mail;
pub(crate) mod mailboxes;
pub(crate) mod mcp_spec;
pub(crate) mod sdk_probe;
pub mod sdks;
pub(crate) mod thread;
pub(crate) mod thread_only;
pub(crate) mod turn_wait;
