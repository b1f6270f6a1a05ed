//! The credential socket's tokens come from the runner's
//! [`TokenBroker`](crate::host::github::TokenBroker).

use async_trait::async_trait;

use super::server::{IssuedToken, Tokens};
use crate::host::github::TokenBroker;

#[async_trait]
impl Tokens for TokenBroker {
    fn git_host(&self) -> String {
        TokenBroker::git_host(self).to_owned()
    }

    async fn token(&self, owner: &str, repo: &str) -> Result<IssuedToken, String> {
        let issued = self
            .token_for_agent(owner, repo)
            .await
            .map_err(|e| e.to_string())?;
        Ok(IssuedToken {
            installation_id: issued.installation_id,
            token: issued.token.expose().to_owned(),
        })
    }

    fn is_cached(&self, owner: &str, repo: &str) -> bool {
        self.agent_token_cached(owner, repo)
    }

    fn invalidate(&self, token: &str) -> Option<i64> {
        self.forget_token(token)
    }
}
