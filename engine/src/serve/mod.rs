//! `code-agent serve`: the engine as a standalone
//! `a3s.code.agent.v1.CodeAgentService` gRPC server, defined once for the
//! engine's `code-agent` binary and the runner's `agent-runner code-agent
//! serve`.
//!
//! Whoever reaches the port can run commands in the engine's workspaces,
//! so it listens on loopback by default, requires a bearer token (from
//! `--auth-token-file` or `AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN`, never a
//! flag value) unless `--insecure-no-auth`, serves TLS with `--tls-cert`
//! and `--tls-key`, and confines every workspace (`Initialize`, sessions)
//! to `--workspace-root`.
//!
//! * `args`: the flags, their environment variables and help ([`ServeArgs`]).
//! * `former_env`: the binary's former variable names, as hidden aliases.
//! * `guard`: the bearer token and TLS ([`ServeOptions`]).
//! * `grpc`: serving an [`crate::Engine`] on a listener ([`serve_with`]).
//! * `run`: from the flags to a served engine ([`run`]).

mod args;
mod former_env;
mod grpc;
mod guard;
mod run;

pub use args::{AUTH_TOKEN_ENV, DEFAULT_LISTEN, LogFormat, ServeArgs};
pub use former_env::{FORMER_AUTH_TOKEN_ENV, accept_former_env};
pub use grpc::{serve, serve_with};
pub use guard::{BearerToken, GuardSources, ServeOptions, TlsPem};
pub use run::{run, run_with};
