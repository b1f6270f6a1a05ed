//! Where installation tokens come from: the control plane
//! ([`super::control_plane`]) or a GitHub App of the runner's own
//! ([`super::app`]). The broker ([`super::broker`]) caches and refreshes what
//! a source mints; a source itself keeps nothing.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use super::{GithubError, Secret};

/// Assumed lifetime of a token whose expiry the source did not give
/// (GitHub's installation tokens live one hour).
pub const ASSUMED_LIFETIME: Duration = Duration::from_secs(60 * 60);

/// One installation as a source lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedInstallation {
    /// The installation's id.
    pub id: i64,
    /// The user or organisation it is installed on, when the source says.
    pub account: Option<String>,
}

/// A token just minted.
#[derive(Debug, Clone)]
pub struct MintedToken {
    /// The token (prints as `***`).
    pub token: Secret,
    /// When it expires.
    pub expires_at: SystemTime,
    /// `owner/repo` of every repository the token covers.
    pub repositories: Vec<String>,
}

/// A source of installation tokens.
#[async_trait]
pub trait TokenSource: Send + Sync + 'static {
    /// For messages: "control plane", "GitHub App 123".
    fn describe(&self) -> String;
    /// The installations available to this runner.
    async fn installations(&self) -> Result<Vec<ListedInstallation>, GithubError>;
    /// A new token for one installation.
    async fn mint(&self, installation_id: i64) -> Result<MintedToken, GithubError>;

    /// Whether tokens handed to agents are minted for the one repository
    /// asked for ([`TokenSource::mint_for_repo`]) rather than being the
    /// installation's own. `false` (default): the control plane's tokens
    /// are passed as they come.
    fn scopes_to_repository(&self) -> bool {
        false
    }

    /// A new token of one installation limited to `repo` (`owner/name`),
    /// with the permissions the operator configured. Only called when
    /// [`TokenSource::scopes_to_repository`]; the default mints the
    /// installation's token.
    async fn mint_for_repo(
        &self,
        installation_id: i64,
        repo: &str,
    ) -> Result<MintedToken, GithubError> {
        let _ = repo;
        self.mint(installation_id).await
    }
}
