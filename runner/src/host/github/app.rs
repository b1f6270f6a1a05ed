//! Tokens straight from GitHub, as the runner's own GitHub App
//! (`--github-app-id`, `--github-app-private-key-file`, `--github-api-url`):
//! the App JWT ([`super::jwt`]) lists installations
//! (`GET /app/installations`) and mints installation tokens
//! (`POST /app/installations/{id}/access_tokens`); each new token then lists
//! the repositories it covers (`GET /installation/repositories`).
//! Tokens for agents are minted for the one repository asked for
//! (`repositories` and `permissions` in the access-token request, the
//! permissions the operator configured: `--github-token-permissions`).
//!
//! HTTP goes through `octocrab` (one client: absolute URLs under the API
//! base, a GitHub Enterprise path kept, rustls with ring and the system
//! roots, timeouts) over the runner's own connector,
//! [`crate::util::proxy::connect::ProxyConnector`]: `--proxy`,
//! `HTTPS_PROXY`/`HTTP_PROXY` and `NO_PROXY` apply to GitHub as to the
//! ControlChannel (a CONNECT tunnel to the API host, TLS inside it, for
//! `https://` and `http://` API URLs alike);
//! the `Authorization` header is set per request (the JWT changes every few
//! minutes, and the repository listing uses the installation token) and
//! marked sensitive. Answers are read into the few fields used here, so
//! extra or missing optional fields in GitHub's JSON do not matter.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use http::header::{ACCEPT, AUTHORIZATION, HeaderValue, USER_AGENT as USER_AGENT_HEADER};
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::jwt::{AppKey, app_jwt};
use super::source::{ASSUMED_LIFETIME, ListedInstallation, MintedToken, TokenSource};
use super::{GithubError, Secret};
use crate::config::TokenPermissions;
use crate::util::proxy::ProxyConfig;
use crate::util::proxy::connect::ProxyConnector;

/// GitHub's public API.
pub use crate::config::DEFAULT_GITHUB_API_URL as DEFAULT_API_URL;
/// Items asked for per page.
const PER_PAGE: usize = 100;
/// Pages read at most per listing (10 000 items).
const MAX_PAGES: usize = 100;
/// How long one request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long reaching the API host (or the proxy's tunnel to it) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Sent with every request: GitHub refuses requests without one.
const USER_AGENT: &str = concat!("agent-runner/", env!("CARGO_PKG_VERSION"));
/// Longest error body quoted in a message.
const MAX_QUOTED: usize = 300;

/// Installation tokens minted by the runner's own GitHub App.
pub struct AppSource {
    app_id: u64,
    key: AppKey,
    api_url: String,
    api: octocrab::Octocrab,
    /// Of the tokens minted for agents (one repository each).
    permissions: TokenPermissions,
}

#[derive(Deserialize)]
struct ApiInstallation {
    id: i64,
    #[serde(default)]
    account: Option<ApiAccount>,
}

#[derive(Deserialize)]
struct ApiAccount {
    #[serde(default)]
    login: Option<String>,
    #[serde(default)]
    slug: Option<String>,
}

#[derive(Deserialize)]
struct ApiToken {
    token: String,
    #[serde(default)]
    expires_at: Option<String>,
}

#[derive(Deserialize)]
struct ApiRepositories {
    total_count: usize,
    repositories: Vec<ApiRepository>,
}

#[derive(Deserialize)]
struct ApiRepository {
    full_name: String,
}

#[derive(Deserialize)]
struct ApiMessage {
    message: String,
}

impl AppSource {
    /// A source for App `app_id` at `api_url` (`https://api.github.com`, or
    /// `https://HOST/api/v3` for GitHub Enterprise Server).
    /// Connections go through the proxy `proxies` picks for the API host.
    pub fn new(
        app_id: u64,
        key: AppKey,
        api_url: &str,
        proxies: ProxyConfig,
    ) -> Result<Self, GithubError> {
        let uri: http::Uri = api_url
            .parse()
            .map_err(|e| GithubError::Rejected(format!("github_api_url {api_url}: {e}")))?;
        if !matches!(uri.scheme_str(), Some("https" | "http")) || uri.host().is_none() {
            return Err(GithubError::Rejected(format!(
                "github_api_url {api_url}: expected an http:// or https:// URL with a host"
            )));
        }
        let tls = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(rustls::crypto::ring::default_provider())
            .map_err(|e| GithubError::Rejected(format!("loading the system CA roots: {e}")))?
            .https_or_http()
            .enable_http1()
            .wrap_connector(ProxyConnector::new(proxies, CONNECT_TIMEOUT));
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build::<_, octocrab::OctoBody>(tls);
        // Infallible: this build only wraps the service.
        let Ok(api) = octocrab::OctocrabBuilder::new_empty()
            .with_service(client)
            .with_auth(octocrab::AuthState::None)
            .build();
        Ok(Self {
            app_id,
            key,
            api_url: api_url.trim_end_matches('/').to_owned(),
            api,
            permissions: TokenPermissions::default(),
        })
    }

    /// Agents' tokens get `permissions` (default:
    /// [`crate::config::DEFAULT_TOKEN_PERMISSIONS`]).
    pub fn with_permissions(mut self, permissions: TokenPermissions) -> Self {
        self.permissions = permissions;
        self
    }

    /// Mint a token of `installation_id`, with `body` as the request's JSON
    /// (`None`: the installation's own token, every permission and
    /// repository it has).
    async fn mint_with(
        &self,
        installation_id: i64,
        body: Option<&serde_json::Value>,
    ) -> Result<MintedToken, GithubError> {
        let jwt = self.jwt()?;
        let what = match body {
            None => format!("minting a token for installation {installation_id}"),
            Some(_) => format!("minting a repository token for installation {installation_id}"),
        };
        let path = format!("/app/installations/{installation_id}/access_tokens");
        let answer: ApiToken = match self.call(Method::POST, &path, &jwt, &what, body).await {
            Ok(answer) => answer,
            Err(Failure {
                status: Some(StatusCode::NOT_FOUND),
                ..
            }) => return Err(GithubError::UnknownInstallation(installation_id)),
            Err(f) => return Err(f.error),
        };
        let token = Secret::new(answer.token);
        let expires_at = parse_expiry(answer.expires_at.as_deref(), SystemTime::now());
        let repositories = self.repositories(installation_id, &token).await?;
        Ok(MintedToken {
            token,
            expires_at,
            repositories,
        })
    }

    fn jwt(&self) -> Result<Secret, GithubError> {
        app_jwt(self.app_id, &self.key, SystemTime::now())
    }

    /// One request with `bearer` as its credential; the parsed JSON body of
    /// a 2xx answer, else an error naming `what` and GitHub's message (and
    /// the HTTP status, when there was an answer).
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        bearer: &Secret,
        what: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<T, Failure> {
        let mut auth =
            HeaderValue::try_from(format!("Bearer {}", bearer.expose())).map_err(|_| {
                GithubError::Rejected(format!("{what}: credential is not a valid header"))
            })?;
        auth.set_sensitive(true);
        let builder = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.api_url))
            .header(AUTHORIZATION, auth)
            .header(USER_AGENT_HEADER, USER_AGENT)
            .header(ACCEPT, "application/vnd.github+json")
            .header("x-github-api-version", "2022-11-28");
        let request = self
            .api
            .build_request(builder, body)
            .map_err(|e| GithubError::Rejected(format!("{what}: {e}")))?;
        let fetched = tokio::time::timeout(REQUEST_TIMEOUT, async {
            let response = self.api.execute(request).await?;
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            Ok::<_, octocrab::Error>((status, body))
        })
        .await;
        let (status, body) = match fetched {
            Err(_) => {
                return Err(GithubError::Source(format!(
                    "{what}: {} did not answer within {}s",
                    self.api_url,
                    REQUEST_TIMEOUT.as_secs()
                ))
                .into());
            }
            Ok(Err(e)) => {
                return Err(GithubError::Source(format!(
                    "{what}: {}: {}",
                    self.api_url,
                    error_chain(&e)
                ))
                .into());
            }
            Ok(Ok(answer)) => answer,
        };
        if !status.is_success() {
            return Err(Failure {
                status: Some(status),
                error: http_error(what, status, &body),
            });
        }
        serde_json::from_slice(&body).map_err(|e| {
            GithubError::Rejected(format!("{what}: unexpected answer from GitHub: {e}")).into()
        })
    }

    /// Every repository `token` covers, as `owner/repo`.
    async fn repositories(
        &self,
        installation_id: i64,
        token: &Secret,
    ) -> Result<Vec<String>, GithubError> {
        let what = format!("listing the repositories of installation {installation_id}");
        let mut names = Vec::new();
        for page in 1..=MAX_PAGES {
            let path = format!("/installation/repositories?per_page={PER_PAGE}&page={page}");
            let answer: ApiRepositories = self.call(Method::GET, &path, token, &what, None).await?;
            let got = answer.repositories.len();
            names.extend(answer.repositories.into_iter().map(|r| r.full_name));
            if got == 0 || names.len() >= answer.total_count {
                return Ok(names);
            }
        }
        tracing::warn!(
            installation_id,
            listed = names.len(),
            "installation covers more repositories than are listed; the rest are not matched"
        );
        Ok(names)
    }
}

/// A failed call: the error, and the HTTP status if GitHub answered.
struct Failure {
    status: Option<StatusCode>,
    error: GithubError,
}

impl From<GithubError> for Failure {
    fn from(error: GithubError) -> Self {
        Self {
            status: None,
            error,
        }
    }
}

impl From<Failure> for GithubError {
    fn from(f: Failure) -> Self {
        f.error
    }
}

/// `error: its cause: …`, without repeats: the connector's reason (a
/// proxy that refused or is not there, named without its credentials) is
/// several causes deep under hyper's "client error (Connect)".
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        let line = c.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        cause = c.source();
    }
    text
}

/// The error for a non-2xx answer; 5xx and 429 are worth retrying.
fn http_error(what: &str, status: StatusCode, body: &[u8]) -> GithubError {
    let message = serde_json::from_slice::<ApiMessage>(body)
        .map(|m| m.message)
        .unwrap_or_else(|_| String::from_utf8_lossy(body).into_owned());
    let message: String = message.chars().take(MAX_QUOTED).collect();
    let text = format!("{what}: GitHub answered {status}: {message}");
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        GithubError::Source(text)
    } else {
        GithubError::Rejected(text)
    }
}

/// GitHub's `expires_at` (RFC 3339), or [`ASSUMED_LIFETIME`] from `now`.
fn parse_expiry(text: Option<&str>, now: SystemTime) -> SystemTime {
    text.and_then(|t| humantime::parse_rfc3339_weak(t).ok())
        .unwrap_or(now + ASSUMED_LIFETIME)
}

#[async_trait]
impl TokenSource for AppSource {
    fn describe(&self) -> String {
        format!("GitHub App {} at {}", self.app_id, self.api_url)
    }

    async fn installations(&self) -> Result<Vec<ListedInstallation>, GithubError> {
        let jwt = self.jwt()?;
        let mut listed = Vec::new();
        for page in 1..=MAX_PAGES {
            let path = format!("/app/installations?per_page={PER_PAGE}&page={page}");
            let answer: Vec<ApiInstallation> = self
                .call(
                    Method::GET,
                    &path,
                    &jwt,
                    "listing the App's installations",
                    None,
                )
                .await?;
            let got = answer.len();
            listed.extend(answer.into_iter().map(|i| ListedInstallation {
                id: i.id,
                account: i.account.and_then(|a| a.login.or(a.slug)),
            }));
            if got < PER_PAGE {
                break;
            }
        }
        Ok(listed)
    }

    async fn mint(&self, installation_id: i64) -> Result<MintedToken, GithubError> {
        self.mint_with(installation_id, None).await
    }

    fn scopes_to_repository(&self) -> bool {
        true
    }

    async fn mint_for_repo(
        &self,
        installation_id: i64,
        repo: &str,
    ) -> Result<MintedToken, GithubError> {
        let body = repo_token_request(repo, &self.permissions)?;
        let minted = self.mint_with(installation_id, Some(&body)).await?;
        // GitHub scoped it; a token covering more would be a bug worth
        // refusing rather than handing to an agent.
        if minted
            .repositories
            .iter()
            .any(|r| !r.eq_ignore_ascii_case(repo))
        {
            return Err(GithubError::Rejected(format!(
                "a token minted for {repo} covers other repositories too; refused"
            )));
        }
        Ok(minted)
    }
}

/// The access-token request of a token for `repo` (`owner/name`) alone:
/// `{"repositories": ["name"], "permissions": {...}}`.
fn repo_token_request(
    repo: &str,
    permissions: &TokenPermissions,
) -> Result<serde_json::Value, GithubError> {
    let name = repo
        .split_once('/')
        .map(|(_, name)| name)
        .filter(|name| !name.is_empty())
        .ok_or_else(|| GithubError::BadRepo {
            repo: repo.to_owned(),
        })?;
    let permissions: serde_json::Map<String, serde_json::Value> = permissions
        .0
        .iter()
        .map(|(n, l)| (n.clone(), serde_json::Value::String(l.clone())))
        .collect();
    Ok(serde_json::json!({
        "repositories": [name],
        "permissions": permissions,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repository_token_request_names_the_repository_and_permissions() {
        let body = repo_token_request("acme/widgets", &TokenPermissions::default()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "repositories": ["widgets"],
                "permissions": {"contents": "write", "pull_requests": "write", "metadata": "read"}
            })
        );
        assert!(repo_token_request("widgets", &TokenPermissions::default()).is_err());
    }

    #[test]
    fn expiry_is_parsed_or_assumed() {
        let now = SystemTime::UNIX_EPOCH;
        let t = parse_expiry(Some("2016-07-11T22:14:10Z"), now);
        assert_eq!(
            t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(),
            1_468_275_250
        );
        assert_eq!(parse_expiry(Some("soon"), now), now + ASSUMED_LIFETIME);
        assert_eq!(parse_expiry(None, now), now + ASSUMED_LIFETIME);
    }

    #[test]
    fn server_errors_are_retried_refusals_are_not() {
        let e = http_error(
            "x",
            StatusCode::INTERNAL_SERVER_ERROR,
            b"{\"message\":\"boom\"}",
        );
        assert!(e.is_transient());
        assert!(e.to_string().contains("boom"));
        let e = http_error(
            "x",
            StatusCode::UNAUTHORIZED,
            b"{\"message\":\"Bad credentials\"}",
        );
        assert!(!e.is_transient());
        assert!(e.to_string().contains("401"));
    }
}
