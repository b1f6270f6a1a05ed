//! `RegisterMcpServerRequest.config` (the A3S proto) into the SDK-neutral
//! [`McpServer`] the shared client takes, with errors naming the field.

use code_agent_proto::{McpServerConfigProto, mcp_transport};
use sdk_adapter::{McpServer, McpTransport, Secret, valid_server_name};

/// The server `config` describes, or an error naming the bad field.
pub(crate) fn from_proto(config: McpServerConfigProto) -> Result<(McpServer, bool), String> {
    if !valid_server_name(&config.name) {
        return Err(format!(
            "config.name: {:?} is not a usable MCP server name (1 to 64 of A-Z a-z 0-9 _ -, no \"__\")",
            config.name
        ));
    }
    let mut env: Vec<(String, Secret)> = config
        .env
        .into_iter()
        .map(|(k, v)| (k, Secret::new(v)))
        .collect();
    env.sort_by(|a, b| a.0.cmp(&b.0));
    let transport = match config.transport.and_then(|t| t.transport) {
        None => return Err("config.transport: neither stdio nor http is set".into()),
        Some(mcp_transport::Transport::Stdio(s)) => {
            if s.command.is_empty() {
                return Err("config.transport.stdio.command: required".into());
            }
            McpTransport::Stdio {
                command: s.command,
                args: s.args,
                env,
            }
        }
        Some(mcp_transport::Transport::Http(h)) => {
            if !(h.url.starts_with("http://") || h.url.starts_with("https://")) {
                return Err("config.transport.http.url: must be an http:// or https:// URL".into());
            }
            let mut headers: Vec<(String, Secret)> = h
                .headers
                .into_iter()
                .map(|(k, v)| (k, Secret::new(v)))
                .collect();
            headers.sort_by(|a, b| a.0.cmp(&b.0));
            McpTransport::StreamableHttp {
                url: h.url,
                bearer_token: None,
                headers,
            }
        }
    };
    Ok((
        McpServer {
            server_id: config.name.clone(),
            name: config.name,
            transport,
        },
        config.enabled,
    ))
}
