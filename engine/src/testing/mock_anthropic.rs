//! [`MockAnthropic`]: an Anthropic Messages API server on loopback (hyper 1,
//! HTTP/1.1) answering `POST /v1/messages` with scripted replies as real
//! SSE (`event: message_start` … `event: message_stop`), recording each
//! request, and checking `anthropic-version` and, when told one, the
//! `x-api-key`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Usage every scripted stream reports: 20 fresh input tokens, 100 read
/// from the cache, 10 written to it, 7 output tokens.
pub const MOCK_ANTHROPIC_USAGE: (u32, u32, u32, u32) = (20, 100, 10, 7);

/// One scripted answer to a `POST /v1/messages`.
#[derive(Clone, Debug, PartialEq)]
pub enum AnthropicReply {
    /// `200 text/event-stream`: these `(event, data)` pairs.
    Events(Vec<(String, Value)>),
    /// An error status with an Anthropic error body and, when set,
    /// `retry-after: <secs>`.
    Error {
        /// The HTTP status.
        status: u16,
        /// The `error.type`.
        kind: String,
        /// The `error.message`.
        message: String,
        /// A `retry-after` header in seconds, if set.
        retry_after: Option<u64>,
    },
}

/// Content blocks of a scripted message.
enum Block {
    Thinking(String),
    Text(String),
    ToolUse(String, String, Value),
}

fn events(blocks: Vec<Block>, stop_reason: &str) -> AnthropicReply {
    let (input, cache_read, cache_write, output) = MOCK_ANTHROPIC_USAGE;
    let mut out = vec![(
        "message_start".to_string(),
        json!({"type": "message_start", "message": {
            "id": "msg_mock", "type": "message", "role": "assistant", "model": "mock",
            "content": [], "stop_reason": null,
            "usage": {"input_tokens": input, "cache_read_input_tokens": cache_read,
                      "cache_creation_input_tokens": cache_write, "output_tokens": 1}}}),
    )];
    out.push(("ping".to_string(), json!({"type": "ping"})));
    for (index, block) in blocks.into_iter().enumerate() {
        let (start, deltas) = match block {
            Block::Thinking(text) => (
                json!({"type": "thinking", "thinking": ""}),
                vec![
                    json!({"type": "thinking_delta", "thinking": text}),
                    json!({"type": "signature_delta", "signature": "mock-signature"}),
                ],
            ),
            Block::Text(text) => {
                let mid = text
                    .char_indices()
                    .nth(text.chars().count() / 2)
                    .map_or(0, |(i, _)| i);
                (
                    json!({"type": "text", "text": ""}),
                    vec![
                        json!({"type": "text_delta", "text": &text[..mid]}),
                        json!({"type": "text_delta", "text": &text[mid..]}),
                    ],
                )
            }
            Block::ToolUse(id, name, input) => {
                let json_text = input.to_string();
                let mid = json_text.len() / 2;
                let mid = (0..=mid)
                    .rev()
                    .find(|i| json_text.is_char_boundary(*i))
                    .unwrap_or(0);
                (
                    json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                    vec![
                        json!({"type": "input_json_delta", "partial_json": &json_text[..mid]}),
                        json!({"type": "input_json_delta", "partial_json": &json_text[mid..]}),
                    ],
                )
            }
        };
        out.push((
            "content_block_start".into(),
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        for delta in deltas {
            out.push((
                "content_block_delta".into(),
                json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
        out.push((
            "content_block_stop".into(),
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    out.push((
        "message_delta".into(),
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
               "usage": {"output_tokens": output}}),
    ));
    out.push(("message_stop".into(), json!({"type": "message_stop"})));
    AnthropicReply::Events(out)
}

impl AnthropicReply {
    /// A text answer (`end_turn`).
    pub fn text(text: &str) -> Self {
        events(vec![Block::Text(text.into())], "end_turn")
    }

    /// A thinking block, then a text answer.
    pub fn thinking_then_text(thinking: &str, text: &str) -> Self {
        events(
            vec![Block::Thinking(thinking.into()), Block::Text(text.into())],
            "end_turn",
        )
    }

    /// A short text, then one `tool_use` block (`stop_reason: tool_use`).
    pub fn tool_use(id: &str, name: &str, input: Value) -> Self {
        events(
            vec![
                Block::Text("Let me do that.".into()),
                Block::ToolUse(id.into(), name.into(), input),
            ],
            "tool_use",
        )
    }

    /// An error response.
    pub fn error(status: u16, kind: &str, message: &str, retry_after: Option<u64>) -> Self {
        AnthropicReply::Error {
            status,
            kind: kind.into(),
            message: message.into(),
            retry_after,
        }
    }

    /// `429 rate_limit_error` with `retry-after: <secs>`.
    pub fn rate_limited(secs: u64) -> Self {
        Self::error(429, "rate_limit_error", "mock: rate limited", Some(secs))
    }

    /// `529 overloaded_error`.
    pub fn overloaded() -> Self {
        Self::error(529, "overloaded_error", "Overloaded", None)
    }
}

#[derive(Default)]
struct Shared {
    replies: Mutex<VecDeque<AnthropicReply>>,
    requests: Mutex<Vec<Value>>,
    expected_key: Mutex<Option<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A mock Anthropic Messages API on `127.0.0.1:<random port>`. With no
/// scripted reply left it answers `500 api_error`; a request without
/// `anthropic-version` gets `400`; with an expected key, a request without
/// that `x-api-key` gets `401` (no reply consumed). Dropping it stops the
/// server.
pub struct MockAnthropic {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for MockAnthropic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockAnthropic")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Drop for MockAnthropic {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl MockAnthropic {
    /// Starts the server with these replies queued, requiring `api_key` as
    /// `x-api-key` when given.
    ///
    /// # Panics
    /// When no loopback port can be bound (test setup failure).
    pub async fn start(replies: Vec<AnthropicReply>, api_key: Option<&str>) -> MockAnthropic {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("mock Anthropic: binding 127.0.0.1:0 failed: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("mock Anthropic: local_addr failed: {e}"));
        let shared = Arc::new(Shared::default());
        lock(&shared.replies).extend(replies);
        *lock(&shared.expected_key) = api_key.map(str::to_owned);
        let shutdown = CancellationToken::new();
        tokio::spawn(accept_loop(listener, shared.clone(), shutdown.clone()));
        MockAnthropic {
            addr,
            shared,
            shutdown,
        }
    }

    /// The base URL (`http://127.0.0.1:PORT`; messages go to `/v1/messages`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The request bodies received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.shared.requests).clone()
    }

    /// How many scripted replies are still queued.
    pub fn remaining(&self) -> usize {
        lock(&self.shared.replies).len()
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, shutdown: CancellationToken) {
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
        };
        let shared = shared.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(req, shared.clone()));
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                () = shutdown.cancelled() => {}
                _ = conn => {}
            }
        });
    }
}

fn error_body(kind: &str, message: &str) -> String {
    json!({"type": "error", "error": {"type": kind, "message": message}}).to_string()
}

fn respond(status: u16, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

async fn handle(
    req: Request<Incoming>,
    shared: Arc<Shared>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() != Method::POST || req.uri().path() != "/v1/messages" {
        return Ok(respond(
            404,
            "application/json",
            error_body("not_found_error", "mock: no such route"),
        ));
    }
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (version, key) = (header("anthropic-version"), header("x-api-key"));
    let body = match req.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => {
            return Ok(respond(
                400,
                "application/json",
                error_body("invalid_request_error", &e.to_string()),
            ));
        }
    };
    let parsed = serde_json::from_slice::<Value>(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    lock(&shared.requests).push(parsed);
    if version.is_none() {
        return Ok(respond(
            400,
            "application/json",
            error_body(
                "invalid_request_error",
                "anthropic-version: header is required",
            ),
        ));
    }
    let expected = lock(&shared.expected_key).clone();
    if let Some(expected) = expected
        && key.as_deref() != Some(expected.as_str())
    {
        return Ok(respond(
            401,
            "application/json",
            error_body("authentication_error", "invalid x-api-key"),
        ));
    }
    let reply = lock(&shared.replies).pop_front();
    Ok(match reply {
        None => respond(
            500,
            "application/json",
            error_body("api_error", "mock: no scripted reply"),
        ),
        Some(AnthropicReply::Error {
            status,
            kind,
            message,
            retry_after,
        }) => {
            let mut response = respond(status, "application/json", error_body(&kind, &message));
            if let Some(secs) = retry_after {
                response
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(secs));
            }
            response
        }
        Some(AnthropicReply::Events(events)) => {
            let mut text = String::new();
            for (event, data) in events {
                text.push_str(&format!("event: {event}\ndata: {data}\n\n"));
            }
            respond(200, "text/event-stream", text)
        }
    })
}
