//! A mock GitHub REST API on loopback, for the runner's GitHub App mode:
//!
//! * `GET /app/installations` and `POST /app/installations/{id}/access_tokens`
//!   demand an App JWT (`Authorization: Bearer`), checked like GitHub does:
//!   RS256 signature against the App's public key (with `jsonwebtoken`),
//!   `iss` = the App id, not expired, `exp` at most 10 minutes ahead.
//! * `GET /installation/repositories` demands a live installation token
//!   and lists the repositories it covers.
//! * `POST .../access_tokens` takes GitHub's optional body
//!   (`{"repositories": ["name"], "permissions": {...}}`): a token limited
//!   to those repositories of the installation (one it does not cover is
//!   refused with 422, as GitHub does), with those permissions recorded.
//! * `GET /repos/{owner}/{repo}` answers 200 only for a live token covering
//!   that repository (404 otherwise, as GitHub hides what a token cannot
//!   see).
//!
//! Tokens are random `ghs_…` strings with a configurable lifetime. The
//! handle counts mints, can answer the next requests of a route with a
//! chosen status (401, 500, …), revoke every token issued so far, and tells
//! which installation a token belongs to (for a test git server).

mod key;
mod routes;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, Result};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use jsonwebtoken::DecodingKey;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use key::{TestAppKey, other_test_app_key, test_app_key};

/// One installation of the mock App.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MockInstallation {
    /// The installation's id.
    pub id: i64,
    /// The user or organisation login it is installed on.
    pub account: String,
    /// `owner/repo` names its tokens cover.
    pub repositories: Vec<String>,
}

impl MockInstallation {
    /// Installation `id` on `account`, covering `repositories` (`owner/name`).
    pub fn new(id: i64, account: &str, repositories: &[&str]) -> Self {
        Self {
            id,
            account: account.to_owned(),
            repositories: repositories.iter().map(|r| (*r).to_owned()).collect(),
        }
    }
}

/// What the mock serves.
#[derive(Debug, Clone)]
pub struct GithubApiConfig {
    /// The App's id, which the JWT must name.
    pub app_id: u64,
    /// The App's public key (PEM) JWTs are checked against.
    pub public_key_pem: String,
    /// The App's installations.
    pub installations: Vec<MockInstallation>,
    /// How long minted tokens live. Default: one hour, like GitHub's.
    pub token_lifetime: Duration,
}

impl GithubApiConfig {
    /// App `app_id` whose JWTs verify with `public_key_pem`.
    pub fn new(app_id: u64, public_key_pem: impl Into<String>) -> Self {
        Self {
            app_id,
            public_key_pem: public_key_pem.into(),
            installations: Vec::new(),
            token_lifetime: Duration::from_secs(3600),
        }
    }

    /// Adds an installation.
    pub fn with_installation(mut self, installation: MockInstallation) -> Self {
        self.installations.push(installation);
        self
    }

    /// How long minted tokens live.
    pub fn with_token_lifetime(mut self, lifetime: Duration) -> Self {
        self.token_lifetime = lifetime;
        self
    }
}

/// The routes faults can be injected into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `GET /app/installations`
    Installations,
    /// `POST /app/installations/{id}/access_tokens`
    Mint,
    /// `GET /installation/repositories`
    Repositories,
}

pub(crate) struct Issued {
    pub installation_id: i64,
    pub expires_at: SystemTime,
    pub revoked: bool,
    /// `owner/repo` names it is limited to (`None`: all the installation's).
    pub repositories: Option<Vec<String>>,
    /// The permissions asked for (`None`: the installation's).
    pub permissions: Option<BTreeMap<String, String>>,
}

impl Issued {
    fn live(&self) -> bool {
        !self.revoked && SystemTime::now() < self.expires_at
    }
}

pub(crate) struct Fault {
    pub route: Route,
    pub status: u16,
    pub remaining: usize,
}

pub(crate) struct ApiState {
    pub app_id: u64,
    pub key: DecodingKey,
    pub installations: Vec<MockInstallation>,
    pub token_lifetime: Duration,
    /// Every token issued, by value.
    pub tokens: HashMap<String, Issued>,
    /// The installation of every mint, in order.
    pub mints: Vec<i64>,
    pub faults: Vec<Fault>,
    pub jwt_rejections: usize,
    /// `METHOD path` of every request.
    pub requests: Vec<String>,
}

impl ApiState {
    /// The `owner/repo` names `issued` opens.
    pub fn covered(&self, issued: &Issued) -> Vec<String> {
        let all = self
            .installations
            .iter()
            .find(|i| i.id == issued.installation_id)
            .map(|i| i.repositories.clone())
            .unwrap_or_default();
        match &issued.repositories {
            None => all,
            Some(only) => all
                .into_iter()
                .filter(|r| only.iter().any(|o| o.eq_ignore_ascii_case(r)))
                .collect(),
        }
    }

    /// The status to answer instead, if a fault is armed for `route`.
    pub fn take_fault(&mut self, route: Route) -> Option<u16> {
        let fault = self
            .faults
            .iter_mut()
            .find(|f| f.route == route && f.remaining > 0)?;
        fault.remaining -= 1;
        Some(fault.status)
    }
}

pub(crate) type Shared = Arc<Mutex<ApiState>>;

pub(crate) fn lock(state: &Shared) -> MutexGuard<'_, ApiState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running mock GitHub API; dropping it stops the server.
pub struct MockGithubApi {
    addr: SocketAddr,
    state: Shared,
    stop: CancellationToken,
}

impl MockGithubApi {
    /// Serve `config` on `127.0.0.1:0`.
    pub async fn start(config: GithubApiConfig) -> Result<Self> {
        let key = DecodingKey::from_rsa_pem(config.public_key_pem.as_bytes())
            .context("the App public key is not an RSA public key in PEM form")?;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the mock GitHub API")?;
        let addr = listener.local_addr()?;
        let state: Shared = Arc::new(Mutex::new(ApiState {
            app_id: config.app_id,
            key,
            installations: config.installations,
            token_lifetime: config.token_lifetime,
            tokens: HashMap::new(),
            mints: Vec::new(),
            faults: Vec::new(),
            jwt_rejections: 0,
            requests: Vec::new(),
        }));
        let stop = CancellationToken::new();
        tokio::spawn(serve(listener, state.clone(), stop.clone()));
        tracing::info!(%addr, "mock GitHub API listening");
        Ok(Self { addr, state, stop })
    }

    /// `http://127.0.0.1:PORT` (the runner's `--github-api-url`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The installation of every token minted so far, in order.
    pub fn mints(&self) -> Vec<i64> {
        lock(&self.state).mints.clone()
    }

    /// Tokens minted so far.
    pub fn mint_count(&self) -> usize {
        lock(&self.state).mints.len()
    }

    /// Every token issued so far (for tests that grep output for them).
    pub fn issued_tokens(&self) -> Vec<String> {
        lock(&self.state).tokens.keys().cloned().collect()
    }

    /// The installation `token` belongs to, if it is live (issued here, not
    /// expired, not revoked).
    pub fn token_installation(&self, token: &str) -> Option<i64> {
        let state = lock(&self.state);
        let issued = state.tokens.get(token)?;
        (!issued.revoked && SystemTime::now() < issued.expires_at).then_some(issued.installation_id)
    }

    /// Whether `token` is live and opens `repo` (`owner/name`, as GitHub
    /// would: a token limited to some repositories opens only those, an
    /// installation's own token every repository of the installation).
    pub fn token_covers(&self, token: &str, repo: &str) -> bool {
        let state = lock(&self.state);
        state.tokens.get(token).is_some_and(|issued| {
            issued.live()
                && state
                    .covered(issued)
                    .iter()
                    .any(|r| r.eq_ignore_ascii_case(repo))
        })
    }

    /// The permissions `token` was minted with (`None`: unknown token, or
    /// minted without asking for any).
    pub fn token_permissions(&self, token: &str) -> Option<BTreeMap<String, String>> {
        lock(&self.state).tokens.get(token)?.permissions.clone()
    }

    /// The repositories `token` was limited to when minted (`None`: unknown
    /// token, or the installation's own).
    pub fn token_repositories(&self, token: &str) -> Option<Vec<String>> {
        lock(&self.state).tokens.get(token)?.repositories.clone()
    }

    /// JWTs refused so far (bad signature, wrong issuer, expired, too long).
    pub fn jwt_rejections(&self) -> usize {
        lock(&self.state).jwt_rejections
    }

    /// `METHOD path` of every request so far.
    pub fn requests(&self) -> Vec<String> {
        lock(&self.state).requests.clone()
    }

    /// Answer the next `times` requests of `route` with `status` (and
    /// GitHub's error JSON) instead of serving them.
    pub fn fail_next(&self, route: Route, status: u16, times: usize) {
        lock(&self.state).faults.push(Fault {
            route,
            status,
            remaining: times,
        });
    }

    /// Refuse every token issued so far (as if GitHub revoked them).
    pub fn revoke_tokens(&self) {
        for issued in lock(&self.state).tokens.values_mut() {
            issued.revoked = true;
        }
    }

    /// Tokens minted from now on live this long.
    pub fn set_token_lifetime(&self, lifetime: Duration) {
        lock(&self.state).token_lifetime = lifetime;
    }

    /// Replace the repositories of an installation.
    pub fn set_repositories(&self, installation_id: i64, repositories: &[&str]) {
        let mut state = lock(&self.state);
        if let Some(i) = state
            .installations
            .iter_mut()
            .find(|i| i.id == installation_id)
        {
            i.repositories = repositories.iter().map(|r| (*r).to_owned()).collect();
        }
    }
}

impl Drop for MockGithubApi {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn serve(listener: TcpListener, state: Shared, stop: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            a = listener.accept() => a,
        };
        let Ok((stream, _)) = accepted else { continue };
        let state = state.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| routes::handle(state.clone(), req));
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                () = stop.cancelled() => {}
            }
        });
    }
}
