//! Why a sandbox could not be set up or a launch refused.

/// An error of the launcher.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// Mode `enforce` and a required isolation is not available on this host.
    #[error("sandbox mode enforce: {what} is unavailable: {why}")]
    Unavailable {
        /// The isolation that is missing (e.g. "Landlock").
        what: &'static str,
        /// What the host lacks.
        why: String,
    },
    /// The configuration contradicts itself (e.g. a protected path inside a
    /// directory the sandbox would expose).
    #[error("sandbox policy: {0}")]
    Policy(String),
    /// Building the Landlock ruleset failed.
    #[error("landlock ruleset: {0}")]
    Landlock(#[from] landlock::RulesetError),
    /// The sandbox refused to execute a program or part of its
    /// installation; `advice` names the path and the setting.
    #[error("spawn {program}: {source}: {advice}")]
    Denied {
        /// The program as the launch named it.
        program: String,
        /// What the sandbox does not open and what would.
        advice: String,
        /// The OS error (EACCES, EPERM).
        #[source]
        source: std::io::Error,
    },
    /// A file-system or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl LaunchError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        LaunchError::Io {
            context: context.into(),
            source,
        }
    }
}
