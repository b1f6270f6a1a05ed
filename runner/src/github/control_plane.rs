//! Tokens from the control plane: `ListGithubInstallationsForRunner` and
//! `GetGithubInstallationAccessTokenForRunner` on the runner's own
//! authenticated client ([`crate::client::Client`]: same channel, bearer
//! secret, path prefix and TLS as registration). Every response is checked
//! against its `buf.validate` rules before it is used.

use std::time::{Duration, SystemTime};

use agent_runner_proto::runner::{
    GetGithubInstallationAccessTokenForRunnerRequest, ListGithubInstallationsForRunnerRequest,
};
use agent_runner_proto::{Validate, violations};
use async_trait::async_trait;
use tonic::Code;

use super::source::{ASSUMED_LIFETIME, ListedInstallation, MintedToken, TokenSource};
use super::{GithubError, Secret};
use crate::client::Client;

/// How long one RPC may take.
pub const RPC_TIMEOUT: Duration = Duration::from_secs(30);

const LIST: &str = "ListGithubInstallationsForRunner";
const GET: &str = "GetGithubInstallationAccessTokenForRunner";

/// Installation tokens minted by the control plane.
pub struct ControlPlaneSource {
    client: Client,
}

impl ControlPlaneSource {
    /// A source over the link's `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl TokenSource for ControlPlaneSource {
    fn describe(&self) -> String {
        "the control plane".to_owned()
    }

    async fn installations(&self) -> Result<Vec<ListedInstallation>, GithubError> {
        let mut client = self.client.clone();
        let call =
            client.list_github_installations_for_runner(ListGithubInstallationsForRunnerRequest {});
        let response = tokio::time::timeout(RPC_TIMEOUT, call)
            .await
            .map_err(|_| timed_out(LIST))?
            .map_err(|s| status_error(LIST, None, s))?
            .into_inner();
        response.validate().map_err(|e| {
            GithubError::Rejected(format!("{LIST}: invalid response: {}", violations(&e)))
        })?;
        let mut ids: Vec<i64> = response
            .installations
            .iter()
            .map(|i| i.installation_id)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(ids
            .into_iter()
            .map(|id| ListedInstallation { id, account: None })
            .collect())
    }

    async fn mint(&self, installation_id: i64) -> Result<MintedToken, GithubError> {
        let mut client = self.client.clone();
        let call = client.get_github_installation_access_token_for_runner(
            GetGithubInstallationAccessTokenForRunnerRequest { installation_id },
        );
        let response = tokio::time::timeout(RPC_TIMEOUT, call)
            .await
            .map_err(|_| timed_out(GET))?
            .map_err(|s| status_error(GET, Some(installation_id), s))?
            .into_inner();
        response.validate().map_err(|e| {
            GithubError::Rejected(format!(
                "{GET} for installation {installation_id}: invalid response: {}",
                violations(&e)
            ))
        })?;
        if response.installation_id != installation_id {
            return Err(GithubError::Rejected(format!(
                "{GET}: asked for installation {installation_id}, got a token for {}",
                response.installation_id
            )));
        }
        let expires_at = expiry(
            response.access_token_expires_unix_time_ms,
            SystemTime::now(),
        );
        Ok(MintedToken {
            token: Secret::new(response.access_token),
            expires_at,
            repositories: response.repositories,
        })
    }
}

/// The expiry the control plane gave (Unix milliseconds), or
/// [`ASSUMED_LIFETIME`] from `now` when it gave none.
fn expiry(unix_ms: i64, now: SystemTime) -> SystemTime {
    match u64::try_from(unix_ms) {
        Ok(ms) if ms > 0 => SystemTime::UNIX_EPOCH + Duration::from_millis(ms),
        _ => now + ASSUMED_LIFETIME,
    }
}

fn timed_out(rpc: &str) -> GithubError {
    GithubError::Source(format!(
        "{rpc}: the control plane did not answer within {}s",
        RPC_TIMEOUT.as_secs()
    ))
}

fn status_error(rpc: &str, installation: Option<i64>, status: tonic::Status) -> GithubError {
    let text = format!("{rpc}: {:?}: {}", status.code(), status.message());
    match (status.code(), installation) {
        (Code::NotFound, Some(id)) => GithubError::UnknownInstallation(id),
        (
            Code::Unauthenticated
            | Code::PermissionDenied
            | Code::InvalidArgument
            | Code::FailedPrecondition
            | Code::Unimplemented
            | Code::NotFound,
            _,
        ) => GithubError::Rejected(text),
        _ => GithubError::Source(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_from_unix_ms_or_assumed() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        assert_eq!(
            expiry(2_000_500, now),
            SystemTime::UNIX_EPOCH + Duration::from_millis(2_000_500)
        );
        assert_eq!(expiry(0, now), now + ASSUMED_LIFETIME);
        assert_eq!(expiry(-5, now), now + ASSUMED_LIFETIME);
    }

    #[test]
    fn status_codes_map_to_retryable_or_not() {
        let e = status_error(GET, Some(7), tonic::Status::not_found("no"));
        assert_eq!(e, GithubError::UnknownInstallation(7));
        let e = status_error(GET, Some(7), tonic::Status::unavailable("down"));
        assert!(e.is_transient());
        let e = status_error(LIST, None, tonic::Status::permission_denied("no"));
        assert!(!e.is_transient());
        assert!(e.to_string().contains(LIST));
    }
}
