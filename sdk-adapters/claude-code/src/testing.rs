//! Test support shared by this crate's real-Claude-Code test and the
//! runner's end-to-end test: installing a pinned `@anthropic-ai/claude-code`
//! with npm, the environment that keeps it offline, and a scripted mock of
//! the Anthropic Messages API on loopback that it is pointed at. Not part of
//! the adapter; hidden from the docs.
//!
//! The package is a thin wrapper whose postinstall hard-links the native
//! binary of the platform package (`@anthropic-ai/claude-code-linux-x64`,
//! an npm optional dependency) over its `bin/claude.exe` placeholder; no
//! download happens outside npm, at install or at run time.
//!
//! What the pinned CLI calls, in print mode with [`offline_env`] (logged from
//! it): `POST /v1/messages?beta=true` with `stream: true`, once per model
//! call, and nothing else — no `count_tokens`, no small-model title call, no
//! telemetry, update or feature-flag traffic (that goes to hosts outside the
//! base URL, and `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC` stops it).
//! The mock still answers `count_tokens` and non-streaming calls, so a
//! version that makes them does not hang.
//!
//! The mock answers each model call — a streaming request with tools — with
//! the next [`Reply`] of its script as real SSE (`message_start`,
//! `content_block_start`/`delta`/`stop`, `message_delta` with usage,
//! `message_stop`); an empty script answers [`DONE`]. Every call's usage is
//! [`USAGE_INPUT`] in (plus [`USAGE_CACHE_READ`] read from and
//! [`USAGE_CACHE_WRITE`] written to the cache) and [`USAGE_OUTPUT`] out.
//! Every request is recorded.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use sdk_adapter::testing::cached_install;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The `@anthropic-ai/claude-code` version the tests pin.
pub const VERSION: &str = "2.1.197";

/// What the mock says when its script is empty.
pub const DONE: &str = "Done.";
/// Input tokens of every model call.
pub const USAGE_INPUT: i64 = 100;
/// Input tokens read from the cache, every model call.
pub const USAGE_CACHE_READ: i64 = 10;
/// Input tokens written to the cache, every model call.
pub const USAGE_CACHE_WRITE: i64 = 5;
/// Output tokens of every model call.
pub const USAGE_OUTPUT: i64 = 20;

/// The installed `claude`, installing the pinned package with npm into
/// `<target>/claude-npm/<version>` first if needed ([`cached_install`]):
/// the platform package's native binary (what the wrapper's postinstall
/// links into place, so an npm that skips install scripts works too).
/// `Err` says why it cannot be had (no npm, install failed, no binary for
/// this platform).
pub fn install_claude() -> Result<PathBuf, String> {
    let cache = cached_install::npm_install_once(
        "claude-npm",
        "@anthropic-ai/claude-code",
        VERSION,
        |dir| native_binary(dir).is_some(),
    )?;
    native_binary(&cache).ok_or_else(|| {
        format!(
            "no Claude Code binary for this platform under {}",
            cache.display()
        )
    })
}

/// The platform package's binary in the install `dir`, if there is one.
fn native_binary(dir: &Path) -> Option<PathBuf> {
    let scope = dir.join("node_modules/@anthropic-ai");
    std::fs::read_dir(&scope)
        .ok()?
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("claude-code-"))
        })
        .map(|e| e.path().join("claude"))
        .find(|p| p.is_file())
}

/// The environment that points claude at the mock on `port` with a fake
/// API key and turns off everything that would leave the machine
/// (telemetry, error reports, auto-update, feature flags) and retries.
pub fn offline_env(port: u16) -> Vec<(String, String)> {
    [
        ("ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{port}")),
        ("ANTHROPIC_API_KEY", "sk-ant-mock-key".to_owned()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
        ("CLAUDE_CODE_MAX_RETRIES", "0".to_owned()),
        ("DISABLE_AUTOUPDATER", "1".to_owned()),
        ("DISABLE_TELEMETRY", "1".to_owned()),
        ("DISABLE_ERROR_REPORTING", "1".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// One scripted answer to a model call.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A text block, `end_turn`.
    Text(String),
    /// A `tool_use` block calling `name` with `input` (streamed as
    /// `input_json_delta` chunks), `tool_use`.
    Tool { name: String, input: Value },
}

impl Reply {
    /// A text answer.
    pub fn text(text: &str) -> Self {
        Self::Text(text.to_owned())
    }

    /// A call of the `Bash` tool running `command`.
    pub fn bash(command: &str) -> Self {
        Self::Tool {
            name: "Bash".into(),
            input: json!({"command": command, "description": "run the command"}),
        }
    }

    /// A call of tool `name` with `input`.
    pub fn tool(name: &str, input: Value) -> Self {
        Self::Tool {
            name: name.to_owned(),
            input,
        }
    }
}

/// A request the mock received.
#[derive(Debug, Clone)]
pub struct Received {
    /// The request line's target (`/v1/messages?beta=true`).
    pub path: String,
    /// The JSON body (`Null` when it was none).
    pub body: Value,
}

impl Received {
    /// Whether it is a model call the script answers.
    pub fn is_model_call(&self) -> bool {
        is_model_call(&self.path, &self.body)
    }
}

#[derive(Default)]
struct State {
    script: VecDeque<Reply>,
    received: Vec<Received>,
}

/// A running mock Messages API.
#[derive(Clone)]
pub struct MockMessages {
    pub port: u16,
    state: Arc<Mutex<State>>,
}

impl MockMessages {
    /// Listen on a free loopback port (inside a tokio runtime).
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let mock = Self {
            port,
            state: Arc::default(),
        };
        let state = mock.state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = state.clone();
                tokio::spawn(async move {
                    let _ = handle(stream, state).await;
                });
            }
        });
        Ok(mock)
    }

    /// Appends `reply` to the script.
    pub fn push(&self, reply: Reply) {
        lock(&self.state).script.push_back(reply);
    }

    /// Every request so far.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.state).received.clone()
    }

    /// The bodies of the model calls so far.
    pub fn model_calls(&self) -> Vec<Value> {
        self.received()
            .into_iter()
            .filter(Received::is_model_call)
            .map(|r| r.body)
            .collect()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn is_model_call(path: &str, body: &Value) -> bool {
    let route = path.split('?').next().unwrap_or("");
    route == "/v1/messages"
        && body["stream"] == true
        && body["tools"].as_array().is_some_and(|t| !t.is_empty())
}

/// The text of a request's system prompt (its text blocks, joined).
pub fn system_text(body: &Value) -> String {
    match &body["system"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The names of a request's tools.
pub fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// Every block of type `kind` in the request's `user` messages, in order.
fn user_blocks<'a>(body: &'a Value, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(move |b| b["type"] == kind)
}

/// The texts of the request's user messages' text blocks, in order.
pub fn user_texts(body: &Value) -> Vec<String> {
    let mut texts: Vec<String> = user_blocks(body, "text")
        .filter_map(|b| b["text"].as_str().map(str::to_owned))
        .collect();
    texts.extend(
        body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["role"] == "user")
            .filter_map(|m| m["content"].as_str().map(str::to_owned)),
    );
    texts
}

/// Every message of the request with its text (a string content, or its
/// text blocks joined), in order: `(role, text)`. Claude Code hands the
/// model a message the user sent while it worked (steering) as a
/// mid-conversation `system` message quoting it.
pub fn message_texts(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let text = match &m["content"] {
                Value::String(text) => text.clone(),
                Value::Array(blocks) => blocks
                    .iter()
                    .filter_map(|b| b["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => String::new(),
            };
            (m["role"].as_str().unwrap_or("").to_owned(), text)
        })
        .collect()
}

/// The contents of the request's `tool_result` blocks (text), in order.
pub fn tool_results(body: &Value) -> Vec<String> {
    user_blocks(body, "tool_result")
        .map(|b| match &b["content"] {
            Value::String(text) => text.clone(),
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|c| c["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        })
        .collect()
}

async fn handle(mut stream: TcpStream, state: Arc<Mutex<State>>) -> std::io::Result<()> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 16384];
    let head_end = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_string();
    let mut request_line = head.lines().next().unwrap_or("").split_whitespace();
    let method = request_line.next().unwrap_or("").to_owned();
    let path = request_line.next().unwrap_or("").to_owned();
    let length: usize = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let body = &buffer[head_end..(head_end + length).min(buffer.len())];
    let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let route = path.split('?').next().unwrap_or("").to_owned();
    let (content_type, reply) = if method != "POST" {
        ("", None)
    } else if route == "/v1/messages/count_tokens" {
        let tokens = body.to_string().len() / 4;
        (
            "application/json",
            Some(json!({"input_tokens": tokens}).to_string()),
        )
    } else if route == "/v1/messages" {
        let model = body["model"].as_str().unwrap_or("mock").to_owned();
        let mut state = lock(&state);
        let index = state.received.len();
        let answer = if is_model_call(&path, &body) {
            state.script.pop_front()
        } else {
            None
        }
        .unwrap_or_else(|| Reply::text(DONE));
        let streamed = body["stream"] == true;
        state.received.push(Received {
            path: path.clone(),
            body,
        });
        if streamed {
            ("text/event-stream", Some(sse(&answer, &model, index)))
        } else {
            (
                "application/json",
                Some(whole(&answer, &model, index).to_string()),
            )
        }
    } else {
        ("", None)
    };
    let reply = match reply {
        Some(body) => format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncache-control: no-cache\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
        None => "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".into(),
    };
    stream.write_all(reply.as_bytes()).await?;
    stream.shutdown().await
}

fn usage(output: i64) -> Value {
    json!({
        "input_tokens": USAGE_INPUT,
        "cache_read_input_tokens": USAGE_CACHE_READ,
        "cache_creation_input_tokens": USAGE_CACHE_WRITE,
        "output_tokens": output,
    })
}

fn block(answer: &Reply, index: usize) -> (Value, &'static str) {
    match answer {
        Reply::Text(text) => (json!({"type": "text", "text": text}), "end_turn"),
        Reply::Tool { name, input } => (
            json!({"type": "tool_use", "id": format!("toolu_mock_{index}"), "name": name, "input": input}),
            "tool_use",
        ),
    }
}

/// A non-streaming answer.
fn whole(answer: &Reply, model: &str, index: usize) -> Value {
    let (content, stop) = block(answer, index);
    json!({
        "id": format!("msg_mock_{index}"), "type": "message", "role": "assistant",
        "model": model, "content": [content], "stop_reason": stop,
        "stop_sequence": null, "usage": usage(USAGE_OUTPUT),
    })
}

fn event(data: Value) -> String {
    format!(
        "event: {}\ndata: {data}\n\n",
        data["type"].as_str().unwrap_or("")
    )
}

/// The SSE stream of a streaming answer.
fn sse(answer: &Reply, model: &str, index: usize) -> String {
    let mut out = event(json!({"type": "message_start", "message": {
        "id": format!("msg_mock_{index}"), "type": "message", "role": "assistant",
        "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": usage(1),
    }}));
    let (content, stop) = block(answer, index);
    match answer {
        Reply::Text(text) => {
            out += &event(json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}));
            // Two deltas, as a model streams.
            let cut = text
                .char_indices()
                .nth(text.chars().count() / 2)
                .map_or(0, |(i, _)| i);
            for part in [&text[..cut], &text[cut..]] {
                out += &event(json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": part}}));
            }
        }
        Reply::Tool { input, .. } => {
            let mut start = content.clone();
            start["input"] = json!({});
            out +=
                &event(json!({"type": "content_block_start", "index": 0, "content_block": start}));
            let json = input.to_string();
            let cut = json
                .char_indices()
                .nth(json.chars().count() / 2)
                .map_or(0, |(i, _)| i);
            for part in [&json[..cut], &json[cut..]] {
                out += &event(json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": part}}));
            }
        }
    }
    out += &event(json!({"type": "content_block_stop", "index": 0}));
    out += &event(json!({"type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": null},
        "usage": {"output_tokens": USAGE_OUTPUT}}));
    out += &event(json!({"type": "message_stop"}));
    out
}
