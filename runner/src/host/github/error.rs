//! What can go wrong getting a GitHub installation token. Messages name the
//! repository, the installation or the source, never a token.

/// A token could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GithubError {
    /// No installation available to this runner covers the repository.
    #[error("no GitHub installation available to this runner covers {repo}")]
    NotCovered {
        /// The repository.
        repo: String,
    },
    /// The runner has no GitHub token source.
    #[error("GitHub access is not configured on this runner")]
    NotConfigured,
    /// Not an `owner/repo` name.
    #[error("{repo:?} is not a GitHub repository (expected owner/repo)")]
    BadRepo {
        /// What was given.
        repo: String,
    },
    /// The source does not know this installation (or no longer links it).
    #[error("GitHub installation {0} is not available to this runner")]
    UnknownInstallation(i64),
    /// A failure worth retrying: the network, a timeout, a 5xx.
    #[error("{0}")]
    Source(String),
    /// A refusal retrying will not fix: 401/403, an invalid answer.
    #[error("{0}")]
    Rejected(String),
}

impl GithubError {
    /// Whether trying again later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, GithubError::Source(_))
    }
}
