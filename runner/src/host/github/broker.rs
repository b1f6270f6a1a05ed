//! The token broker: one per runner, in front of a [`TokenSource`].
//!
//! * Tokens are cached per installation, in memory only, and handed out
//!   until their refresh point ([`RefreshPolicy`]: at the latest 5 minutes
//!   before expiry or at 75 % of the lifetime).
//! * One refresh per installation is in flight at a time: the first caller
//!   that finds the token due starts it on its own task, every other caller
//!   awaits the same shared result (so a caller giving up does not cancel
//!   it for the others).
//! * A refresh that fails is retried with a jittered, doubling delay
//!   (`backon`) when the failure is transient, logged (without the token)
//!   and counted (`token_refresh_failures_total`); while the old token still
//!   has [`super::refresh::STALE_GRACE`] to live it is handed out meanwhile.
//! * [`TokenBroker::invalidate`] forgets a token GitHub refused (a 401): the
//!   next caller gets a new one.
//! * Agents' tokens ([`TokenBroker::token_for_agent`]): when the source
//!   scopes tokens (the runner's own App), a token minted for the one
//!   repository asked for, with the operator's permissions, cached per
//!   (installation, repository) like the installations' own; otherwise
//!   (the control plane) the installation's token as it came.
//! * Which installation serves `owner/repo` comes from the repositories each
//!   token covers. A repository no known token covers makes the broker list
//!   the installations again and re-mint tokens older than
//!   [`BrokerOptions::recheck_after`] (so repositories added to an
//!   installation are found within that time); still uncovered ⇒
//!   [`GithubError::NotCovered`] naming it.
//!
//! Every minted token is added to the runtime's [`Redactor`] before anyone
//! sees it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use backon::{ExponentialBuilder, Retryable};
use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, StreamExt};

use super::refresh::{RefreshPolicy, still_usable};
use super::source::TokenSource;
use super::{GithubError, Installation, InstallationToken};
use crate::util::redact::Redactor;

/// Installations refreshed at once when looking for a repository.
const PARALLEL_REFRESHES: usize = 4;

/// How the broker refreshes.
#[derive(Debug, Clone)]
pub struct BrokerOptions {
    /// When tokens are refreshed.
    pub policy: RefreshPolicy,
    /// First retry delay after a failed refresh (jittered, doubling).
    pub retry_min_delay: Duration,
    /// Longest retry delay.
    pub retry_max_delay: Duration,
    /// Retries after the first failed attempt.
    pub retries: usize,
    /// On a repository no token covers, tokens older than this are
    /// re-minted to learn the repositories they cover now.
    pub recheck_after: Duration,
}

impl Default for BrokerOptions {
    fn default() -> Self {
        Self {
            policy: RefreshPolicy::default(),
            retry_min_delay: Duration::from_millis(500),
            retry_max_delay: Duration::from_secs(10),
            retries: 4,
            recheck_after: Duration::from_secs(60),
        }
    }
}

/// What "now" is (a test can turn the clock).
pub(crate) type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// Hands out installation tokens; cheap to clone (one shared cache).
#[derive(Clone)]
pub struct TokenBroker {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for TokenBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenBroker")
            .field("source", &self.inner.source.describe())
            .field("git_host", &self.inner.git_host)
            .finish_non_exhaustive()
    }
}

struct Inner {
    source: Arc<dyn TokenSource>,
    redactor: Redactor,
    git_host: String,
    options: BrokerOptions,
    clock: Clock,
    slots: Mutex<HashMap<SlotKey, Slot>>,
}

/// Which token a cache slot holds: an installation's own (`repo: None`,
/// every repository the installation covers), or one minted for a single
/// repository of it (`owner/repo`, lowercased).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SlotKey {
    installation: i64,
    repo: Option<String>,
}

impl SlotKey {
    fn installation(installation: i64) -> Self {
        Self {
            installation,
            repo: None,
        }
    }
}

type Flight = Shared<BoxFuture<'static, Result<Arc<Cached>, GithubError>>>;

/// What the broker knows of one installation.
#[derive(Default)]
struct Slot {
    cached: Option<Arc<Cached>>,
    /// Repositories the last token covered; kept when the token is
    /// invalidated, so the installation is still found for them.
    repositories: Arc<Vec<String>>,
    account: Option<String>,
    inflight: Option<Flight>,
    /// When the last refresh failed (cleared by a success): until
    /// `retry_max_delay` has passed, a still-usable token is handed out
    /// without trying again.
    failed_at: Option<SystemTime>,
}

struct Cached {
    token: super::Secret,
    minted_at: SystemTime,
    expires_at: SystemTime,
    refresh_at: SystemTime,
    repositories: Arc<Vec<String>>,
}

impl Cached {
    fn issue(&self, installation_id: i64) -> InstallationToken {
        InstallationToken {
            installation_id,
            token: self.token.clone(),
            expires_at: self.expires_at,
            repositories: self.repositories.to_vec(),
        }
    }
}

/// `owner/repo`, lowercased (GitHub names are case-insensitive), `.git`
/// dropped; `None` if it is not a repository name.
pub fn repo_key(owner: &str, repo: &str) -> Option<String> {
    let repo = repo.strip_suffix(".git").unwrap_or(repo);
    (is_repo_name(owner) && is_repo_name(repo))
        .then(|| format!("{owner}/{repo}").to_ascii_lowercase())
}

/// A GitHub owner or repository name: 1 to 100 of `[A-Za-z0-9._-]`, not
/// `.` or `..`.
pub fn is_repo_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn covers(repositories: &[String], key: &str) -> bool {
    repositories.iter().any(|r| r.eq_ignore_ascii_case(key))
}

impl TokenBroker {
    /// A broker over `source`; every token it mints is added to `redactor`.
    pub fn new(
        source: Arc<dyn TokenSource>,
        redactor: Redactor,
        git_host: impl Into<String>,
        options: BrokerOptions,
    ) -> Self {
        Self::with_clock(
            source,
            redactor,
            git_host,
            options,
            Arc::new(SystemTime::now),
        )
    }

    pub(crate) fn with_clock(
        source: Arc<dyn TokenSource>,
        redactor: Redactor,
        git_host: impl Into<String>,
        options: BrokerOptions,
        clock: Clock,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                source,
                redactor,
                git_host: git_host.into(),
                options,
                clock,
                slots: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Where tokens come from, for messages.
    pub fn describe_source(&self) -> String {
        self.inner.source.describe()
    }

    /// The git host tokens are for (`github.com`, a GitHub Enterprise host,
    /// or a test's `127.0.0.1:PORT`).
    pub fn git_host(&self) -> &str {
        &self.inner.git_host
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<SlotKey, Slot>> {
        self.inner.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> SystemTime {
        (self.inner.clock)()
    }

    /// A token whose installation covers `owner/repo`: cached, refreshed
    /// before expiry, one refresh in flight per installation.
    pub async fn token_for_repo(
        &self,
        owner: &str,
        repo: &str,
    ) -> Result<InstallationToken, GithubError> {
        let key = repo_key(owner, repo).ok_or_else(|| GithubError::BadRepo {
            repo: format!("{owner}/{repo}"),
        })?;
        if let Some(found) = self.known_token(&key).await? {
            return Ok(found);
        }
        let mut learnt = self.learn().await?;
        learnt.sort_by_key(|(id, _)| *id);
        let mut errors = Vec::new();
        for (id, result) in learnt {
            match result {
                // Just minted: handed out even if already due (a token
                // shorter-lived than the refresh margin is always due).
                Ok(c) if covers(&c.repositories, &key) => return Ok(c.issue(id)),
                Ok(_) => {}
                Err(e) => errors.push(e),
            }
        }
        match errors.into_iter().next() {
            // Nothing could be learnt at all: say why rather than "not covered".
            Some(e) if !self.knows_any_repository() => Err(e),
            _ => Err(GithubError::NotCovered {
                repo: format!("{owner}/{repo}"),
            }),
        }
    }

    /// A fresh token of an installation already known to cover `key`.
    async fn known_token(&self, key: &str) -> Result<Option<InstallationToken>, GithubError> {
        let candidates: Vec<i64> = {
            let slots = self.slots();
            let mut ids: Vec<i64> = slots
                .iter()
                .filter(|(k, s)| k.repo.is_none() && covers(&s.repositories, key))
                .map(|(k, _)| k.installation)
                .collect();
            ids.sort_unstable();
            ids
        };
        let mut first_error = None;
        for id in candidates {
            match self.fresh(&SlotKey::installation(id), None).await {
                Ok(c) if covers(&c.repositories, key) => return Ok(Some(c.issue(id))),
                Ok(_) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    fn knows_any_repository(&self) -> bool {
        self.slots().values().any(|s| !s.repositories.is_empty())
    }

    /// List the installations again and refresh the tokens older than
    /// `recheck_after` (to learn the repositories they cover now). Returns
    /// each installation's token or why it could not be had.
    async fn learn(&self) -> Result<Vec<(i64, Result<Arc<Cached>, GithubError>)>, GithubError> {
        let listed = self.inner.source.installations().await?;
        {
            let mut slots = self.slots();
            let ids: Vec<i64> = listed.iter().map(|i| i.id).collect();
            // Installations no longer listed cover nothing any more.
            slots.retain(|k, s| ids.contains(&k.installation) || s.inflight.is_some());
            for i in &listed {
                slots
                    .entry(SlotKey::installation(i.id))
                    .or_default()
                    .account = i.account.clone();
            }
        }
        let recheck = self.inner.options.recheck_after;
        Ok(futures::stream::iter(listed)
            .map(|i| async move {
                (
                    i.id,
                    self.fresh(&SlotKey::installation(i.id), Some(recheck))
                        .await,
                )
            })
            .buffer_unordered(PARALLEL_REFRESHES)
            .collect()
            .await)
    }

    /// Every installation available to this runner, with the repositories
    /// its token covers and when that token expires (a token is minted for
    /// each one not cached yet).
    pub async fn installations(&self) -> Result<Vec<Installation>, GithubError> {
        let listed = self.inner.source.installations().await?;
        {
            let mut slots = self.slots();
            for i in &listed {
                slots
                    .entry(SlotKey::installation(i.id))
                    .or_default()
                    .account = i.account.clone();
            }
        }
        let mut out: Vec<Installation> = futures::stream::iter(listed)
            .map(|i| async move {
                match self.fresh(&SlotKey::installation(i.id), None).await {
                    Ok(c) => Installation {
                        id: i.id,
                        account: i.account,
                        repositories: c.repositories.to_vec(),
                        token_expires_at: Some(c.expires_at),
                        error: None,
                    },
                    Err(e) => Installation {
                        id: i.id,
                        account: i.account,
                        repositories: Vec::new(),
                        token_expires_at: None,
                        error: Some(e.to_string()),
                    },
                }
            })
            .buffer_unordered(PARALLEL_REFRESHES)
            .collect()
            .await;
        out.sort_by_key(|i| i.id);
        Ok(out)
    }

    /// A token of installation `installation_id` (it need not cover any
    /// particular repository).
    pub async fn token_for_installation(
        &self,
        installation_id: i64,
    ) -> Result<InstallationToken, GithubError> {
        Ok(self
            .fresh(&SlotKey::installation(installation_id), None)
            .await?
            .issue(installation_id))
    }

    /// A token for an agent's git on `owner/repo`: when the source scopes
    /// tokens (the runner's own App), one minted for that repository alone
    /// with the configured permissions, cached per (installation,
    /// repository); otherwise the installation's token
    /// ([`TokenBroker::token_for_repo`]).
    pub async fn token_for_agent(
        &self,
        owner: &str,
        repo: &str,
    ) -> Result<InstallationToken, GithubError> {
        if !self.inner.source.scopes_to_repository() {
            return self.token_for_repo(owner, repo).await;
        }
        let key = repo_key(owner, repo).ok_or_else(|| GithubError::BadRepo {
            repo: format!("{owner}/{repo}"),
        })?;
        // Which installation covers it: from the cache, or learnt.
        let installation_id = match self.covering_installation(&key) {
            Some(id) => id,
            None => self.token_for_repo(owner, repo).await?.installation_id,
        };
        let slot = SlotKey {
            installation: installation_id,
            repo: Some(key),
        };
        Ok(self.fresh(&slot, None).await?.issue(installation_id))
    }

    /// The installation already known to cover `key`, if any.
    fn covering_installation(&self, key: &str) -> Option<i64> {
        self.slots()
            .iter()
            .filter(|(k, s)| k.repo.is_none() && covers(&s.repositories, key))
            .map(|(k, _)| k.installation)
            .min()
    }

    /// Whether [`TokenBroker::token_for_agent`] for `owner/repo` would be
    /// served from the cache now (no call to the source).
    pub fn agent_token_cached(&self, owner: &str, repo: &str) -> bool {
        let Some(key) = repo_key(owner, repo) else {
            return true; // refused at once, costs nothing
        };
        let scoped = self.inner.source.scopes_to_repository();
        let now = self.now();
        self.slots().iter().any(|(k, s)| {
            let matches = if scoped {
                k.repo.as_deref() == Some(key.as_str())
            } else {
                k.repo.is_none() && covers(&s.repositories, &key)
            };
            matches && s.cached.as_ref().is_some_and(|c| now < c.refresh_at)
        })
    }

    /// Forget the cached tokens of this installation (a 401 was seen with
    /// one); the next caller gets a new one.
    pub fn invalidate(&self, installation_id: i64) {
        let mut dropped = false;
        for (_, slot) in self
            .slots()
            .iter_mut()
            .filter(|(k, _)| k.installation == installation_id)
        {
            dropped |= slot.cached.take().is_some();
        }
        if dropped {
            tracing::info!(installation_id, "GitHub installation token invalidated");
        }
    }

    /// Forget `token` wherever it is cached (an installation's or a
    /// repository's); the installation it was of, if it was cached.
    pub fn forget_token(&self, token: &str) -> Option<i64> {
        let mut slots = self.slots();
        let (key, slot) = slots
            .iter_mut()
            .find(|(_, s)| s.cached.as_ref().is_some_and(|c| c.token.expose() == token))?;
        slot.cached = None;
        tracing::info!(
            installation_id = key.installation,
            repository = key.repo.as_deref().unwrap_or("(all)"),
            "GitHub installation token invalidated"
        );
        Some(key.installation)
    }

    /// The cached token if it is not due (and, with `max_age`, younger than
    /// that), else the result of the refresh in flight, starting one if
    /// none is.
    async fn fresh(
        &self,
        key: &SlotKey,
        max_age: Option<Duration>,
    ) -> Result<Arc<Cached>, GithubError> {
        let flight = {
            let now = self.now();
            let mut slots = self.slots();
            let slot = slots.entry(key.clone()).or_default();
            if let Some(c) = &slot.cached {
                let young = max_age
                    .is_none_or(|age| now.duration_since(c.minted_at).unwrap_or_default() < age);
                if now < c.refresh_at && young {
                    return Ok(c.clone());
                }
                let failed_lately = slot.failed_at.is_some_and(|t| {
                    now.duration_since(t).unwrap_or_default() < self.inner.options.retry_max_delay
                });
                if failed_lately && max_age.is_none() && still_usable(c.expires_at, now) {
                    return Ok(c.clone());
                }
            }
            match &slot.inflight {
                Some(flight) => flight.clone(),
                None => {
                    let flight = self.start_refresh(key.clone());
                    slot.inflight = Some(flight.clone());
                    flight
                }
            }
        };
        flight.await
    }

    /// The refresh runs on its own task, so callers that give up do not
    /// cancel it for the others. A task that ends without finishing (a
    /// panic) never cleared its slot's flight: that is done here, so the
    /// next caller starts a new refresh instead of getting this failure
    /// forever.
    fn start_refresh(&self, key: SlotKey) -> Flight {
        let installation_id = key.installation;
        let broker = self.clone();
        let slot_key = key.clone();
        let task = tokio::spawn(async move { broker.refresh(&slot_key).await });
        // Weak: the flight is kept in the broker's own slots.
        let inner = Arc::downgrade(&self.inner);
        async move {
            task.await.unwrap_or_else(|e| {
                if let Some(inner) = inner.upgrade() {
                    let mut slots = inner.slots.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(slot) = slots.get_mut(&key) {
                        slot.inflight = None;
                    }
                }
                Err(GithubError::Source(format!(
                    "refreshing the token of installation {installation_id} stopped: {e}"
                )))
            })
        }
        .boxed()
        .shared()
    }

    async fn refresh(&self, key: &SlotKey) -> Result<Arc<Cached>, GithubError> {
        let installation_id = key.installation;
        let inner = &self.inner;
        let backoff = ExponentialBuilder::default()
            .with_min_delay(inner.options.retry_min_delay)
            .with_max_delay(inner.options.retry_max_delay)
            .with_factor(2.0)
            .with_jitter()
            .with_max_times(inner.options.retries);
        let attempt = || async {
            let minted = match &key.repo {
                None => inner.source.mint(installation_id).await,
                Some(repo) => inner.source.mint_for_repo(installation_id, repo).await,
            };
            if minted.is_err() {
                crate::observe::metrics::token_refresh_failed();
            }
            minted
        };
        let minted = attempt
            .retry(backoff)
            .when(GithubError::is_transient)
            .notify(|e, delay| {
                tracing::warn!(
                    installation_id,
                    error = %e,
                    retry_in_ms = delay.as_millis() as u64,
                    "refreshing a GitHub installation token failed; retrying"
                );
            })
            .await;
        let now = self.now();
        let mut slots = self.slots();
        let slot = slots.entry(key.clone()).or_default();
        slot.inflight = None;
        match minted {
            Ok(minted) => {
                // Hidden from every output before anyone can see it.
                inner.redactor.add(minted.token.expose());
                crate::observe::metrics::token_refreshed();
                let repositories = Arc::new(minted.repositories);
                let cached = Arc::new(Cached {
                    token: minted.token,
                    minted_at: now,
                    expires_at: minted.expires_at,
                    refresh_at: inner.options.policy.refresh_at(now, minted.expires_at),
                    repositories: repositories.clone(),
                });
                slot.cached = Some(cached.clone());
                slot.repositories = repositories;
                slot.failed_at = None;
                tracing::debug!(
                    installation_id,
                    expires_in_s = minted
                        .expires_at
                        .duration_since(now)
                        .unwrap_or_default()
                        .as_secs(),
                    repositories = cached.repositories.len(),
                    "GitHub installation token refreshed"
                );
                Ok(cached)
            }
            Err(e) => {
                tracing::warn!(
                    installation_id,
                    source = %inner.source.describe(),
                    error = %e,
                    "refreshing a GitHub installation token failed"
                );
                slot.failed_at = Some(now);
                if matches!(e, GithubError::UnknownInstallation(_)) {
                    slot.cached = None;
                    slot.repositories = Arc::default();
                    return Err(e);
                }
                match &slot.cached {
                    Some(c) if still_usable(c.expires_at, now) => {
                        tracing::warn!(
                            installation_id,
                            "handing out the current token until a refresh succeeds"
                        );
                        Ok(c.clone())
                    }
                    _ => Err(e),
                }
            }
        }
    }
}
