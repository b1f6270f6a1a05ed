//! Host resources: what the runner keeps on the machine it runs on.
//!
//! The SQLite store ([`store`], written from its own thread by
//! [`store_thread`]), per-thread workspaces ([`workspace`]), the agent
//! sandbox ([`sandbox`]) and the processes it accounts for ([`procs`]),
//! the git credential broker ([`credentials`]), GitHub installation tokens
//! ([`github`]), skill packages ([`skills`]), and the gRPC client to the
//! control plane ([`client`]) that the link and the GitHub token source use.

pub mod client;
pub mod credentials;
pub mod github;
pub(crate) mod procs;
pub mod sandbox;
pub(crate) mod skills;
pub mod store;
pub(crate) mod store_thread;
pub mod workspace;
