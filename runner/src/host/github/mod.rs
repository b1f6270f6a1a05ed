//! GitHub installation tokens for the agents' git: one [`TokenBroker`] per
//! runner, fed by the control plane ([`control_plane`], the default) or by
//! the runner's own GitHub App ([`app`], when `--github-app-id` is set).
//!
//! Tokens live in memory only: never logged, never written to disk, never in
//! an update ([`Secret`] prints `***`; every minted token is added to
//! the runtime's [`Redactor`] before anyone sees it).

pub mod app;
pub mod broker;
pub mod control_plane;
mod error;
pub mod jwt;
pub mod none;
pub mod refresh;
pub mod source;

use std::sync::Arc;
use std::time::SystemTime;

pub use crate::config::secret::Secret;
pub use broker::{BrokerOptions, TokenBroker, is_repo_name, repo_key};
pub use error::GithubError;

use crate::config::GithubConfig;
use crate::util::redact::Redactor;

/// A token handed out by the broker. `Debug` prints the token as `***`.
#[derive(Debug, Clone)]
pub struct InstallationToken {
    /// The installation.
    pub installation_id: i64,
    /// The token (prints as `***`).
    pub token: Secret,
    /// When it expires.
    pub expires_at: SystemTime,
    /// `owner/repo` of every repository the token covers.
    pub repositories: Vec<String>,
}

/// An installation available to this runner, as [`TokenBroker::installations`]
/// reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installation {
    /// The installation's id.
    pub id: i64,
    /// The user or organisation it is installed on, when the source says.
    pub account: Option<String>,
    /// `owner/repo` of every repository its token covers.
    pub repositories: Vec<String>,
    /// When its current token expires (`None` when no token could be had).
    pub token_expires_at: Option<SystemTime>,
    /// Why no token could be had.
    pub error: Option<String>,
}

/// The broker of a runner that may not ask the control plane (protocol
/// 0.7): its GitHub App when one is configured, else none at all
/// ([`none::NoSource`]).
pub fn broker_without_control_plane(
    config: &GithubConfig,
    redactor: Redactor,
    proxies: &crate::util::proxy::ProxyConfig,
) -> Result<TokenBroker, GithubError> {
    if config.app.is_some() {
        return broker(config, None, redactor, proxies);
    }
    Ok(TokenBroker::new(
        Arc::new(none::NoSource),
        redactor,
        config.host.clone(),
        BrokerOptions::default(),
    ))
}

/// The broker of a runner configured with `config`: its GitHub App when one
/// is configured, else the control plane through `control_plane` (the
/// runner's registration client). The App's API calls go through the
/// proxy `proxies` picks for the API host.
pub fn broker(
    config: &GithubConfig,
    control_plane: Option<crate::host::client::Client>,
    redactor: Redactor,
    proxies: &crate::util::proxy::ProxyConfig,
) -> Result<TokenBroker, GithubError> {
    let source: Arc<dyn source::TokenSource> = match (&config.app, control_plane) {
        (Some(app), _) => Arc::new(
            app::AppSource::new(app.app_id, app.key.clone(), &app.api_url, proxies.clone())?
                .with_permissions(app.token_permissions.clone()),
        ),
        (None, Some(client)) => Arc::new(control_plane::ControlPlaneSource::new(client)),
        (None, None) => return Err(GithubError::NotConfigured),
    };
    Ok(TokenBroker::new(
        source,
        redactor,
        config.host.clone(),
        BrokerOptions::default(),
    ))
}

#[cfg(test)]
mod broker_tests;
