//! Git credentials for agents: every git an agent runs asks
//! `agent-runner git-credential` (configured through the environment,
//! [`GitEnv`]), which asks the running runner over a Unix socket
//! ([`CredentialServer`]), which asks the token broker for an installation
//! token covering the repository. Tokens never touch the disk and never
//! pass through an agent's environment or arguments; only the socket path
//! and the thread id do.

mod broker;
pub mod client;
mod env;
pub mod protocol;
mod server;
#[cfg(test)]
mod tests;

pub use env::{GitEnv, config_entries, inherited_config_count, shell_quote};
pub use server::{
    CONNECTION_TIMEOUT, CredentialError, CredentialServer, IssuedToken, MAX_CONNECTIONS,
    MAX_SOCKET_PATH, ThreadCheck, Tokens, socket_path,
};
