//! The HTTP plumbing both model clients share ([`super::OpenAiClient`] and
//! [`super::AnthropicClient`]): the one `reqwest` client builder (rustls
//! with the `ring` provider and the platform's trust store, the connect
//! timeout, the explicit proxy), the endpoint check, the API key as a
//! sensitive header, one POST with the request timeout, retries and
//! cancellation, and reading a body up to a cap. Only what differs between
//! providers (the URL, the key's header, extra headers, the body and the
//! stream's events) stays in their clients.

use std::time::SystemTime;

use futures::StreamExt;
use reqwest::header::{self, HeaderName, HeaderValue};
use tokio_util::sync::CancellationToken;

use super::error::{LlmError, error_chain, parse_retry_after};
use super::options::ClientOptions;
use super::retry::with_retries;

/// Largest error body read (the rest is not needed for the message).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// One model endpoint: where requests go, with which headers and options.
#[derive(Clone)]
pub(super) struct Endpoint {
    http: reqwest::Client,
    pub(super) url: reqwest::Url,
    /// The key's header and value (marked sensitive), if there is a key.
    key: Option<(HeaderName, HeaderValue)>,
    /// Further headers every request carries (e.g. `anthropic-version`).
    extra: &'static [(&'static str, &'static str)],
    pub(super) options: ClientOptions,
}

/// The key is left out.
impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url.as_str())
            .field("api_key", &self.key.as_ref().map(|_| "<redacted>"))
            .field("options", &self.options)
            .finish()
    }
}

impl Endpoint {
    /// An endpoint at `url` (`joined`: the base URL with the provider's path,
    /// checked to be http(s) without credentials), its key (empty: none)
    /// sent as `key_header: {key_prefix}{key}`, and `extra` headers.
    pub(super) fn new(
        joined: &str,
        api_key: Option<String>,
        key_header: HeaderName,
        key_prefix: &str,
        extra: &'static [(&'static str, &'static str)],
        options: ClientOptions,
    ) -> Result<Self, LlmError> {
        let url = checked_url(joined)?;
        let key = match api_key.filter(|k| !k.trim().is_empty()) {
            None => None,
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("{key_prefix}{}", key.trim()))
                    .map_err(|_| {
                        LlmError::Config(
                            "api_key contains characters an HTTP header cannot carry".into(),
                        )
                    })?;
                value.set_sensitive(true);
                Some((key_header, value))
            }
        };
        Ok(Self {
            http: http_client(&options)?,
            url,
            key,
            extra,
            options,
        })
    }

    /// POSTs `body`, retrying per the options, until a response whose
    /// headers say success, a final error, or `cancel` (which drops the
    /// in-flight request).
    pub(super) async fn post(
        &self,
        body: Vec<u8>,
        cancel: &CancellationToken,
    ) -> Result<reqwest::Response, LlmError> {
        let attempts = with_retries(self.options.retry_policy(), || self.send_once(body.clone()));
        tokio::select! {
            biased;
            () = cancel.cancelled() => Err(LlmError::Cancelled),
            response = attempts => response,
        }
    }

    /// One attempt: the response once its headers say success, else the error.
    async fn send_once(&self, body: Vec<u8>) -> Result<reqwest::Response, LlmError> {
        let mut request = self
            .http
            .post(self.url.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "text/event-stream")
            .body(body);
        for (name, value) in self.extra {
            request = request.header(*name, *value);
        }
        if let Some((name, value)) = &self.key {
            request = request.header(name.clone(), value.clone());
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
        // An Anthropic `{"type":"error","error":{…}}` body is unwrapped by
        // from_status too; its 529 (overloaded) is a 5xx and so retried.
        Err(LlmError::from_status(
            status.as_u16(),
            retry_after,
            &String::from_utf8_lossy(&body),
        ))
    }
}

/// `joined` parsed and checked to be an http(s) URL without credentials.
fn checked_url(joined: &str) -> Result<reqwest::Url, LlmError> {
    // The value is not echoed: it may carry credentials.
    let invalid = |why: String| LlmError::Config(format!("base_url {why}"));
    let url =
        reqwest::Url::parse(joined).map_err(|e| invalid(format!("is not a valid URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("must be http:// or https://".into()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("must not carry credentials; use api_key".into()));
    }
    Ok(url)
}

/// The HTTP client every model client uses: rustls (ring, platform trust
/// store), the connect timeout and the explicit proxy, if any (else the
/// environment's `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY`, as reqwest reads
/// them by default).
pub(crate) fn http_client(options: &ClientOptions) -> Result<reqwest::Client, LlmError> {
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

/// Reads a response body, failing once it grows past `max_bytes`.
pub(super) async fn read_capped(
    response: reqwest::Response,
    max_bytes: usize,
) -> Result<Vec<u8>, LlmError> {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| {
            LlmError::Transport(format!("reading the response failed: {}", error_chain(&e)))
        })?;
        if body.len() + chunk.len() > max_bytes {
            return Err(LlmError::Protocol(format!(
                "the response body is larger than {max_bytes} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// rustls with the `ring` provider and the platform verifier (system trust
/// store), built once per process: the same configuration as the MCP
/// clients', shared with them.
fn tls_config() -> Result<rustls::ClientConfig, LlmError> {
    mcp_client::tls::config().map_err(LlmError::Config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ModelProxy;

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
    fn urls_are_checked() {
        assert!(checked_url("https://api.openai.com/v1/chat/completions").is_ok());
        assert!(checked_url("ftp://x/v1").is_err());
        assert!(checked_url("not a url").is_err());
        assert!(checked_url("https://user:pw@host/v1").is_err());
    }
}
