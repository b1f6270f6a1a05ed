//! The runner's settings, resolved once at start-up.
//!
//! Every setting can come from a flag, an `AGENT_RUNNER_*` environment
//! variable (clap reads both), or a key of the optional TOML file named by
//! `--config`; precedence is flag > env > file > default. A malformed file or
//! value exits with a message naming the key. The bearer secret is never a
//! plain flag value: it comes from `--secret-file` (or `secret_file` in the
//! file) or from `AGENT_RUNNER_SECRET`, which `main` reads and removes from
//! the environment before anything else runs, so agents never inherit it.
//!
//! One file per concern, each with its tests: `args` (the flags), `file`
//! (the TOML file), `url` (the control-plane URL), `run` (merging everything
//! into [`RunConfig`]), `sdks` (adapter settings), `github` (where
//! installation tokens come from), `sandbox` (the agent sandbox), `secret` (the bearer secret and the
//! GitHub App key, kept out of logs and `Debug`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde::Deserialize;

mod args;
mod file;
mod github;
mod run;
mod sandbox;
mod sdks;
pub(crate) mod secret;
mod url;

pub use args::*;
use file::{FileConfig, load_file};
pub use github::*;
pub use run::*;
pub use sandbox::*;
pub use sdks::*;
pub use secret::Secret;
pub use url::*;

/// A configuration problem, naming the key it concerns.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read or parsed.
    #[error("config file {path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong (toml's message names the key and line).
        message: String,
    },
    /// A setting has a bad value.
    #[error("{key}: {message}")]
    Key {
        /// The setting's key.
        key: &'static str,
        /// What is wrong with it.
        message: String,
    },
}

pub(crate) fn key_err(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Key {
        key,
        message: message.into(),
    }
}
