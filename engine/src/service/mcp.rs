//! The five MCP RPCs. Each may carry the request metadata
//! [`crate::mcp::SESSION_METADATA`] naming a session: then it works on that
//! session's servers (and sees the global ones, but cannot connect or
//! disconnect them), else on the global scope (the operator's).
//! Tool names are `mcp__<server>__<tool>`; `input_schema` is the tool's
//! JSON schema as a string.

use std::sync::Arc;

use code_agent_proto::*;
use tonic::{Request, Status};

use super::Service;
use crate::mcp::{self, Scope};

impl Service {
    /// The scope named by the request's metadata (the session must exist).
    fn mcp_scope<T>(&self, request: &Request<T>) -> Result<Scope, Status> {
        Ok(self.scoped_session(request)?.map(|s| s.id.clone()))
    }

    /// The sandbox a stdio server of `scope` starts in: its session's
    /// workspace's, or the default workspace's for a global server.
    fn mcp_sandbox(&self, scope: &Scope) -> Result<Arc<agent_launcher::ThreadSandbox>, String> {
        let workspace = match scope {
            Some(id) => {
                let session = self.engine.session(id).map_err(|s| s.message().to_owned())?;
                self.engine
                    .workspace_of(&session)
                    .map_err(|s| s.message().to_owned())?
            }
            None => self.engine.default_workspace().ok_or_else(|| {
                "a global stdio MCP server runs in the engine's default workspace, and there is none (--workspace, or Initialize)".to_owned()
            })?,
        };
        self.engine.sandboxes.for_workspace(&workspace)
    }

    pub(super) async fn register_mcp_server(
        &self,
        request: Request<RegisterMcpServerRequest>,
    ) -> Result<RegisterMcpServerResponse, Status> {
        let scope = self.mcp_scope(&request)?;
        let config = request
            .into_inner()
            .config
            .ok_or_else(|| Status::invalid_argument("config: required"))?;
        let (server, enabled) = mcp::from_proto(config).map_err(Status::invalid_argument)?;
        let name = server.name.clone();
        self.engine.mcp.register(scope, server, enabled);
        Ok(RegisterMcpServerResponse {
            success: true,
            message: format!("MCP server {name} registered"),
        })
    }

    pub(super) async fn connect_mcp_server(
        &self,
        request: Request<ConnectMcpServerRequest>,
    ) -> Result<ConnectMcpServerResponse, Status> {
        let scope = self.mcp_scope(&request)?;
        let name = request.into_inner().name;
        if name.is_empty() {
            return Err(Status::invalid_argument("name: required"));
        }
        let connected = self
            .engine
            .mcp
            .connect(&scope, &name, |s| self.mcp_sandbox(s))
            .await;
        Ok(match connected {
            Ok(tools) => ConnectMcpServerResponse {
                success: true,
                message: format!("connected to MCP server {name}: {} tools", tools.len()),
                tool_names: tools
                    .iter()
                    .map(|t| format!("{}{name}__{}", mcp::TOOL_PREFIX, t.name))
                    .collect(),
            },
            Err(message) => ConnectMcpServerResponse {
                success: false,
                message,
                tool_names: Vec::new(),
            },
        })
    }

    pub(super) async fn disconnect_mcp_server(
        &self,
        request: Request<DisconnectMcpServerRequest>,
    ) -> Result<DisconnectMcpServerResponse, Status> {
        let scope = self.mcp_scope(&request)?;
        let name = request.into_inner().name;
        let success = self
            .engine
            .mcp
            .disconnect(&scope, &name)
            .map_err(Status::permission_denied)?;
        Ok(DisconnectMcpServerResponse { success })
    }

    pub(super) async fn list_mcp_servers(
        &self,
        request: Request<ListMcpServersRequest>,
    ) -> Result<ListMcpServersResponse, Status> {
        let scope = self.mcp_scope(&request)?;
        Ok(ListMcpServersResponse {
            servers: self
                .engine
                .mcp
                .list(&scope)
                .into_iter()
                .map(|s| McpServerInfo {
                    name: s.name,
                    connected: s.connected,
                    enabled: s.enabled,
                    tool_count: s.tool_count,
                    error: s.error,
                })
                .collect(),
        })
    }

    pub(super) async fn get_mcp_tools(
        &self,
        request: Request<GetMcpToolsRequest>,
    ) -> Result<GetMcpToolsResponse, Status> {
        let scope = self.mcp_scope(&request)?;
        let server = request.into_inner().server_name.filter(|s| !s.is_empty());
        Ok(GetMcpToolsResponse {
            tools: self
                .engine
                .mcp
                .tools(&scope, server.as_deref())
                .into_iter()
                .map(|t| McpToolInfo {
                    full_name: t.full_name(),
                    server_name: t.server.clone(),
                    tool_name: t.tool.name.clone(),
                    description: t.tool.description.clone().unwrap_or_default(),
                    input_schema: t.tool.input_schema.to_string(),
                })
                .collect(),
        })
    }
}
