//! The runner's settings, resolved once at start-up.
//!
//! Every setting is defined once, as a clap flag of [`RunArgs`] (or of a
//! group flattened into it): its flag, its `AGENT_RUNNER_*` variable, its
//! TOML key (the field's name), its help with its `Default: …`, its
//! section. The config file ([`file`]), the sources `doctor` prints
//! ([`source`]) and docs/configuration.md ([`docs`]) are all read back from
//! those definitions ([`defs`]).
//!
//! Precedence is flag > env > file > default, merged by [`layer`]: the
//! command line and environment (clap) are one layer, the file another,
//! and each setting records where its value came from. A malformed value
//! exits with a message naming the key and where it came from. The one
//! exception to the precedence is the bearer secret: it is never a plain
//! flag value, and `AGENT_RUNNER_SECRET` (the secret itself, which `main`
//! reads and removes from the environment before anything else runs, so
//! agents never inherit it) is used only when no `secret_file` is set
//! anywhere (flag, variable or file); likewise
//! `AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN` under `code_agent_auth_token_file`.
//!
//! One file per concern, each with its tests: `args` (the flags), `file`
//! (the TOML file), `url` (the control-plane URL), `run` (merging everything
//! into [`RunConfig`]), `dirs` (the directories it must write), `sdks`
//! (adapter settings), `files` (which file settings agents must never
//! read), `github` (where installation tokens come from),
//! `sandbox` (the agent sandbox), `secret` (the bearer secret and the
//! GitHub App key, kept out of logs and `Debug`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde::Deserialize;

mod approval;
mod args;
pub mod defs;
mod dirs;
pub mod docs;
mod file;
mod files;
mod github;
pub(crate) mod layer;
mod run;
mod sandbox;
mod sdks;
pub(crate) mod secret;
mod skills;
pub mod source;
#[cfg(test)]
mod tests;
mod url;

pub use approval::*;
pub use args::*;
pub use dirs::*;
use file::FileLayer;
pub use github::*;
pub use run::*;
pub use sandbox::*;
pub use sdks::*;
pub use secret::Secret;
pub use skills::*;
pub use source::{Given, Source, Sources};
pub use url::*;

/// A configuration problem, naming the key it concerns.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read or parsed.
    #[error("config file {path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong (toml's message names the line).
        message: String,
    },
    /// A setting has a bad value.
    #[error("{key}: {message}")]
    Key {
        /// The setting's key.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// A directory setting names a directory the runner cannot use.
    #[error("{key} {}: {message}", path.display())]
    Dir {
        /// The setting's key.
        key: String,
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// `error`, saying where the value came from.
    #[error("{error} ({origin})")]
    Located {
        /// The problem.
        error: Box<ConfigError>,
        /// `in /etc/runner.toml`, `from flag --x`, `from env AGENT_RUNNER_X`.
        origin: String,
    },
}

impl ConfigError {
    /// The key of the setting concerned, if one.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::File { .. } => None,
            ConfigError::Key { key, .. } | ConfigError::Dir { key, .. } => Some(key),
            // Already says where.
            ConfigError::Located { .. } => None,
        }
    }
}

pub(crate) fn key_err(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Key {
        key: key.to_owned(),
        message: message.into(),
    }
}
