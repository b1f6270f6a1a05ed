//! Git credentials for agents: every git an agent runs asks
//! `agent-runner git-credential` (configured through the environment,
//! [`GitEnv`]), which asks the running runner over a Unix socket
//! ([`CredentialServer`]), which asks the token broker for an installation
//! token covering the repository. Tokens never touch the disk and never
//! pass through an agent's environment or arguments; only the socket path,
//! the thread id and the path of the thread's capability file do. The
//! socket answers only for the thread whose capability
//! ([`capability`]) is presented, and rate-limits each thread's costly
//! requests ([`limit`]).

mod broker;
pub mod capability;
pub mod client;
mod env;
pub mod limit;
pub mod protocol;
mod server;

pub use capability::{Capabilities, capability_file};
pub use env::{GitEnv, config_entries, inherited_config_count, shell_quote};
pub use limit::RateLimit;
pub use server::{
    CONNECTION_TIMEOUT, CredentialError, CredentialServer, IssuedToken, MAX_CONNECTIONS,
    MAX_SOCKET_PATH, ServerOptions, ThreadCheck, Tokens, socket_path,
};

#[cfg(test)]
mod tests;
