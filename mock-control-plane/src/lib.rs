//! A real gRPC control plane for the runner's tests, its `demo` subcommand and
//! outside harnesses.
//!
//! [`MockControlPlane`] serves `companyhelm.runner.v1.AgentRunnerControlService`
//! with tonic on a loopback port. It records every registration and every
//! `ClientMessage` the runner sends, pushes `ServerMessage`s into the live
//! `ControlChannel` stream, waits for messages matching a predicate (timeouts
//! print what did arrive), and injects faults: a broken stream, failing
//! registrations or streams, a stop and a restart on the same port. It
//! serves several runners at once when configured with a secret per runner
//! ([`MockConfig::runners`], [`RunnerView`]): a control plane knows a runner
//! by its credentials, so each secret is one runner with its own stream and
//! sequence numbers. It speaks acknowledged delivery ([`acks`]): accepts it (or refuses it, to
//! play a legacy control plane), acknowledges as it processes (or late, or
//! never), drops duplicates and reports what it saw.
//!
//! The binary (`src/main.rs`) wraps the same library for harnesses written in
//! any language: [`stdio`] speaks JSON lines, [`scenario`] runs a YAML script.
//! Both use the canonical protobuf JSON mapping ([`json`]).

pub mod acks;
pub mod approvals;
mod auth;
mod config;
pub mod github_api;
pub mod json;
pub mod matcher;
mod plane;
mod prefix;
mod runner_view;
mod runners;
pub mod scenario;
mod server;
mod server_v07;
mod state;
pub mod stdio;
pub mod versions;

#[cfg(test)]
mod plane_tests;
#[cfg(test)]
mod test_runner;

pub use acks::{AckMode, SequenceReport};
pub use config::{DEFAULT_RUNNER, GithubInstallation, GithubRpcNames, MockConfig, RunnerIdentity};
pub use plane::MockControlPlane;
pub use runner_view::RunnerView;
pub use state::{DroppedMessage, Registration, TimelineEvent, TimelineRef};
pub use versions::{Outgoing, Protocol};

/// The protocol crate, re-exported so users need not name it separately.
pub use agent_runner_proto as proto;
