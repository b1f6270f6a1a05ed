//! The `mcp` step's connections: the thread's MCP servers, each connected
//! on its first call in a turn (through `mcp-client`; a stdio server starts
//! through the thread's sandbox) and closed when the turn ends, so one
//! turn's calls share a server session and no server outlives its turn.

use std::collections::HashMap;
use std::sync::Arc;

use mcp_client::{DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, McpClient, ToolResult};
use sdk_adapter::McpServer;
use sdk_adapter::launcher::ThreadSandbox;

/// A turn's MCP servers and its open connections.
pub(crate) struct Connections {
    servers: Arc<[McpServer]>,
    open: HashMap<String, McpClient>,
}

impl Connections {
    /// No connection yet to any of `servers`.
    pub(crate) fn new(servers: Arc<[McpServer]>) -> Self {
        Self {
            servers,
            open: HashMap::new(),
        }
    }

    /// Calls `tool` of `server` with `arguments`; the error text says what
    /// failed (unknown server, connection, request, timeout).
    pub(crate) async fn call(
        &mut self,
        server: &str,
        tool: &str,
        arguments: serde_json::Value,
        sandbox: Option<&ThreadSandbox>,
    ) -> Result<ToolResult, String> {
        if self.open.get(server).is_some_and(McpClient::is_closed) {
            // The server went away (crashed, exited): connect afresh.
            if let Some(gone) = self.open.remove(server) {
                gone.close().await;
            }
        }
        if !self.open.contains_key(server) {
            let spec = mcp_client::find(&self.servers, server).map_err(|e| {
                format!(
                    "{e}; MCP servers are kept in memory only, so a thread re-opened after a runner restart has none"
                )
            })?;
            let client = mcp_client::connect(spec, sandbox, DEFAULT_CONNECT_TIMEOUT)
                .await
                .map_err(|e| e.to_string())?;
            self.open.insert(server.to_owned(), client);
        }
        let Some(client) = self.open.get(server) else {
            return Err(format!("MCP server {server}: not connected"));
        };
        client
            .call_tool(tool, arguments, DEFAULT_CALL_TIMEOUT)
            .await
            .map_err(|e| e.to_string())
    }

    /// Closes every connection (stdio servers end).
    pub(crate) async fn close(&mut self) {
        for (_, client) in self.open.drain() {
            client.close().await;
        }
    }
}
