//! MCP servers of the engine: registered, connected and
//! disconnected through the five MCP RPCs, their tools joining the agent
//! loop as `mcp__<server>__<tool>`.
//!
//! Servers are global (the RPCs as the proto defines them) or scoped to one
//! session (the RPC carried [`SESSION_METADATA`]): a session sees its own
//! servers and the global ones, its own shadowing a global one of the same
//! name; no session sees another's. A session's servers go with it. The
//! global servers are the operator's: a session uses their tools but
//! cannot connect, disconnect or replace them (registering a name it sees
//! as global registers its own server, which shadows the global one for it
//! alone).
//!
//! The client is the shared `mcp-client` crate (the official Rust SDK,
//! `rmcp`): a stdio server starts through the sandbox of the workspace it
//! serves (the session's, or the engine's default workspace for a global
//! one), like every tool process. A server that exits is noticed on the next
//! call or listing: it is reported in `ListMcpServers.error`, its tools
//! leave the loop, and `ConnectMcpServer` connects it again.

mod convert;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use mcp_client::{McpClient, ToolInfo};
use sdk_adapter::McpServer;

pub(crate) use convert::from_proto;

/// The request metadata key that scopes an MCP RPC to one session.
pub const SESSION_METADATA: &str = "x-code-agent-session-id";
/// How long connecting to a server (start plus handshake) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one MCP tool call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// The prefix of every MCP tool's name in the agent loop.
pub const TOOL_PREFIX: &str = "mcp__";

/// Which servers an RPC or a session sees: `None` is the global scope.
pub(crate) type Scope = Option<String>;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    session: Scope,
    name: String,
}

struct Entry {
    config: McpServer,
    enabled: bool,
    client: Option<Arc<McpClient>>,
    tools: Vec<ToolInfo>,
    error: Option<String>,
}

/// One server as `ListMcpServers` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerStatus {
    pub name: String,
    pub connected: bool,
    pub enabled: bool,
    pub tool_count: u32,
    pub error: Option<String>,
}

/// One tool of a connected server.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct McpTool {
    pub server: String,
    pub tool: ToolInfo,
}

impl McpTool {
    /// `mcp__<server>__<tool>`.
    pub fn full_name(&self) -> String {
        format!("{TOOL_PREFIX}{}__{}", self.server, self.tool.name)
    }
}

/// Every MCP server of the engine.
#[derive(Default)]
pub(crate) struct McpManager {
    servers: Mutex<HashMap<Key, Entry>>,
}

impl McpManager {
    fn lock(&self) -> MutexGuard<'_, HashMap<Key, Entry>> {
        self.servers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The key `name` resolves to for `scope`: the scope's own server,
    /// else the global one.
    fn resolve(&self, scope: &Scope, name: &str) -> Option<Key> {
        let servers = self.lock();
        let own = Key {
            session: scope.clone(),
            name: name.to_owned(),
        };
        if servers.contains_key(&own) {
            return Some(own);
        }
        let global = Key {
            session: None,
            name: name.to_owned(),
        };
        servers.contains_key(&global).then_some(global)
    }

    /// Registers (or replaces, disconnecting the old one) a server in
    /// `scope`.
    pub fn register(&self, scope: Scope, config: McpServer, enabled: bool) {
        let key = Key {
            session: scope,
            name: config.name.clone(),
        };
        let old = self.lock().insert(
            key,
            Entry {
                config,
                enabled,
                client: None,
                tools: Vec::new(),
                error: None,
            },
        );
        // Dropping the old client ends its session and kills its process.
        drop(old);
    }

    /// Connects `name` (as `scope` sees it) and lists its tools; an error
    /// text otherwise (also kept for `ListMcpServers`).
    pub async fn connect(
        &self,
        scope: &Scope,
        name: &str,
        sandbox: impl FnOnce(&Scope) -> Result<Arc<agent_launcher::ThreadSandbox>, String>,
    ) -> Result<Vec<ToolInfo>, String> {
        let key = self.owned(scope, name)?;
        let (config, enabled, live) = {
            let servers = self.lock();
            let Some(entry) = servers.get(&key) else {
                return Err(format!("no MCP server named {name:?} is registered"));
            };
            let live = entry
                .client
                .as_ref()
                .filter(|c| !c.is_closed())
                .map(|_| entry.tools.clone());
            (entry.config.clone(), entry.enabled, live)
        };
        if !enabled {
            return Err(format!("MCP server {name} is disabled"));
        }
        if let Some(tools) = live {
            return Ok(tools);
        }
        let sandbox = match &config.transport {
            sdk_adapter::McpTransport::Stdio { .. } => Some(sandbox(&key.session)?),
            sdk_adapter::McpTransport::StreamableHttp { .. } => None,
        };
        let connected = async {
            let client = mcp_client::connect(&config, sandbox.as_deref(), CONNECT_TIMEOUT)
                .await
                .map_err(|e| e.to_string())?;
            let tools = client
                .list_tools(CONNECT_TIMEOUT)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((client, tools))
        }
        .await;
        let mut servers = self.lock();
        let Some(entry) = servers.get_mut(&key) else {
            return Err(format!("MCP server {name} was removed while connecting"));
        };
        match connected {
            Ok((client, tools)) => {
                entry.client = Some(Arc::new(client));
                entry.tools = tools.clone();
                entry.error = None;
                Ok(tools)
            }
            Err(error) => {
                entry.client = None;
                entry.tools.clear();
                entry.error = Some(error.clone());
                Err(error)
            }
        }
    }

    /// The key of `name` that `scope` may connect or disconnect: its own
    /// server; a global one only for the global scope.
    fn owned(&self, scope: &Scope, name: &str) -> Result<Key, String> {
        let key = self
            .resolve(scope, name)
            .ok_or_else(|| format!("no MCP server named {name:?} is registered"))?;
        if &key.session != scope {
            return Err(format!(
                "MCP server {name} is the operator's (registered without a session): a session connects and disconnects only its own servers"
            ));
        }
        Ok(key)
    }

    /// Disconnects `name`; its tools leave the loop. `Ok(false)` when there
    /// is no such server, `Err` when it is a global one and `scope` a
    /// session.
    pub fn disconnect(&self, scope: &Scope, name: &str) -> Result<bool, String> {
        let key = match self.owned(scope, name) {
            Ok(key) => key,
            Err(_) if self.resolve(scope, name).is_none() => return Ok(false),
            Err(refused) => return Err(refused),
        };
        let mut servers = self.lock();
        let Some(entry) = servers.get_mut(&key) else {
            return Ok(false);
        };
        entry.client = None;
        entry.tools.clear();
        entry.error = None;
        Ok(true)
    }

    /// Drops every server of `session` (the session is gone).
    pub fn forget_session(&self, session: &str) {
        self.lock()
            .retain(|key, _| key.session.as_deref() != Some(session));
    }

    /// Marks servers whose connection ended as crashed.
    fn notice_exits(servers: &mut HashMap<Key, Entry>) {
        for entry in servers.values_mut() {
            if entry.client.as_ref().is_some_and(|c| c.is_closed()) {
                entry.client = None;
                entry.tools.clear();
                entry.error = Some(
                    "the server's connection ended (it exited or crashed); ConnectMcpServer reconnects it"
                        .into(),
                );
            }
        }
    }

    /// The servers `scope` sees, by name.
    pub fn list(&self, scope: &Scope) -> Vec<ServerStatus> {
        let mut servers = self.lock();
        Self::notice_exits(&mut servers);
        let mut visible: HashMap<&str, &Entry> = HashMap::new();
        for (key, entry) in servers.iter().filter(|(k, _)| k.session.is_none()) {
            visible.insert(&key.name, entry);
        }
        if scope.is_some() {
            for (key, entry) in servers.iter().filter(|(k, _)| &k.session == scope) {
                visible.insert(&key.name, entry);
            }
        }
        let mut out: Vec<ServerStatus> = visible
            .into_iter()
            .map(|(name, e)| ServerStatus {
                name: name.to_owned(),
                connected: e.client.is_some(),
                enabled: e.enabled,
                tool_count: u32::try_from(e.tools.len()).unwrap_or(u32::MAX),
                error: e.error.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// The tools of the connected servers `scope` sees (of `server` only,
    /// when given), sorted by full name.
    pub fn tools(&self, scope: &Scope, server: Option<&str>) -> Vec<McpTool> {
        let mut servers = self.lock();
        Self::notice_exits(&mut servers);
        let mut by_name: HashMap<&str, &Entry> = HashMap::new();
        for (key, entry) in servers.iter() {
            let visible = key.session.is_none() || (scope.is_some() && &key.session == scope);
            if !visible || server.is_some_and(|s| s != key.name) {
                continue;
            }
            // A session's own server shadows a global one of that name.
            if key.session.is_none() && by_name.contains_key(key.name.as_str()) {
                continue;
            }
            by_name.insert(&key.name, entry);
        }
        let mut out: Vec<McpTool> = by_name
            .into_iter()
            .filter(|(_, e)| e.client.is_some())
            .flat_map(|(name, e)| {
                e.tools.iter().map(|t| McpTool {
                    server: name.to_owned(),
                    tool: t.clone(),
                })
            })
            .collect();
        out.sort_by_key(McpTool::full_name);
        out
    }

    /// Calls `mcp__<server>__<tool>` for session `scope`: the tool's result
    /// (`Err` is a text for the model: unknown tool, server gone, timeout).
    pub async fn call(
        &self,
        scope: &Scope,
        full_name: &str,
        arguments: serde_json::Value,
    ) -> Result<mcp_client::ToolResult, String> {
        let (server, tool) = full_name
            .strip_prefix(TOOL_PREFIX)
            .and_then(|rest| rest.split_once("__"))
            .ok_or_else(|| {
                format!("{full_name:?} is not an MCP tool name (mcp__<server>__<tool>)")
            })?;
        let key = self
            .resolve(scope, server)
            .ok_or_else(|| format!("no MCP server named {server:?} for this session"))?;
        let client = {
            let mut servers = self.lock();
            Self::notice_exits(&mut servers);
            servers
                .get(&key)
                .and_then(|e| e.client.clone())
                .ok_or_else(|| {
                    format!("MCP server {server} is not connected (ListMcpServers says why)")
                })?
        };
        let result = client.call_tool(tool, arguments, CALL_TIMEOUT).await;
        if result.is_err() && client.is_closed() {
            Self::notice_exits(&mut self.lock());
        }
        result.map_err(|e| e.to_string())
    }
}

/// Whether `name` is an MCP tool's name in the loop.
pub(crate) fn is_mcp_tool(name: &str) -> bool {
    name.starts_with(TOOL_PREFIX)
}

/// The specs of the MCP tools session `session` sees, for the model: the
/// tool's description (its server named) and its input schema (an object
/// schema; an absent or non-object one becomes `{"type": "object"}`).
pub(crate) fn specs(manager: &McpManager, session: &str) -> Vec<crate::llm::ToolSpec> {
    manager
        .tools(&Some(session.to_owned()), None)
        .into_iter()
        .map(|t| {
            let mut parameters = t.tool.input_schema.clone();
            if parameters.get("type").and_then(serde_json::Value::as_str) != Some("object") {
                parameters = serde_json::json!({"type": "object"});
            }
            crate::llm::ToolSpec {
                name: t.full_name(),
                description: format!(
                    "{} (tool {} of MCP server {})",
                    t.tool.description.clone().unwrap_or_default(),
                    t.tool.name,
                    t.server
                ),
                parameters,
            }
        })
        .collect()
}
