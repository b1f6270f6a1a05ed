//! [`OpenAiClient`]: an OpenAI-compatible Chat Completions client (OpenAI,
//! vLLM, Ollama, OpenRouter, ...) that streams. The HTTP plumbing it shares
//! with the Anthropic client is in `http.rs`, the SSE reader in `sse.rs`;
//! the API key travels as a sensitive `Authorization: Bearer` header and
//! never appears in Debug output or logs.

use async_trait::async_trait;
use reqwest::header;
use tokio_util::sync::CancellationToken;

use super::chat::{ChatModel, EventStream};
use super::error::LlmError;
use super::http::Endpoint;
use super::openai_stream::{json_events, sse_events};
use super::options::ClientOptions;
use super::types::ChatRequest;
use super::wire;

/// Largest non-streaming completion body accepted.
const MAX_JSON_BODY: usize = 16 * 1024 * 1024;

/// A streaming Chat Completions client for one endpoint and key.
#[derive(Clone)]
pub struct OpenAiClient {
    /// `{base_url}/chat/completions`, the key as `Authorization: Bearer`.
    endpoint: Endpoint,
}

impl std::fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("endpoint", &self.endpoint)
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
        let endpoint = Endpoint::new(
            &endpoint(base_url),
            api_key,
            header::AUTHORIZATION,
            "Bearer ",
            &[],
            options,
        )?;
        Ok(OpenAiClient { endpoint })
    }

    /// The URL completions are posted to.
    pub fn endpoint(&self) -> &str {
        self.endpoint.url.as_str()
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
        tracing::debug!(endpoint = %self.endpoint.url, model = %request.model, "chat completion request");
        let response = self.endpoint.post(body, &cancel).await?;
        let idle_timeout = self.endpoint.options.idle_timeout;
        let is_json = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("application/json"));
        if is_json {
            return json_events(response, cancel, idle_timeout, MAX_JSON_BODY).await;
        }
        Ok(sse_events(response, cancel, idle_timeout))
    }
}

/// `{base_url}/chat/completions` (checked by [`Endpoint::new`]).
fn endpoint(base_url: &str) -> String {
    let trimmed = base_url.trim().trim_end_matches('/');
    format!("{trimmed}/chat/completions")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_is_joined_and_checked() {
        let url = |base: &str| {
            OpenAiClient::new(base, None, ClientOptions::default())
                .map(|c| c.endpoint().to_string())
        };
        assert_eq!(
            url("https://api.openai.com/v1/"),
            Ok("https://api.openai.com/v1/chat/completions".to_string())
        );
        assert!(url("ftp://x/v1").is_err());
        assert!(url("not a url").is_err());
        assert!(url("https://user:pw@host/v1").is_err());
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
