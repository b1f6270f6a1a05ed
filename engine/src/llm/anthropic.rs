//! [`AnthropicClient`]: a native Anthropic Messages API client that streams
//! (`POST {base}/v1/messages`, SSE), so `code-agent` runs Claude models
//! without an OpenAI-compatible proxy. Same HTTP stack, timeouts and retry
//! policy as [`super::OpenAiClient`] (both post through `http.rs` and read
//! the stream with `sse.rs`): 429 honours `retry-after`, 529 (overloaded)
//! and other 5xx back off and retry. The key travels as a sensitive
//! `x-api-key` header and never appears in Debug output or logs.

use async_trait::async_trait;
use reqwest::header::HeaderName;
use tokio_util::sync::CancellationToken;

use super::chat::{ChatModel, EventStream};
use super::error::LlmError;
use super::http::Endpoint;
use super::options::ClientOptions;
use super::types::ChatRequest;
use super::{anthropic_stream, anthropic_wire};

/// The API version sent as `anthropic-version`.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A streaming Messages API client for one endpoint and key.
#[derive(Clone)]
pub struct AnthropicClient {
    /// `…/v1/messages`, the key as `x-api-key`, `anthropic-version`.
    endpoint: Endpoint,
}

impl std::fmt::Debug for AnthropicClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicClient")
            .field("endpoint", &self.endpoint)
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
        let endpoint = Endpoint::new(
            &endpoint(base_url),
            api_key,
            HeaderName::from_static("x-api-key"),
            "",
            &[("anthropic-version", ANTHROPIC_VERSION)],
            options,
        )?;
        Ok(Self { endpoint })
    }

    /// The URL messages are posted to.
    pub fn endpoint(&self) -> &str {
        self.endpoint.url.as_str()
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
        tracing::debug!(endpoint = %self.endpoint.url, model = %request.model, "anthropic messages request");
        let response = self.endpoint.post(body, &cancel).await?;
        Ok(anthropic_stream::sse_events(
            response,
            cancel,
            self.endpoint.options.idle_timeout,
        ))
    }
}

/// `{base}/v1/messages` (or `{base}/messages` when the base ends in `/v1`);
/// checked by [`Endpoint::new`].
fn endpoint(base_url: &str) -> String {
    let trimmed = base_url.trim().trim_end_matches('/');
    if trimmed.ends_with("/v1") {
        format!("{trimmed}/messages")
    } else {
        format!("{trimmed}/v1/messages")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_forms_and_secret_key() {
        let url = |base: &str| {
            AnthropicClient::new(base, None, ClientOptions::default())
                .map(|c| c.endpoint().to_string())
        };
        assert_eq!(
            url("https://api.anthropic.com"),
            Ok("https://api.anthropic.com/v1/messages".to_string())
        );
        assert_eq!(
            url("http://127.0.0.1:9/v1/"),
            Ok("http://127.0.0.1:9/v1/messages".to_string())
        );
        assert!(url("ftp://x").is_err());
        let client = AnthropicClient::new(
            "https://api.anthropic.com",
            Some("sk-ant-secret".into()),
            ClientOptions::default(),
        )
        .unwrap();
        assert!(!format!("{client:?}").contains("secret"));
    }
}
