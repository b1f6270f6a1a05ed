//! The token source of a runner with no way to get GitHub tokens: protocol
//! 0.7 has no GitHub RPCs, so without a GitHub App of the runner's own the
//! agents' git gets no credentials (public repositories still work).

use async_trait::async_trait;

use super::GithubError;
use super::source::{ListedInstallation, MintedToken, TokenSource};

/// Lists nothing, mints nothing.
pub struct NoSource;

/// What [`NoSource`] says it is (`doctor`, the start-up log).
pub const DESCRIPTION: &str = "none (protocol 0.7 has no GitHub RPCs and no GitHub App is configured: git gets no credentials)";

#[async_trait]
impl TokenSource for NoSource {
    fn describe(&self) -> String {
        DESCRIPTION.to_owned()
    }

    async fn installations(&self) -> Result<Vec<ListedInstallation>, GithubError> {
        Ok(Vec::new())
    }

    async fn mint(&self, _installation_id: i64) -> Result<MintedToken, GithubError> {
        Err(GithubError::NotConfigured)
    }
}
