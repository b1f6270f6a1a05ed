//! [`OpenAiClient`]: an OpenAI-compatible Chat Completions client (OpenAI,
//! vLLM, Ollama, OpenRouter, ...) that streams. `reqwest` over rustls with
//! the `ring` provider and the platform's trust store; the API key travels as
//! a sensitive `Authorization: Bearer` header and never appears in Debug
//! output or logs.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use reqwest::header::{self, HeaderValue};
use tokio_util::sync::CancellationToken;

use super::error::{LlmError, parse_retry_after};
use super::retry::{RetryPolicy, with_retries};
use super::stream::{error_chain, json_events, read_capped, sse_events};
use super::types::ChatRequest;
use super::{ChatModel, EventStream, wire};

/// Largest error body read (the rest is not needed for the message).
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Largest non-streaming completion body accepted.
const MAX_JSON_BODY: usize = 16 * 1024 * 1024;

/// Timeouts and retries of an [`OpenAiClient`].
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
    /// returned at once as [`LlmError::RateLimited`].
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

/// A streaming Chat Completions client for one endpoint and key.
#[derive(Clone)]
pub struct OpenAiClient {
    http: reqwest::Client,
    endpoint: reqwest::Url,
    /// `Bearer <key>`, marked sensitive.
    authorization: Option<HeaderValue>,
    options: ClientOptions,
}

impl std::fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("endpoint", &self.endpoint.as_str())
            .field(
                "api_key",
                &self.authorization.as_ref().map(|_| "<redacted>"),
            )
            .field("options", &self.options)
            .finish()
    }
}

impl OpenAiClient {
    /// A client for `base_url` (e.g. `https://api.openai.com/v1`; requests go
    /// to `{base_url}/chat/completions`). An empty key means none.
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        options: ClientOptions,
    ) -> Result<Self, LlmError> {
        let endpoint = endpoint(base_url)?;
        let authorization = match api_key.filter(|k| !k.trim().is_empty()) {
            None => None,
            Some(key) => {
                let mut value =
                    HeaderValue::from_str(&format!("Bearer {}", key.trim())).map_err(|_| {
                        LlmError::Config(
                            "api_key contains characters an HTTP header cannot carry".into(),
                        )
                    })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        Ok(OpenAiClient {
            http: http_client(&options)?,
            endpoint,
            authorization,
            options,
        })
    }

    /// The URL completions are posted to.
    pub fn endpoint(&self) -> &str {
        self.endpoint.as_str()
    }

    /// One attempt: the response once its headers say success, else the error.
    async fn send_once(&self, body: Vec<u8>) -> Result<reqwest::Response, LlmError> {
        let mut request = self
            .http
            .post(self.endpoint.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "text/event-stream")
            .body(body);
        if let Some(auth) = &self.authorization {
            request = request.header(header::AUTHORIZATION, auth.clone());
        }
        let response =
            match tokio::time::timeout(self.options.request_timeout, request.send()).await {
                Err(_) => return Err(LlmError::Timeout),
                Ok(Err(e)) if e.is_timeout() => return Err(LlmError::Timeout),
                Ok(Err(e)) if e.is_builder() => return Err(LlmError::Config(error_chain(&e))),
                Ok(Err(e)) => return Err(LlmError::Transport(error_chain(&e))),
                Ok(Ok(response)) => response,
            };
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let headers = response.headers();
        let text_of = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let retry_after = parse_retry_after(
            text_of("retry-after-ms"),
            text_of("retry-after"),
            SystemTime::now(),
        );
        let body = tokio::time::timeout(
            self.options.request_timeout,
            read_capped(response, MAX_ERROR_BODY),
        )
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
        Err(LlmError::from_status(
            status.as_u16(),
            retry_after,
            &String::from_utf8_lossy(&body),
        ))
    }
}

#[async_trait]
impl ChatModel for OpenAiClient {
    async fn stream(
        &self,
        request: ChatRequest,
        cancel: CancellationToken,
    ) -> Result<EventStream, LlmError> {
        let body = serde_json::to_vec(&wire::request_body(&request))
            .map_err(|e| LlmError::Protocol(format!("encoding the request: {e}")))?;
        tracing::debug!(endpoint = %self.endpoint, model = %request.model, "chat completion request");
        let attempts = with_retries(self.options.retry_policy(), || self.send_once(body.clone()));
        // Dropping the retry future on cancel drops the in-flight request.
        let response = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(LlmError::Cancelled),
            response = attempts => response?,
        };
        let is_json = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("application/json"));
        if is_json {
            return json_events(response, cancel, self.options.idle_timeout, MAX_JSON_BODY).await;
        }
        Ok(sse_events(response, cancel, self.options.idle_timeout))
    }
}

/// The HTTP client every model client uses: rustls (ring, platform trust
/// store), the connect timeout and the explicit proxy, if any (else the
/// environment's `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY`, as reqwest reads
/// them by default).
pub(super) fn http_client(options: &ClientOptions) -> Result<reqwest::Client, LlmError> {
    let mut builder = reqwest::Client::builder()
        .tls_backend_preconfigured(tls_config()?)
        .connect_timeout(options.connect_timeout);
    if let Some(proxy) = &options.proxy {
        // The URL is not echoed: it may carry credentials.
        let all = reqwest::Proxy::all(proxy.url.as_str())
            .map_err(|_| LlmError::Config("proxy: not a valid proxy URL".into()))?
            .no_proxy(reqwest::NoProxy::from_string(&proxy.no_proxy));
        builder = builder.proxy(all);
    }
    builder
        .build()
        .map_err(|e| LlmError::Transport(format!("building the HTTP client: {}", error_chain(&e))))
}

/// `{base_url}/chat/completions`, checked to be an http(s) URL.
fn endpoint(base_url: &str) -> Result<reqwest::Url, LlmError> {
    // The value is not echoed: it may carry credentials.
    let invalid = |why: String| LlmError::Config(format!("base_url {why}"));
    let trimmed = base_url.trim().trim_end_matches('/');
    let url = reqwest::Url::parse(&format!("{trimmed}/chat/completions"))
        .map_err(|e| invalid(format!("is not a valid URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("must be http:// or https://".into()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("must not carry credentials; use api_key".into()));
    }
    Ok(url)
}

/// rustls with the `ring` provider and the platform verifier (system trust
/// store), built once per process.
fn tls_config() -> Result<rustls::ClientConfig, LlmError> {
    static CONFIG: OnceLock<Result<rustls::ClientConfig, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let verifier = rustls_platform_verifier::Verifier::new(provider.clone())
                .map_err(|e| format!("loading the platform certificate verifier: {e}"))?;
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS protocol versions: {e}"))?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
                .with_no_client_auth();
            config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            Ok(config)
        })
        .clone()
        .map_err(LlmError::Config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_proxy_is_checked_and_never_shown() {
        let proxy = |url: &str| ClientOptions {
            proxy: Some(ModelProxy {
                url: url.into(),
                no_proxy: "localhost".into(),
            }),
            ..ClientOptions::default()
        };
        let good = proxy("http://op:hunter2@127.0.0.1:3128");
        assert!(http_client(&good).is_ok());
        assert!(!format!("{good:?}").contains("hunter2"));
        let err = http_client(&proxy("::not a url hunter2")).unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn endpoint_is_joined_and_checked() {
        assert_eq!(
            endpoint("https://api.openai.com/v1/").map(|u| u.to_string()),
            Ok("https://api.openai.com/v1/chat/completions".to_string())
        );
        assert!(endpoint("ftp://x/v1").is_err());
        assert!(endpoint("not a url").is_err());
        assert!(endpoint("https://user:pw@host/v1").is_err());
    }

    #[test]
    fn key_with_newline_is_refused_without_echoing_it() {
        let err = OpenAiClient::new(
            "http://127.0.0.1:1/v1",
            Some("sk-se\ncret".into()),
            ClientOptions::default(),
        )
        .expect_err("bad header value");
        assert!(!err.to_string().contains("cret"), "{err}");
    }
}
