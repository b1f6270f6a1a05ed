//! Which model a session talks to and how one call is consumed. The
//! session's `LLMConfig` (provider, model, api_key, base_url, temperature,
//! max_tokens) picks and overrides what the provider store resolves;
//! clients are cached per API, endpoint and key. A provider named
//! `anthropic` (or `anthropic-*`/`anthropic.*`) gets the native Messages API
//! client, every other one the OpenAI-compatible client. [`complete`] drives one
//! streaming call to its end, handing text and reasoning deltas to the
//! caller as they arrive.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use code_agent_proto::LlmConfig;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use crate::llm::{
    AnthropicClient, ChatMessage, ChatModel, ChatRequest, ClientOptions, LlmError, OpenAiClient,
    StreamEvent, ToolSpec, Usage,
};
use crate::providers::{ProviderStore, speaks_anthropic};

/// Distinct (endpoint, key) clients kept; the cache is emptied past it.
const MAX_CLIENTS: usize = 32;

/// The model a generation calls, with the session's sampling settings.
#[derive(Clone)]
pub struct TurnModel {
    pub client: Arc<dyn ChatModel>,
    pub provider: String,
    pub model: String,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
}

impl TurnModel {
    /// A request for this model.
    pub fn request(
        &self,
        messages: Vec<ChatMessage>,
        tools: Vec<ToolSpec>,
        reasoning_effort: Option<String>,
        json_schema: Option<serde_json::Value>,
    ) -> ChatRequest {
        ChatRequest {
            model: self.model.clone(),
            messages,
            tools,
            temperature: self.temperature,
            max_tokens: self.max_tokens,
            reasoning_effort,
            json_schema,
        }
    }
}

/// (speaks Anthropic, endpoint, key).
type ClientKey = (bool, String, Option<String>);

/// Cached HTTP clients, one per API, endpoint and key.
#[derive(Default)]
pub struct ModelClients {
    clients: Mutex<HashMap<ClientKey, Arc<dyn ChatModel>>>,
    options: ClientOptions,
}

impl std::fmt::Debug for ModelClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelClients").finish_non_exhaustive()
    }
}

fn non_empty(s: &str) -> Option<&str> {
    Some(s).filter(|s| !s.trim().is_empty())
}

impl ModelClients {
    /// Clients built with `options`.
    pub fn new(options: ClientOptions) -> Self {
        Self {
            clients: Mutex::default(),
            options,
        }
    }

    fn client(
        &self,
        anthropic: bool,
        base_url: &str,
        api_key: Option<String>,
    ) -> Result<Arc<dyn ChatModel>, Status> {
        let key = (anthropic, base_url.to_string(), api_key.clone());
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let refused = |e: LlmError| Status::failed_precondition(format!("model client: {e}"));
        let client: Arc<dyn ChatModel> = if anthropic {
            Arc::new(
                AnthropicClient::new(base_url, api_key, self.options.clone()).map_err(refused)?,
            )
        } else {
            Arc::new(OpenAiClient::new(base_url, api_key, self.options.clone()).map_err(refused)?)
        };
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        clients.insert(key, client.clone());
        Ok(client)
    }

    /// The model of a session whose config carries `llm`.
    pub fn for_session(
        &self,
        providers: &ProviderStore,
        llm: Option<&LlmConfig>,
    ) -> Result<TurnModel, Status> {
        let provider = llm.and_then(|l| non_empty(&l.provider));
        let model = llm.and_then(|l| non_empty(&l.model));
        let base_url = llm.and_then(|l| non_empty(&l.base_url));
        let api_key = llm.and_then(|l| non_empty(&l.api_key)).map(str::to_string);
        let (provider, model, base_url, api_key) = match (provider, base_url) {
            // An endpoint given in full needs no configured provider.
            (None, Some(url)) => {
                let model = model.ok_or_else(|| {
                    Status::invalid_argument(
                        "config.llm.model: required when config.llm.base_url is set",
                    )
                })?;
                (
                    "custom".to_string(),
                    model.to_string(),
                    url.to_string(),
                    api_key,
                )
            }
            _ => {
                let resolved = providers.resolve(provider, model).map_err(Status::from)?;
                (
                    resolved.provider,
                    resolved.model,
                    base_url.map(str::to_string).unwrap_or(resolved.base_url),
                    api_key.or(resolved.api_key),
                )
            }
        };
        Ok(TurnModel {
            client: self.client(speaks_anthropic(&provider), &base_url, api_key)?,
            provider,
            model,
            temperature: llm.map(|l| l.temperature).filter(|t| *t > 0.0),
            max_tokens: llm.map(|l| l.max_tokens).filter(|m| *m > 0),
        })
    }
}

/// A piece of streamed output.
#[derive(Debug, Clone)]
pub enum Delta {
    Content(String),
    Reasoning(String),
}

/// One finished model call.
#[derive(Debug, Clone)]
pub struct Completion {
    pub message: ChatMessage,
    pub finish_reason: String,
    pub usage: Option<Usage>,
}

/// Runs one call to its end, passing deltas to `on_delta` as they come.
pub async fn complete<F, Fut>(
    model: &TurnModel,
    request: ChatRequest,
    cancel: &CancellationToken,
    mut on_delta: F,
) -> Result<Completion, LlmError>
where
    F: FnMut(Delta) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut stream = model.client.stream(request, cancel.child_token()).await?;
    while let Some(event) = stream.next().await {
        match event? {
            StreamEvent::ContentDelta(text) => on_delta(Delta::Content(text)).await,
            StreamEvent::ReasoningDelta(text) => on_delta(Delta::Reasoning(text)).await,
            StreamEvent::ToolCallStarted { .. } => {}
            StreamEvent::Finished {
                message,
                finish_reason,
                usage,
            } => {
                return Ok(Completion {
                    message,
                    finish_reason,
                    usage,
                });
            }
        }
        if cancel.is_cancelled() {
            return Err(LlmError::Cancelled);
        }
    }
    if cancel.is_cancelled() {
        return Err(LlmError::Cancelled);
    }
    Err(LlmError::Protocol(
        "the completion stream ended without finishing".into(),
    ))
}
