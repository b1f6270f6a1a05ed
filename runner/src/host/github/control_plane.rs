//! Tokens from the control plane, on the runner's own authenticated client
//! ([`crate::host::client::Client`]: same channel, bearer secret, path prefix and
//! TLS as registration). Every response is checked against its
//! `buf.validate` rules before it is used.
//!
//! The two RPCs have two names each: `ListGithubInstallationsForRunner` /
//! `GetGithubInstallationAccessTokenForRunner` (0.2.0) and
//! `ListGithubInstallations` / `GithubInstallationAccessToken` (the later
//! protocol), same fields. A control plane may serve either pair: the
//! source calls the pair that worked last (0.2.0's first), and when the
//! control plane answers `UNIMPLEMENTED` it calls the other pair and
//! remembers it if it works.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, SystemTime};

use agent_runner_proto::runner::{
    GetGithubInstallationAccessTokenForRunnerRequest, GithubInstallationAccessTokenRequest,
    ListGithubInstallationsForRunnerRequest, ListGithubInstallationsRequest,
};
use agent_runner_proto::{Validate, violations};
use async_trait::async_trait;
use tonic::Code;

use super::source::{ASSUMED_LIFETIME, ListedInstallation, MintedToken, TokenSource};
use super::{GithubError, Secret};
use crate::host::client::Client;

/// How long one RPC may take.
pub const RPC_TIMEOUT: Duration = Duration::from_secs(30);

/// Which pair of names the control plane serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcNames {
    /// `ListGithubInstallationsForRunner`, `GetGithubInstallationAccessTokenForRunner`.
    ForRunner,
    /// `ListGithubInstallations`, `GithubInstallationAccessToken`.
    Later,
}

impl RpcNames {
    fn list(self) -> &'static str {
        match self {
            RpcNames::ForRunner => "ListGithubInstallationsForRunner",
            RpcNames::Later => "ListGithubInstallations",
        }
    }

    fn get(self) -> &'static str {
        match self {
            RpcNames::ForRunner => "GetGithubInstallationAccessTokenForRunner",
            RpcNames::Later => "GithubInstallationAccessToken",
        }
    }

    fn other(self) -> Self {
        match self {
            RpcNames::ForRunner => RpcNames::Later,
            RpcNames::Later => RpcNames::ForRunner,
        }
    }
}

/// A token response, whichever name it came under.
struct TokenResponse {
    installation_id: i64,
    access_token: String,
    access_token_expires_unix_time_ms: i64,
    repositories: Vec<String>,
}

/// Installation tokens minted by the control plane.
pub struct ControlPlaneSource {
    client: Client,
    /// The pair that worked last: 0 = [`RpcNames::ForRunner`], 1 = [`RpcNames::Later`].
    names: AtomicU8,
}

impl ControlPlaneSource {
    /// A source over the link's `client`.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            names: AtomicU8::new(0),
        }
    }

    /// The pair of names this source calls first.
    pub fn names(&self) -> RpcNames {
        match self.names.load(Ordering::Relaxed) {
            0 => RpcNames::ForRunner,
            _ => RpcNames::Later,
        }
    }

    fn remember(&self, names: RpcNames) {
        if names != self.names() {
            tracing::info!(
                list = names.list(),
                get = names.get(),
                "the control plane serves the GitHub RPCs under these names; using them from now on"
            );
        }
        let value = match names {
            RpcNames::ForRunner => 0,
            RpcNames::Later => 1,
        };
        self.names.store(value, Ordering::Relaxed);
    }

    /// Calls `call` under the remembered names, then, if the control plane
    /// does not implement them, under the other pair (remembering it when
    /// it works).
    async fn either<T, F, Fut>(
        &self,
        name: fn(RpcNames) -> &'static str,
        call: F,
    ) -> Result<T, (RpcNames, tonic::Status)>
    where
        F: Fn(RpcNames) -> Fut,
        Fut: std::future::Future<Output = Result<T, tonic::Status>>,
    {
        let first = self.names();
        match call(first).await {
            Err(status) if status.code() == Code::Unimplemented => {
                let second = first.other();
                match call(second).await {
                    Ok(value) => {
                        self.remember(second);
                        Ok(value)
                    }
                    Err(again) if again.code() == Code::Unimplemented => Err((
                        second,
                        tonic::Status::unimplemented(format!(
                            "{}: the control plane implements neither it nor {}",
                            name(second),
                            name(first)
                        )),
                    )),
                    Err(other) => Err((second, other)),
                }
            }
            Err(status) => Err((first, status)),
            Ok(value) => Ok(value),
        }
    }

    async fn list_call(&self, names: RpcNames) -> Result<Vec<i64>, tonic::Status> {
        let mut client = self.client.clone();
        let rpc = names.list();
        let ids = match names {
            RpcNames::ForRunner => checked(
                rpc,
                client.list_github_installations_for_runner(
                    ListGithubInstallationsForRunnerRequest {},
                ),
            )
            .await?
            .installations
            .iter()
            .map(|i| i.installation_id)
            .collect(),
            RpcNames::Later => checked(
                rpc,
                client.list_github_installations(ListGithubInstallationsRequest {}),
            )
            .await?
            .installations
            .iter()
            .map(|i| i.installation_id)
            .collect(),
        };
        Ok(ids)
    }

    async fn get_call(
        &self,
        names: RpcNames,
        installation_id: i64,
    ) -> Result<TokenResponse, tonic::Status> {
        let mut client = self.client.clone();
        let rpc = names.get();
        let token = match names {
            RpcNames::ForRunner => {
                let r = checked(
                    rpc,
                    client.get_github_installation_access_token_for_runner(
                        GetGithubInstallationAccessTokenForRunnerRequest { installation_id },
                    ),
                )
                .await?;
                TokenResponse {
                    installation_id: r.installation_id,
                    access_token: r.access_token,
                    access_token_expires_unix_time_ms: r.access_token_expires_unix_time_ms,
                    repositories: r.repositories,
                }
            }
            RpcNames::Later => {
                let r = checked(
                    rpc,
                    client.github_installation_access_token(GithubInstallationAccessTokenRequest {
                        installation_id,
                    }),
                )
                .await?;
                TokenResponse {
                    installation_id: r.installation_id,
                    access_token: r.access_token,
                    access_token_expires_unix_time_ms: r.access_token_expires_unix_time_ms,
                    repositories: r.repositories,
                }
            }
        };
        Ok(token)
    }
}

/// `call`'s response within the RPC timeout, checked against its
/// `buf.validate` rules (a response that breaks them is refused, naming
/// the RPC), whichever name the RPC goes by.
async fn checked<R: Validate>(
    rpc: &str,
    call: impl std::future::Future<Output = Result<tonic::Response<R>, tonic::Status>>,
) -> Result<R, tonic::Status> {
    let response = tokio::time::timeout(RPC_TIMEOUT, call)
        .await
        .map_err(|_| tonic::Status::deadline_exceeded(timed_out(rpc)))??
        .into_inner();
    response.validate().map_err(|e| {
        tonic::Status::invalid_argument(format!("{rpc}: invalid response: {}", violations(&e)))
    })?;
    Ok(response)
}

#[async_trait]
impl TokenSource for ControlPlaneSource {
    fn describe(&self) -> String {
        "the control plane".to_owned()
    }

    async fn installations(&self) -> Result<Vec<ListedInstallation>, GithubError> {
        let mut ids = self
            .either(RpcNames::list, |names| self.list_call(names))
            .await
            .map_err(|(names, s)| status_error(names.list(), None, s))?;
        ids.sort_unstable();
        ids.dedup();
        Ok(ids
            .into_iter()
            .map(|id| ListedInstallation { id, account: None })
            .collect())
    }

    async fn mint(&self, installation_id: i64) -> Result<MintedToken, GithubError> {
        let (names, response) = self
            .either(RpcNames::get, |names| async move {
                self.get_call(names, installation_id)
                    .await
                    .map(|r| (names, r))
            })
            .await
            .map_err(|(names, s)| status_error(names.get(), Some(installation_id), s))?;
        if response.installation_id != installation_id {
            return Err(GithubError::Rejected(format!(
                "{}: asked for installation {installation_id}, got a token for {}",
                names.get(),
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

fn timed_out(rpc: &str) -> String {
    format!(
        "{rpc}: the control plane did not answer within {}s",
        RPC_TIMEOUT.as_secs()
    )
}

fn status_error(rpc: &str, installation: Option<i64>, status: tonic::Status) -> GithubError {
    // Our own timeout and validation texts already name the RPC.
    let text = if status.message().starts_with(rpc) {
        status.message().to_owned()
    } else {
        format!("{rpc}: {:?}: {}", status.code(), status.message())
    };
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
        let get = RpcNames::ForRunner.get();
        let list = RpcNames::Later.list();
        let e = status_error(get, Some(7), tonic::Status::not_found("no"));
        assert_eq!(e, GithubError::UnknownInstallation(7));
        let e = status_error(get, Some(7), tonic::Status::unavailable("down"));
        assert!(e.is_transient());
        let e = status_error(list, None, tonic::Status::permission_denied("no"));
        assert!(!e.is_transient());
        assert!(e.to_string().contains(list));
    }
}
