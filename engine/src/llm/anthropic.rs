//! [`AnthropicClient`]: a native Anthropic Messages API client that streams
//! (`POST {base}/v1/messages`, SSE), so `code-agent` runs Claude models
//! without an OpenAI-compatible proxy. Same HTTP stack, timeouts and retry
//! policy as [`super::OpenAiClient`]: 429 honours `retry-after`, 529
//! (overloaded) and other 5xx back off and retry. The key travels as a
//! sensitive `x-api-key` header and never appears in Debug output or logs.

use std::time::SystemTime;

use async_trait::async_trait;
use reqwest::header::{self, HeaderValue};
use tokio_util::sync::CancellationToken;

use super::client::{ClientOptions, http_client};
use super::error::{LlmError, parse_retry_after};
use super::retry::with_retries;
use super::stream::{error_chain, read_capped};
use super::types::ChatRequest;
use super::{ChatModel, EventStream, anthropic_stream, anthropic_wire};

/// The API version sent as `anthropic-version`.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// Largest error body read.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// A streaming Messages API client for one endpoint and key.
#[derive(Clone)]
pub struct AnthropicClient {
    http: reqwest::Client,
    endpoint: reqwest::Url,
    /// The key, marked sensitive.
    api_key: Option<HeaderValue>,
    options: ClientOptions,
}

impl std::fmt::Debug for AnthropicClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicClient")
            .field("endpoint", &self.endpoint.as_str())
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("options", &self.options)
            .finish()
    }
}

impl AnthropicClient {
    /// A client for `base_url` (`https://api.anthropic.com`, or the same with
    /// `/v1`; requests go to `…/v1/messages`). An empty key means none.
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        options: ClientOptions,
    ) -> Result<Self, LlmError> {
        let endpoint = endpoint(base_url)?;
        let api_key = match api_key.filter(|k| !k.trim().is_empty()) {
            None => None,
            Some(key) => {
                let mut value = HeaderValue::from_str(key.trim()).map_err(|_| {
                    LlmError::Config(
                        "api_key contains characters an HTTP header cannot carry".into(),
                    )
                })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        Ok(Self {
            http: http_client(&options)?,
            endpoint,
            api_key,
            options,
        })
    }

    /// The URL messages are posted to.
    pub fn endpoint(&self) -> &str {
        self.endpoint.as_str()
    }

    async fn send_once(&self, body: Vec<u8>) -> Result<reqwest::Response, LlmError> {
        let mut request = self
            .http
            .post(self.endpoint.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "text/event-stream")
            .header("anthropic-version", ANTHROPIC_VERSION)
            .body(body);
        if let Some(key) = &self.api_key {
            request = request.header("x-api-key", key.clone());
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
        // `{"type":"error","error":{"type":…,"message":…}}` is unwrapped by
        // from_status; 529 (overloaded) is a 5xx and so retried.
        Err(LlmError::from_status(
            status.as_u16(),
            retry_after,
            &String::from_utf8_lossy(&body),
        ))
    }
}

#[async_trait]
impl ChatModel for AnthropicClient {
    async fn stream(
        &self,
        request: ChatRequest,
        cancel: CancellationToken,
    ) -> Result<EventStream, LlmError> {
        let body = serde_json::to_vec(&anthropic_wire::request_body(&request))
            .map_err(|e| LlmError::Protocol(format!("encoding the request: {e}")))?;
        tracing::debug!(endpoint = %self.endpoint, model = %request.model, "anthropic messages request");
        let attempts = with_retries(self.options.retry_policy(), || self.send_once(body.clone()));
        let response = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(LlmError::Cancelled),
            response = attempts => response?,
        };
        Ok(anthropic_stream::sse_events(
            response,
            cancel,
            self.options.idle_timeout,
        ))
    }
}

/// `{base}/v1/messages` (or `{base}/messages` when the base ends in `/v1`),
/// checked to be an http(s) URL without credentials.
fn endpoint(base_url: &str) -> Result<reqwest::Url, LlmError> {
    let invalid = |why: String| LlmError::Config(format!("base_url {why}"));
    let trimmed = base_url.trim().trim_end_matches('/');
    let joined = if trimmed.ends_with("/v1") {
        format!("{trimmed}/messages")
    } else {
        format!("{trimmed}/v1/messages")
    };
    let url =
        reqwest::Url::parse(&joined).map_err(|e| invalid(format!("is not a valid URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("must be http:// or https://".into()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("must not carry credentials; use api_key".into()));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_forms_and_secret_key() {
        assert_eq!(
            endpoint("https://api.anthropic.com").map(|u| u.to_string()),
            Ok("https://api.anthropic.com/v1/messages".to_string())
        );
        assert_eq!(
            endpoint("http://127.0.0.1:9/v1/").map(|u| u.to_string()),
            Ok("http://127.0.0.1:9/v1/messages".to_string())
        );
        assert!(endpoint("ftp://x").is_err());
        let client = AnthropicClient::new(
            "https://api.anthropic.com",
            Some("sk-ant-secret".into()),
            ClientOptions::default(),
        )
        .unwrap();
        assert!(!format!("{client:?}").contains("secret"));
    }
}
