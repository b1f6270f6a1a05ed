//! Test support shared by this crate's real-codex test and the runner's
//! end-to-end test: installing a pinned `@openai/codex` with npm, and a mock
//! OpenAI Responses API on loopback that codex can be pointed at. Not part
//! of the adapter; hidden from the docs.
//!
//! The mock serves `POST …/responses` as SSE. When the request's last input
//! item is not a `function_call_output`, it answers with a `function_call` to
//! the shell tool it finds in the request's `tools` (0.169.0: `exec_command`
//! with a `cmd` argument) running [`PROOF_COMMAND`]; otherwise with an
//! assistant `message` "All done.". Every response completes with usage 100
//! in (10 cached) + 20 out (5 reasoning) = 120. Everything else is a 404.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use sdk_adapter::testing::cached_install;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The `@openai/codex` version the tests pin.
pub const VERSION: &str = "0.169.0";
/// What the mock asks codex to run (in the thread's workspace).
pub const PROOF_COMMAND: &str = "echo hello-from-codex >> proof.txt; echo done";

/// The installed `codex` launcher, installing the pinned package with npm
/// into `<target>/codex-npm/<version>` first if needed
/// ([`cached_install`]). `Err` says why it cannot be had (no npm, install
/// failed).
pub fn install_codex() -> Result<PathBuf, String> {
    let launcher = |dir: &Path| dir.join("node_modules/.bin/codex");
    let cache = cached_install::npm_install_once("codex-npm", "@openai/codex", VERSION, |dir| {
        launcher(dir).exists()
    })?;
    Ok(launcher(&cache))
}

/// Write `config.toml` into `home` (a `CODEX_HOME`): model `mock-model` from
/// a provider at `http://127.0.0.1:{port}/v1` with the Responses wire API and
/// no retries; approval policy `never`, sandbox `danger-full-access`.
pub fn write_config(home: &Path, port: u16) -> std::io::Result<()> {
    let config = format!(
        r#"model = "mock-model"
model_provider = "mock"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.mock]
name = "mock"
base_url = "http://127.0.0.1:{port}/v1"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"#
    );
    std::fs::write(home.join("config.toml"), config)
}

/// A running mock Responses API.
#[derive(Clone)]
pub struct MockResponses {
    pub port: u16,
    requests: Arc<Mutex<Vec<Value>>>,
    /// The shell command the model asks for ([`PROOF_COMMAND`] unless set).
    command: Arc<Mutex<String>>,
}

impl MockResponses {
    /// Listen on a free loopback port (inside a tokio runtime).
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let mock = Self {
            port,
            requests: Arc::default(),
            command: Arc::new(Mutex::new(PROOF_COMMAND.to_owned())),
        };
        let (requests, command) = (mock.requests.clone(), mock.command.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (requests, command) = (requests.clone(), command.clone());
                tokio::spawn(async move {
                    let _ = handle(stream, requests, command).await;
                });
            }
        });
        Ok(mock)
    }

    /// The shell command the model asks for from now on.
    pub fn set_command(&self, command: &str) {
        *lock(&self.command) = command.to_owned();
    }

    /// Every `/responses` request body so far.
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.requests).clone()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn handle(
    mut stream: TcpStream,
    requests: Arc<Mutex<Vec<Value>>>,
    command: Arc<Mutex<String>>,
) -> std::io::Result<()> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
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
    let request_line = head.lines().next().unwrap_or("").to_owned();
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
    if !(request_line.starts_with("POST") && request_line.contains("/responses")) {
        let reply = "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
        stream.write_all(reply.as_bytes()).await?;
        return Ok(());
    }
    let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let command = lock(&command).clone();
    let sse = respond(&request, lock(&requests).len(), &command);
    lock(&requests).push(request);
    let reply = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{sse}",
        sse.len()
    );
    stream.write_all(reply.as_bytes()).await?;
    stream.shutdown().await
}

/// The call to make: the shell tool of the request's `tools`, with the
/// argument shape its schema declares.
fn shell_call(request: &Value, command: &str) -> Option<(String, Value)> {
    let tools = request["tools"].as_array()?;
    tools.iter().find_map(|tool| {
        let properties = &tool["parameters"]["properties"];
        let name = tool["name"].as_str()?.to_owned();
        if properties.get("cmd").is_some() {
            Some((name, json!({ "cmd": command })))
        } else if properties["command"]["type"] == "array" {
            Some((name, json!({ "command": ["bash", "-lc", command] })))
        } else {
            None
        }
    })
}

fn event(data: Value) -> String {
    format!(
        "event: {}\ndata: {data}\n\n",
        data["type"].as_str().unwrap_or("")
    )
}

fn respond(request: &Value, index: usize, command: &str) -> String {
    let last_is_output = request["input"]
        .as_array()
        .and_then(|items| items.last())
        .is_some_and(|item| item["type"] == "function_call_output");
    let id = format!("resp_{index}");
    let mut out = event(json!({"type": "response.created", "response": {"id": id}}));
    let call = if last_is_output {
        None
    } else {
        shell_call(request, command)
    };
    match call {
        Some((name, arguments)) => {
            out += &event(json!({"type": "response.output_item.done", "item": {
                "type": "function_call", "call_id": format!("call_{index}"), "name": name,
                "arguments": arguments.to_string(),
            }}));
        }
        None => {
            out += &event(json!({"type": "response.output_item.done", "item": {
                "type": "message", "role": "assistant", "id": format!("msg_{index}"),
                "content": [{"type": "output_text", "text": "All done."}],
            }}));
        }
    }
    out += &event(
        json!({"type": "response.completed", "response": {"id": id, "usage": {
            "input_tokens": 100, "input_tokens_details": {"cached_tokens": 10},
            "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 5},
            "total_tokens": 120,
        }}}),
    );
    out
}
