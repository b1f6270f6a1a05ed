//! One MCP client for the runner and the engine, on the official Rust SDK
//! (`rmcp`): connect to a thread's [`McpServer`], list its tools, call one
//! with a per-call timeout, close.
//!
//! Stdio servers are started through the thread's sandbox
//! ([`sdk_adapter::launcher::ThreadSandbox`]) like every agent process, and
//! rmcp talks over the child's stdin/stdout; the child dies with the
//! client (and with the thread's sandbox). Streamable HTTP servers get the
//! bearer token and headers as sensitive header values; nothing here logs
//! them. Every failure is a value ([`McpError`]) whose text names the
//! server and never carries a secret.

mod connect;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing;
pub mod tls;

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ContentBlock};
use rmcp::service::{RoleClient, RunningService};
use sdk_adapter::McpServer;
use serde_json::Value;

pub use connect::connect;

/// How long connecting (spawn or HTTP, plus the MCP handshake) may take
/// unless the caller says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one tool call may take unless the caller says otherwise.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// Why an MCP operation failed; the text names the server.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The server could not be started or reached, or the handshake failed.
    #[error("MCP server {server}: cannot connect: {reason}")]
    Connect {
        /// The server's name.
        server: String,
        /// Why.
        reason: String,
    },
    /// A request failed (transport closed, protocol error, server error).
    #[error("MCP server {server}: {operation} failed: {reason}")]
    Request {
        /// The server's name.
        server: String,
        /// `tools/list` or `tools/call NAME`.
        operation: String,
        /// Why.
        reason: String,
    },
    /// A request took longer than its timeout.
    #[error("MCP server {server}: {operation} timed out after {after:?}")]
    Timeout {
        /// The server's name.
        server: String,
        /// `tools/list` or `tools/call NAME`.
        operation: String,
        /// The timeout.
        after: Duration,
    },
    /// The caller's arguments are not a JSON object.
    #[error("MCP tool arguments must be a JSON object, not {0}")]
    Arguments(String),
}

/// One tool a server offers.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInfo {
    /// The tool's name on its server.
    pub name: String,
    /// What it does, as the server says.
    pub description: Option<String>,
    /// Its input's JSON schema (an object schema).
    pub input_schema: Value,
}

/// What a tool call returned.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The text blocks joined by newlines; other blocks appear as
    /// `[image]`, `[audio]`, `[resource URI]`.
    pub text: String,
    /// The structured result, when the tool gave one.
    pub structured: Option<Value>,
    /// The tool reported an error (its text says which).
    pub is_error: bool,
}

/// A connected MCP server.
pub struct McpClient {
    name: String,
    service: RunningService<RoleClient, ()>,
    /// The stdio server's process (killed on drop); `None` for HTTP.
    child: std::sync::Mutex<Option<tokio::process::Child>>,
    /// A request failed because the transport closed.
    transport_closed: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for McpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpClient")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl McpClient {
    /// The server's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the connection is gone: the transport closed, or the stdio
    /// server's process exited (known at once, before rmcp notices EOF).
    pub fn is_closed(&self) -> bool {
        if self.service.is_closed()
            || self
                .transport_closed
                .load(std::sync::atomic::Ordering::SeqCst)
        {
            return true;
        }
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        child
            .as_mut()
            .is_some_and(|c| !matches!(c.try_wait(), Ok(None)))
    }

    /// Every tool the server offers (all pages), within `timeout`.
    pub async fn list_tools(&self, timeout: Duration) -> Result<Vec<ToolInfo>, McpError> {
        let operation = "tools/list".to_owned();
        let tools = self
            .timed(&operation, timeout, self.service.list_all_tools())
            .await?;
        Ok(tools
            .into_iter()
            .map(|t| ToolInfo {
                name: t.name.into_owned(),
                description: t.description.map(|d| d.into_owned()),
                input_schema: Value::Object((*t.input_schema).clone()),
            })
            .collect())
    }

    /// Calls `tool` with `arguments` (a JSON object, or null for none),
    /// within `timeout`. A tool that reports an error is `Ok` with
    /// [`ToolResult::is_error`]; a failed request is `Err`.
    pub async fn call_tool(
        &self,
        tool: &str,
        arguments: Value,
        timeout: Duration,
    ) -> Result<ToolResult, McpError> {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        match arguments {
            Value::Object(map) => params = params.with_arguments(map),
            Value::Null => {}
            other => return Err(McpError::Arguments(json_kind(&other).to_owned())),
        }
        let operation = format!("tools/call {tool}");
        let result = self
            .timed(&operation, timeout, self.service.call_tool(params))
            .await?;
        let text = result
            .content
            .iter()
            .map(block_text)
            .collect::<Vec<_>>()
            .join("\n");
        Ok(ToolResult {
            text,
            structured: result.structured_content,
            is_error: result.is_error.unwrap_or(false),
        })
    }

    /// Ends the session and the stdio server's process.
    pub async fn close(mut self) {
        let _ = self
            .service
            .close_with_timeout(Duration::from_secs(5))
            .await;
        let child = self
            .child
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(mut child) = child {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    async fn timed<T>(
        &self,
        operation: &str,
        timeout: Duration,
        request: impl Future<Output = Result<T, rmcp::ServiceError>>,
    ) -> Result<T, McpError> {
        match tokio::time::timeout(timeout, request).await {
            Err(_) => Err(McpError::Timeout {
                server: self.name.clone(),
                operation: operation.to_owned(),
                after: timeout,
            }),
            Ok(Err(e)) => {
                if matches!(e, rmcp::ServiceError::TransportClosed) {
                    self.transport_closed
                        .store(true, std::sync::atomic::Ordering::SeqCst);
                }
                Err(McpError::Request {
                    server: self.name.clone(),
                    operation: operation.to_owned(),
                    reason: e.to_string(),
                })
            }
            Ok(Ok(v)) => Ok(v),
        }
    }
}

fn block_text(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(t) => t.text.clone(),
        ContentBlock::Image(_) => "[image]".to_owned(),
        ContentBlock::Audio(_) => "[audio]".to_owned(),
        ContentBlock::Resource(r) => match &r.resource {
            rmcp::model::ResourceContents::TextResourceContents { text, .. } => text.clone(),
            other => format!("[resource {}]", resource_uri(other)),
        },
        ContentBlock::ResourceLink(r) => format!("[resource {}]", r.uri),
        _ => "[content]".to_owned(),
    }
}

fn resource_uri(r: &rmcp::model::ResourceContents) -> &str {
    match r {
        rmcp::model::ResourceContents::TextResourceContents { uri, .. } => uri,
        rmcp::model::ResourceContents::BlobResourceContents { uri, .. } => uri,
        _ => "",
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The server `name` of `servers`, or an error text listing the names
/// there are.
pub fn find<'a>(servers: &'a [McpServer], name: &str) -> Result<&'a McpServer, String> {
    servers.iter().find(|s| s.name == name).ok_or_else(|| {
        let known: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
        format!("no MCP server named {name:?} in this thread (it has: {known:?})")
    })
}
