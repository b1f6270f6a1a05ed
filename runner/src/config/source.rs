//! Where each setting's value came from, recorded while the layers are
//! merged: a flag, an environment variable, the config file, or the
//! default. `doctor` prints it; an error about a value says it.

use std::collections::BTreeMap;
use std::fmt;

use clap::ArgMatches;
use clap::parser::ValueSource;

use super::defs::{Definition, definitions};
use super::file::FileLayer;
use super::layer::keys_of;
use super::*;

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The command line (`--drain-timeout`, without the dashes here).
    Flag(String),
    /// An environment variable (`AGENT_RUNNER_DRAIN_TIMEOUT`).
    Env(String),
    /// The command line or the variable: a caller without clap's matches
    /// cannot tell, and the variable is set.
    FlagOrEnv {
        /// The flag, without its dashes.
        flag: String,
        /// The variable.
        env: String,
    },
    /// The config file.
    File(PathBuf),
    /// Nobody gave it.
    Default,
}

impl fmt::Display for Source {
    /// `flag --x`, `env AGENT_RUNNER_X`, `file /etc/runner.toml`, `default`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag(long) => write!(f, "flag --{long}"),
            Source::Env(env) => write!(f, "env {env}"),
            Source::FlagOrEnv { flag, env } => write!(f, "flag --{flag} or env {env}"),
            Source::File(path) => write!(f, "file {}", path.display()),
            Source::Default => f.write_str("default"),
        }
    }
}

impl Source {
    /// What an error about the value adds: `in /etc/runner.toml`,
    /// `from flag --x`; `None` for a default.
    pub fn origin(&self) -> Option<String> {
        match self {
            Source::Default => None,
            Source::File(path) => Some(format!("in {}", path.display())),
            other => Some(format!("from {other}")),
        }
    }
}

/// One setting's source and, when known, its value as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Given {
    /// Where it came from.
    pub source: Source,
    /// The text given (list items joined with `,`); `None` for a default,
    /// or a flag or variable when clap's matches were not at hand.
    pub text: Option<String>,
}

/// Every setting's source, by key.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    by_key: BTreeMap<String, Given>,
}

const DEFAULT: Given = Given {
    source: Source::Default,
    text: None,
};

impl Sources {
    /// Records the sources: `given` is what the command line and
    /// environment gave (with clap's `matches` when the caller has them),
    /// `file` what the config file gave.
    pub(super) fn record(given: &RunArgs, matches: Option<&ArgMatches>, file: &FileLayer) -> Self {
        let from_args = keys_of(given);
        let from_file = keys_of(&file.args);
        let by_key = definitions()
            .into_iter()
            .map(|def| {
                let key = def.key.as_str();
                let given = if from_args.contains(&key) {
                    from_command_line(&def, matches)
                } else if let (true, Some(path)) = (from_file.contains(&key), &file.path) {
                    Given {
                        source: Source::File(path.clone()),
                        text: file.text(key).map(str::to_owned),
                    }
                } else {
                    DEFAULT
                };
                (def.key, given)
            })
            .collect();
        Self { by_key }
    }

    /// The setting `key`'s source and text (the default for a key not known).
    pub fn get(&self, key: &str) -> &Given {
        self.by_key.get(key).unwrap_or(&DEFAULT)
    }

    /// The setting `key`'s source.
    pub fn source(&self, key: &str) -> &Source {
        &self.get(key).source
    }

    /// Every setting, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Given)> {
        self.by_key.iter().map(|(k, g)| (k.as_str(), g))
    }

    /// `error`, saying where the value it names came from (unless it was
    /// the default or the error already says).
    pub fn locate(&self, error: ConfigError) -> ConfigError {
        let origin = match error.key() {
            Some(key) => self.source(key).origin(),
            None => None,
        };
        match origin {
            Some(origin) => ConfigError::Located {
                error: Box::new(error),
                origin,
            },
            None => error,
        }
    }
}

/// A value clap gave: from the flag or the variable. Without the matches,
/// a value whose variable is not set came from the flag (or the caller).
fn from_command_line(def: &Definition, matches: Option<&ArgMatches>) -> Given {
    let key = def.key.as_str();
    let matches = matches.filter(|m| m.ids().any(|id| id.as_str() == key));
    let source = match matches.and_then(|m| m.value_source(key)) {
        Some(ValueSource::CommandLine) => Source::Flag(def.long.clone()),
        Some(ValueSource::EnvVariable) => Source::Env(def.env.clone()),
        _ if std::env::var_os(&def.env).is_some() => Source::FlagOrEnv {
            flag: def.long.clone(),
            env: def.env.clone(),
        },
        _ => Source::Flag(def.long.clone()),
    };
    let text = matches
        .and_then(|m| m.try_get_raw(key).ok().flatten())
        .map(|values| {
            values
                .map(|v| v.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(",")
        });
    Given { source, text }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_print_as_doctor_shows_them() {
        assert_eq!(
            Source::Flag("state-dir".into()).to_string(),
            "flag --state-dir"
        );
        assert_eq!(
            Source::Env("AGENT_RUNNER_STATE_DIR".into()).to_string(),
            "env AGENT_RUNNER_STATE_DIR"
        );
        assert_eq!(
            Source::File("/etc/r.toml".into()).origin().as_deref(),
            Some("in /etc/r.toml")
        );
        assert_eq!(Source::Default.origin(), None);
    }
}
