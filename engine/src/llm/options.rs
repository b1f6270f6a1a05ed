//! The settings every model client takes ([`ClientOptions`]: timeouts,
//! retries, an explicit proxy), apart from the clients so the shared HTTP
//! plumbing reads them without importing a client.

use std::time::Duration;

use super::retry::RetryPolicy;

/// Timeouts and retries of a model client ([`super::OpenAiClient`],
/// [`super::AnthropicClient`]).
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Per attempt: how long to wait for the response headers.
    pub request_timeout: Duration,
    /// Once streaming: the longest gap between two chunks.
    pub idle_timeout: Duration,
    /// TCP (+TLS) connect timeout.
    pub connect_timeout: Duration,
    /// Retries after the first attempt (429, 5xx, 408/409, transport errors).
    pub max_retries: u32,
    /// First backoff delay; doubles per retry (with jitter) up to `max_backoff`.
    pub initial_backoff: Duration,
    /// The longest wait between retries.
    pub max_backoff: Duration,
    /// The longest 429 `Retry-After` the client waits for; a longer one is
    /// returned at once as [`super::LlmError::RateLimited`].
    pub max_retry_after: Duration,
    /// An explicit HTTP proxy for every model call (an embedder's
    /// `--proxy`). `None`: reqwest's own handling of `HTTPS_PROXY`,
    /// `HTTP_PROXY` and `NO_PROXY` from the environment.
    pub proxy: Option<ModelProxy>,
}

/// An explicit proxy for model providers: `url` (may carry credentials,
/// hence never shown) and the `NO_PROXY`-style list of hosts reached
/// directly.
#[derive(Clone, PartialEq, Eq)]
pub struct ModelProxy {
    /// `http://[user:pass@]host:port`.
    pub url: String,
    /// Comma-separated hosts/domains reached directly (`NO_PROXY` syntax).
    pub no_proxy: String,
}

/// The URL is left out: it may carry credentials.
impl std::fmt::Debug for ModelProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelProxy")
            .field("url", &"<redacted>")
            .field("no_proxy", &self.no_proxy)
            .finish()
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            request_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(15),
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(120),
            proxy: None,
        }
    }
}

impl ClientOptions {
    pub(super) fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_retries: self.max_retries,
            initial_backoff: self.initial_backoff,
            max_backoff: self.max_backoff,
            max_retry_after: self.max_retry_after,
        }
    }
}
